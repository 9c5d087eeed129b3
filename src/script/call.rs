//! The scripts of `lua/` and the encoding of one call of one.

use std::sync::OnceLock;

use redis::{Cmd, RedisWrite, ToRedisArgs};

/// One Lua script of `lua/`, embedded in the binary.
#[derive(Debug)]
pub(crate) struct LuaScript {
    pub(super) name: &'static str,
    source: &'static str,
    sha: OnceLock<String>,
    /// The variant for sharded pub/sub (a Redis 7 cluster): SPUBLISH for PUBLISH, PUBSUB
    /// SHARDNUMSUB for PUBSUB NUMSUB; its source and SHA.
    sharded: OnceLock<(String, String)>,
    /// The list form, which runs many operations of this kind in one call (see
    /// `lua/list_head.lua`), for the kinds concurrent callers send most.
    listed: Option<&'static LuaScript>,
}

impl LuaScript {
    const fn new(
        name: &'static str,
        source: &'static str,
        listed: Option<&'static LuaScript>,
    ) -> Self {
        LuaScript {
            name,
            source,
            sha: OnceLock::new(),
            sharded: OnceLock::new(),
            listed,
        }
    }

    /// The script's file name, for logs and errors.
    pub(crate) fn name(&self) -> &'static str {
        self.name
    }

    /// The list form of this script, if it has one.
    pub(crate) fn listed(&self) -> Option<&'static LuaScript> {
        self.listed
    }

    /// `SCRIPT LOAD` of the script (its sharded variant when `sharded`).
    pub(crate) fn load_cmd(&self, sharded: bool) -> Cmd {
        let mut cmd = redis::cmd("SCRIPT");
        cmd.arg("LOAD").arg(self.source_for(sharded));
        cmd
    }

    /// The script's text as Redis runs it (without the sharded rewrite).
    pub(super) fn text(&self) -> &'static str {
        self.source
    }

    pub(crate) fn sha(&self) -> &str {
        self.sha
            .get_or_init(|| redis::Script::new(self.text()).get_hash().to_owned())
    }

    pub(super) fn sharded(&self) -> &(String, String) {
        self.sharded.get_or_init(|| {
            let source = self
                .text()
                .replace("call('publish',", "call('spublish',")
                .replace("'pubsub', 'numsub'", "'pubsub', 'shardnumsub'");
            let sha = redis::Script::new(&source).get_hash().to_owned();
            (source, sha)
        })
    }

    /// The source to load: the sharded variant when `sharded`.
    pub(crate) fn source_for(&self, sharded: bool) -> &str {
        if sharded {
            &self.sharded().0
        } else {
            self.text()
        }
    }

    /// The SHA to call: the sharded variant's when `sharded`.
    pub(crate) fn sha_for(&self, sharded: bool) -> &str {
        if sharded {
            &self.sharded().1
        } else {
            self.sha()
        }
    }
}

macro_rules! scripts {
    ($($ident:ident => $file:literal $([$($prelude:literal),*])?
        $(listed as $listed:ident $([$($shared:literal),*])?)?),* $(,)?) => {
        $(pub(crate) static $ident: LuaScript = LuaScript::new(
            $file,
            concat!(
                $($(include_str!(concat!("../../lua/", $prelude, ".lua")),)*)?
                include_str!(concat!("../../lua/", $file, ".lua")),
            ),
            scripts!(@listed $($listed)?),
        );
        // The list form: list_head.lua (which defines server_time(), as lua/clock.lua would),
        // the other preludes, the script as the body of the function that runs one operation,
        // list_tail.lua.
        $(pub(crate) static $listed: LuaScript = LuaScript::new(
            concat!($file, " (list form)"),
            concat!(
                include_str!("../../lua/list_head.lua"),
                $($(include_str!(concat!("../../lua/", $shared, ".lua")),)*)?
                "local function one(KEYS, ARGV)\n",
                include_str!(concat!("../../lua/", $file, ".lua")),
                include_str!("../../lua/list_tail.lua"),
            ),
            None,
        );)?)*
        /// Every script, for loading them all at connect time.
        pub(crate) static ALL: &[&LuaScript] = &[$(&$ident $(, &$listed)?),*];
    };
    (@listed $listed:ident) => { Some(&$listed) };
    (@listed) => { None };
}

