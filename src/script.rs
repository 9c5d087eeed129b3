//! The script executor: every change to lock state is one of the Lua scripts in `lua/`, run by
//! EVALSHA through the client's connection.
//!
//! Scripts are loaded when the client connects, so the first lock costs no SCRIPT LOAD. When
//! Redis answers NOSCRIPT (a restart, a failover, `SCRIPT FLUSH`), the executor loads the script
//! and resends once: NOSCRIPT means the script did not run, so the resend cannot act twice.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use redis::{
    Cmd, ErrorKind, FromRedisValue, RedisError, RedisWrite, ServerErrorKind, ToRedisArgs, Value,
};

use crate::connection::Connection;
use crate::error::{Error, Result};

/// One Lua script of `lua/`, embedded in the binary.
#[derive(Debug)]
pub(crate) struct LuaScript {
    name: &'static str,
    source: &'static str,
    sha: OnceLock<String>,
    /// The variant for sharded pub/sub (a Redis 7 cluster): SPUBLISH for PUBLISH, PUBSUB
    /// SHARDNUMSUB for PUBSUB NUMSUB; its source and SHA.
    sharded: OnceLock<(String, String)>,
}

impl LuaScript {
    const fn new(name: &'static str, source: &'static str) -> Self {
        LuaScript {
            name,
            source,
            sha: OnceLock::new(),
            sharded: OnceLock::new(),
        }
    }

    pub(crate) fn sha(&self) -> &str {
        self.sha
            .get_or_init(|| redis::Script::new(self.source).get_hash().to_owned())
    }

    fn sharded(&self) -> &(String, String) {
        self.sharded.get_or_init(|| {
            let source = self
                .source
                .replace("call('publish',", "call('spublish',")
                .replace("'pubsub', 'numsub'", "'pubsub', 'shardnumsub'");
            let sha = redis::Script::new(&source).get_hash().to_owned();
            (source, sha)
        })
    }