scripts! {
    LOCK_ACQUIRE => "lock_acquire" ["clock", "presence"] listed as LOCK_ACQUIRE_LIST ["presence"],
    LOCK_RELEASE => "lock_release" listed as LOCK_RELEASE_LIST,
    LOCK_HANDOVER => "lock_handover" ["clock"] listed as LOCK_HANDOVER_LIST,
    LOCK_RENEW => "lock_renew",
    HOLDS_PRESENT => "holds_present",
    LOCK_REPAIR => "lock_repair",
    LOCK_FORCE_UNLOCK => "lock_force_unlock",
    LOCK_INSPECT => "lock_inspect",
    INSPECT => "inspect",
    LOCK_STARVING_LEAVE => "lock_starving_leave",
    RWLOCK_READ_ACQUIRE => "rwlock_read_acquire" ["presence", "rwlock_presence"],
    RWLOCK_READ_RELEASE => "rwlock_read_release",
    RWLOCK_READ_RENEW => "rwlock_read_renew",
    RWLOCK_WRITE_ACQUIRE => "rwlock_write_acquire" ["presence", "rwlock_presence"],
    RWLOCK_WRITE_RELEASE => "rwlock_write_release",
    RWLOCK_REPAIR => "rwlock_repair",
    RWLOCK_WRITER_LEAVE => "rwlock_writer_leave",
    FAIR_ACQUIRE => "fair_acquire" ["presence"],
    FAIR_RELEASE => "fair_release",
    FAIR_LEAVE => "fair_leave",
    LATCH_TRY_SET => "latch_try_set",
    LATCH_COUNT_DOWN => "latch_count_down",
    LATCH_DELETE => "latch_delete",
    SEMAPHORE_ACQUIRE => "semaphore_acquire",
    SEMAPHORE_UNDO => "semaphore_undo",
    SEMAPHORE_RELEASE => "semaphore_release",
    SEMAPHORE_SET => "semaphore_set",
    PERMIT_ACQUIRE => "permit_acquire",
    PERMIT_RELEASE => "permit_release",
    PERMIT_RENEW => "permit_renew",
    PERMIT_SET => "permit_set",
    REVOKE => "revoke",
    CLIENT_IDENTITY => "client_identity",
    CLIENT_BEAT => "client_beat",
}

/// One invocation of a script: its keys, then its arguments.
///
/// Every key and argument is written into one buffer, so a call costs two allocations however
/// many parts it has (the client's allocations are the largest part of its cost per lock
/// operation: see `benches/allocs.rs`).
#[derive(Debug, Clone)]
pub(crate) struct ScriptCall {
    pub(super) script: &'static LuaScript,
    /// The keys and arguments, back to back.
    bytes: Vec<u8>,
    /// Where each key or argument starts in `bytes` (it ends where the next one starts), and
    /// whether it is a key.
    parts: Vec<(usize, bool)>,
}

impl ScriptCall {
    pub(crate) fn new(script: &'static LuaScript) -> Self {
        ScriptCall {
            script,
            // A release's keys and arguments (a name, its channel and latch key, an owner and
            // a request id, both with a UUID) take about 200 bytes.
            bytes: Vec::with_capacity(256),
            parts: Vec::with_capacity(8),
        }
    }

    pub(crate) fn key(mut self, key: impl ToRedisArgs) -> Self {
        key.write_redis_args(&mut Parts {
            call: &mut self,
            keys: true,
        });
        self
    }

    pub(crate) fn arg(mut self, arg: impl ToRedisArgs) -> Self {
        arg.write_redis_args(&mut Parts {
            call: &mut self,
            keys: false,
        });
        self
    }

    /// One key written in pieces, without building it first (`prefix:{name}:id` and such).
    pub(crate) fn key_concat(self, pieces: &[&str]) -> Self {
        self.concat(pieces, true)
    }

    /// One argument written in pieces, without building it first (`<owner>:write`).
    pub(crate) fn arg_concat(self, pieces: &[&str]) -> Self {
        self.concat(pieces, false)
    }

    fn concat(mut self, pieces: &[&str], key: bool) -> Self {
        self.parts.push((self.bytes.len(), key));
        for piece in pieces {
            self.bytes.extend_from_slice(piece.as_bytes());
        }
        self
    }

    /// The keys, or the arguments, in the order they were given.
    pub(super) fn of_kind(&self, keys: bool) -> impl Iterator<Item = &[u8]> {
        self.parts
            .iter()
            .enumerate()
            .filter(move |(_, (_, key))| *key == keys)
            .map(|(i, (start, _))| {
                let end = self.parts.get(i + 1).map_or(self.bytes.len(), |p| p.0);
                &self.bytes[*start..end]
            })
    }