    /// The source to load: the sharded variant when `sharded`.
    fn source_for(&self, sharded: bool) -> &str {
        if sharded {
            &self.sharded().0
        } else {
            self.source
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
    ($($ident:ident => $file:literal),* $(,)?) => {
        $(pub(crate) static $ident: LuaScript =
            LuaScript::new($file, include_str!(concat!("../lua/", $file, ".lua")));)*
        /// Every script, for loading them all at connect time.
        pub(crate) static ALL: &[&LuaScript] = &[$(&$ident),*];
    };
}

scripts! {
    LOCK_ACQUIRE => "lock_acquire",
    LOCK_RELEASE => "lock_release",
    LOCK_HANDOVER => "lock_handover",
    LOCK_RENEW => "lock_renew",
    LOCK_REPAIR => "lock_repair",
    LOCK_FORCE_UNLOCK => "lock_force_unlock",
    LOCK_INSPECT => "lock_inspect",
    LOCK_STARVING_LEAVE => "lock_starving_leave",
    RWLOCK_READ_ACQUIRE => "rwlock_read_acquire",
    RWLOCK_READ_RELEASE => "rwlock_read_release",
    RWLOCK_READ_RENEW => "rwlock_read_renew",
    RWLOCK_WRITE_ACQUIRE => "rwlock_write_acquire",
    RWLOCK_WRITE_RELEASE => "rwlock_write_release",
    RWLOCK_REPAIR => "rwlock_repair",
    RWLOCK_WRITER_LEAVE => "rwlock_writer_leave",
    FAIR_ACQUIRE => "fair_acquire",
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
}

/// One invocation of a script: its keys, then its arguments.
///
/// Every key and argument is written into one buffer, so a call costs two allocations however
/// many parts it has (the client's allocations are the largest part of its cost per lock
/// operation: see `benches/allocs.rs`).
#[derive(Debug)]
pub(crate) struct ScriptCall {
    script: &'static LuaScript,
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
    fn of_kind(&self, keys: bool) -> impl Iterator<Item = &[u8]> {
        self.parts
            .iter()
            .enumerate()
            .filter(move |(_, (_, key))| *key == keys)
            .map(|(i, (start, _))| {
                let end = self.parts.get(i + 1).map_or(self.bytes.len(), |p| p.0);
                &self.bytes[*start..end]
            })
    }

    /// What a refusal names: the script and every key it was given.
    fn describe(&self) -> String {
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

    fn evalsha(&self, sharded: bool) -> Cmd {
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

/// Runs scripts and commands on the client's command connection, each within a hard time cap.
#[derive(Clone)]
pub(crate) struct Executor {
    conn: Arc<Connection>,
    cap: Duration,
    /// Scripts publish with SPUBLISH (a Redis 7 cluster, where waiters SSUBSCRIBE).
    sharded: bool,
    /// Replica-synced grants: their own connection (WAIT blocks it), and how many replicas
    /// must acknowledge within how long.
    synced: Option<(Arc<Connection>, u32, Duration)>,
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor").field("cap", &self.cap).finish()
    }
}

impl Executor {
    pub(crate) fn new(conn: Arc<Connection>, cap: Duration) -> Self {
        Executor {
            conn,
            cap,
            sharded: false,
            synced: None,
        }
    }

    /// Sends grants through `conn` followed by `WAIT acks timeout` (see [`run_synced`]).
    ///
    /// [`run_synced`]: Self::run_synced
    pub(crate) fn with_synced(
        mut self,
        conn: Arc<Connection>,
        acks: u32,
        timeout: Duration,
    ) -> Self {
        self.synced = Some((conn, acks, timeout));
        self
    }

    /// Runs a grant script; with replica-synced grants configured, follows it with `WAIT` on
    /// the synced connection and answers how many replicas acknowledged it, with how many
    /// were wanted (`None` without synced grants).
    pub(crate) async fn run_synced<T: FromRedisValue>(
        &self,
        call: &ScriptCall,
        key: &str,
    ) -> Result<(T, Option<(u32, u32)>)> {
        let Some(synced) = &self.synced else {
            return Ok((self.run(call, key).await?, None));
        };
        // Boxed: a pipeline, a timer and a reload are more than the unsynced path should carry.
        Box::pin(self.run_with_wait(call, key, synced)).await
    }

    /// [`run_synced`](Self::run_synced) on a client whose grants wait for replicas.
    async fn run_with_wait<T: FromRedisValue>(
        &self,
        call: &ScriptCall,
        key: &str,
        (conn, acks, timeout): &(Arc<Connection>, u32, Duration),
    ) -> Result<(T, Option<(u32, u32)>)> {
        let refused = |e| Error::from_redis_request(e, key, || call.describe());
        let mut pipe = redis::pipe();
        pipe.add_command(call.evalsha(self.sharded))
            .cmd("WAIT")
            .arg(*acks)
            .arg(timeout.as_millis() as u64);
        let cap = self.cap + *timeout;
        let sent = capped(cap, conn.send_pipeline::<(Value, i64)>(&pipe)).await;
        let (value, acked) = match sent {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                self.load(call.script).await.map_err(refused)?;
                capped(cap, conn.send_pipeline::<(Value, i64)>(&pipe))
                    .await
                    .map_err(refused)?
            }
            other => other.map_err(refused)?,
        };
        let value = T::from_redis_value(value)
            .map_err(|e| Error::unexpected(format!("{}: {e}", call.script.name)))?;
        let acked = u32::try_from(acked).unwrap_or(0);
        Ok((value, Some((acked, *acks))))
    }

    /// Makes scripts publish with SPUBLISH (see [`Executor::probe_sharded`]).
    pub(crate) fn with_sharded(mut self, sharded: bool) -> Self {
        self.sharded = sharded;
        self
    }

    /// The connection's target.
    pub(crate) fn target(&self) -> &crate::topology::Target {
        self.conn.target()
    }

    /// Forgets the command connection: the next command opens a new one.
    pub(crate) fn reopen(&self) {
        self.conn.reopen();
    }

    /// A call found a server away or silent, or a cluster's masters changed (see
    /// [`Connection::suspect`]).
    pub(crate) fn suspect(&self) {
        self.conn.suspect();
    }

    /// Changes whenever the command connection dropped, was given up or was opened again (see
    /// [`Connection::changes`]).
    pub(crate) fn connection_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.conn.changes()
    }

    /// Whether the servers speak sharded pub/sub: a cluster of Redis 7 or later (Redisson
    /// 3.22+ uses it there, so ferrisson must too for Java and Rust waiters to wake each
    /// other). A single server or a sentinel's master keeps classic pub/sub, as Redisson does.
    pub(crate) async fn probe_sharded(&self) -> bool {
        if !self.conn.target().is_cluster() {
            return false;
        }
        let mut cmd = redis::cmd("PUBSUB");
        cmd.arg("SHARDNUMSUB").arg("ferrisson:probe");
        self.query(&cmd).await.is_ok()
    }

    /// Runs a script; `key` names the object in errors.
    pub(crate) async fn run<T: FromRedisValue>(&self, call: &ScriptCall, key: &str) -> Result<T> {
        let value = self
            .run_value(call)
            .await
            .map_err(|e| Error::from_redis_request(e, key, || call.describe()))?;
        T::from_redis_value(value)
            .map_err(|e| Error::unexpected(format!("{}: {e}", call.script.name)))
    }

    async fn run_value(&self, call: &ScriptCall) -> std::result::Result<Value, RedisError> {
        let cmd = call.evalsha(self.sharded);
        match self.query(&cmd).await {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                tracing::debug!(script = call.script.name, "NOSCRIPT: loading and resending");
                // Rare (a restarted or flushed server): boxed, so the common path's future
                // does not carry a second send.
                Box::pin(async {
                    self.load(call.script).await?;
                    self.query(&cmd).await
                })
                .await
            }
            other => other,
        }
    }

    /// Runs a script that may be sent any number of times (an undo), in the background's way:
    /// tried again, 100 ms apart doubling to 2 s, until Redis answers or `for_at_most` has
    /// passed. The error is the last one, once it gave up.
    pub(crate) async fn run_until_answered(
        &self,
        call: &ScriptCall,
        key: &str,
        for_at_most: Duration,
    ) -> Result<Value> {
        let give_up = tokio::time::Instant::now() + for_at_most;
        let mut pause = Duration::from_millis(100);
        loop {
            match self.run::<Value>(call, key).await {
                Ok(value) => return Ok(value),
                Err(e) if tokio::time::Instant::now() >= give_up => return Err(e),
                Err(e) => {
                    tracing::debug!(script = call.script.name, object = %key, error = %e, "retrying");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(2));
                }
            }
        }
    }