    /// The first key: the object the call acts on.
    pub(super) fn first_key(&self) -> &[u8] {
        self.of_kind(true).next().unwrap_or_default()
    }

    /// One call of `list` (a list form, see `lua/list_head.lua`) that runs every call of
    /// `calls`, in order; every call must be of the kind `list` lists.
    pub(super) fn list_evalsha(list: &LuaScript, calls: &[&ScriptCall], sharded: bool) -> Cmd {
        let keys: usize = calls.iter().map(|c| c.of_kind(true).count()).sum();
        let parts: usize = calls.iter().map(|c| c.parts.len() + 2).sum();
        let bytes: usize = calls.iter().map(|c| c.bytes.len() + 8).sum();
        let mut cmd = Cmd::with_capacity(3 + parts, 67 + bytes);
        cmd.arg("EVALSHA").arg(list.sha_for(sharded)).arg(keys);
        for call in calls {
            for key in call.of_kind(true) {
                cmd.arg(key);
            }
        }
        for call in calls {
            let args = call.of_kind(false).count();
            cmd.arg(call.parts.len() - args).arg(args);
            for arg in call.of_kind(false) {
                cmd.arg(arg);
            }
        }
        cmd
    }

    /// What a refusal names: the script and every key it was given.
    pub(super) fn describe(&self) -> String {
        let keys: Vec<String> = self
            .of_kind(true)
            .map(|k| String::from_utf8_lossy(k).into_owned())
            .collect();
        format!(
            "script {} (EVALSHA) with keys [{}]",
            self.script.name,
            keys.join(", ")
        )
    }

    pub(super) fn evalsha(&self, sharded: bool) -> Cmd {
        let keys = self.parts.iter().filter(|(_, key)| *key).count();
        // EVALSHA, the SHA (40 bytes) and the key count (at most 20 digits), then the parts.
        let mut cmd = Cmd::with_capacity(3 + self.parts.len(), 67 + self.bytes.len());
        cmd.arg("EVALSHA")
            .arg(self.script.sha_for(sharded))
            .arg(keys);
        for part in self.of_kind(true).chain(self.of_kind(false)) {
            cmd.arg(part);
        }
        cmd
    }
}

/// `evalsha` (an EVALSHA of `script`, alone or in its list form) as an EVAL of the script's
/// source, with the same keys and arguments: the answer to NOSCRIPT. EVAL runs and caches the
/// script in one command, so no `SCRIPT FLUSH`, restart or failover can come between a load and
/// its call; and it goes where the EVALSHA went (it names the same keys), where a keyless
/// `SCRIPT LOAD` may reach another node of a cluster. The source is sent only in this rare case.
pub(super) fn as_eval(evalsha: &Cmd, script: &LuaScript, sharded: bool) -> Cmd {
    let source = script.source_for(sharded);
    let mut cmd = Cmd::with_capacity(evalsha.args_iter().count(), source.len() + 64);
    cmd.arg("EVAL").arg(source);
    // Our EVALSHA commands hold plain arguments only (no cursor).
    for arg in evalsha.args_iter().skip(2) {
        if let redis::Arg::Simple(bytes) = arg {
            cmd.arg(bytes);
        }
    }
    cmd
}

/// Writes keys or arguments into a [`ScriptCall`].
struct Parts<'a> {
    call: &'a mut ScriptCall,
    keys: bool,
}

impl RedisWrite for Parts<'_> {
    fn write_arg(&mut self, arg: &[u8]) {
        self.call.parts.push((self.call.bytes.len(), self.keys));
        self.call.bytes.extend_from_slice(arg);
    }

    fn write_arg_fmt(&mut self, arg: impl std::fmt::Display) {
        use std::io::Write as _;
        self.call.parts.push((self.call.bytes.len(), self.keys));
        // Writing into a Vec cannot fail.
        let _ = write!(self.call.bytes, "{arg}");
    }

    fn writer_for_next_arg(&mut self) -> impl std::io::Write + '_ {
        self.call.parts.push((self.call.bytes.len(), self.keys));
        &mut self.call.bytes
    }

    fn reserve_space_for_args(&mut self, additional: impl IntoIterator<Item = usize>) {
        let mut count = 0;
        let mut bytes = 0;
        for size in additional {
            count += 1;
            bytes += size;
        }
        self.call.parts.reserve(count);
        self.call.bytes.reserve(bytes);
    }
}