    /// Loads every script: in one round trip on one server; on a cluster, each script to
    /// every node (a pipeline there goes to one node only).
    pub(crate) async fn load_all(&self) -> Result<()> {
        let refused = |e| Error::from_redis_request(e, "", || "SCRIPT LOAD".into());
        let shas: Vec<String> = if self.conn.target().is_cluster() {
            let loads = ALL.iter().map(|script| async move {
                let mut cmd = redis::cmd("SCRIPT");
                cmd.arg("LOAD").arg(script.source_for(self.sharded));
                let sha = self.query(&cmd).await?;
                String::from_redis_value(sha).map_err(RedisError::from)
            });
            futures::future::try_join_all(loads)
                .await
                .map_err(refused)?
        } else {
            let mut pipe = redis::pipe();
            for script in ALL {
                pipe.cmd("SCRIPT")
                    .arg("LOAD")
                    .arg(script.source_for(self.sharded));
            }
            capped(self.cap, self.conn.send_pipeline(&pipe))
                .await
                .map_err(refused)?
        };
        for (script, sha) in ALL.iter().zip(&shas) {
            if sha != script.sha_for(self.sharded) {
                return Err(Error::unexpected(format!(
                    "SCRIPT LOAD of {} answered {sha}, expected {}",
                    script.name,
                    script.sha_for(self.sharded)
                )));
            }
        }
        Ok(())
    }

    async fn load(&self, script: &LuaScript) -> std::result::Result<(), RedisError> {
        let mut cmd = redis::cmd("SCRIPT");
        cmd.arg("LOAD").arg(script.source_for(self.sharded));
        self.query(&cmd).await.map(drop)
    }

    /// Sends one plain read-only command; `key` names the object in errors. Changing nothing,
    /// it is sent again on a new connection when the connection dropped under it.
    pub(crate) async fn read<T: FromRedisValue>(&self, cmd: &Cmd, key: &str) -> Result<T> {
        let send = || async {
            self.query(cmd).await.map_err(|e| {
                Error::from_redis_request(e, key, || {
                    let name = match cmd.args_iter().next() {
                        Some(redis::Arg::Simple(name)) => {
                            String::from_utf8_lossy(name).into_owned()
                        }
                        _ => "a read of".to_owned(),
                    };
                    format!("{name} {key}")
                })
            })
        };
        let value = match send().await {
            Err(e) if e.connection_dropped() => send().await,
            other => other,
        }?;
        T::from_redis_value(value).map_err(|e| Error::unexpected(format!("{key}: {e}")))
    }

    /// Runs a read-only script, sent again on a new connection when the connection dropped
    /// under it (it changes nothing, so that is safe); `key` names the object in errors.
    pub(crate) async fn run_read<T: FromRedisValue>(
        &self,
        call: &ScriptCall,
        key: &str,
    ) -> Result<T> {
        match self.run(call, key).await {
            Err(e) if e.connection_dropped() => self.run(call, key).await,
            other => other,
        }
    }

    async fn query(&self, cmd: &Cmd) -> std::result::Result<Value, RedisError> {
        self.conn.send(cmd, self.cap).await
    }
}

/// Bounds a Redis future by `cap`, turning the overrun into an I/O timeout error: the command
/// may still run on the server, and callers treat the outcome as unknown.
pub(crate) async fn capped<T>(
    cap: Duration,
    fut: impl std::future::Future<Output = std::result::Result<T, RedisError>>,
) -> std::result::Result<T, RedisError> {
    match tokio::time::timeout(cap, fut).await {
        Ok(result) => result,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no reply from redis within {cap:?}"),
        )
        .into()),
    }
}

#[cfg(test)]
#[path = "script_tests.rs"]
mod tests;
