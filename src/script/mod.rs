//! The script executor: every change to lock state is one of the Lua scripts in `lua/`, run by
//! EVALSHA through the client's connection.
//!
//! Scripts are loaded when the client connects, so the first lock costs no SCRIPT LOAD. When
//! Redis answers NOSCRIPT (a restart, a failover, `SCRIPT FLUSH`), the executor sends the same
//! call once more as an EVAL of the script's source: NOSCRIPT means the script did not run, so
//! the resend cannot act twice, and an EVAL cannot meet NOSCRIPT, so no caller ever sees it
//! (see [`call::as_eval`] for why not a `SCRIPT LOAD` and a second EVALSHA).

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use redis::{Cmd, ErrorKind, FromRedisValue, RedisError, ServerErrorKind, Value};

mod call;
mod commit;

pub(crate) use call::*;

use crate::connection::Connection;
use crate::deadline::capped;
use crate::error::{Error, Result};

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
    /// Group commit of the kinds that have a list form (see [`commit`]); `None` when off.
    commit: Option<Arc<commit::Commit>>,
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
            commit: None,
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
    pub(crate) async fn run_synced<T: FromRedisValue + Send>(
        &self,
        call: &ScriptCall,
        key: &str,
    ) -> Result<(T, Option<(u32, u32)>)> {
        let Some(synced) = &self.synced else {
            return Ok((self.run(call, key).await?, None));
        };
        // Boxed: a pipeline, a timer and a reload are more than the unsynced path should carry.
        // As `dyn`, so that their types do not deepen every grant's future either (see
        // `Connection::with`).
        let with_wait: BoxFuture<'_, _> = Box::pin(self.run_with_wait(call, key, synced));
        with_wait.await
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
            Err(e) if is_noscript(&e) => {
                // The script's reply first, then WAIT on the same connection: it waits for the
                // replicas to have every write sent on it so far, the script's included.
                let evalsha = call.evalsha(self.sharded);
                let value = after_noscript(conn, self.cap, &evalsha, call.script, self.sharded)
                    .await
                    .map_err(refused)?;
                let mut wait = redis::cmd("WAIT");
                wait.arg(*acks).arg(timeout.as_millis() as u64);
                let acked = conn.send(&wait, cap).await.map_err(refused)?;
                let acked = i64::from_redis_value(acked)
                    .map_err(|e| Error::unexpected(format!("WAIT: {e}")))?;
                (value, acked)
            }
            other => other.map_err(refused)?,
        };
        let value = T::from_redis_value(value)
            .map_err(|e| Error::unexpected(format!("{}: {e}", call.script.name)))?;
        let acked = u32::try_from(acked).unwrap_or(0);
        Ok((value, Some((acked, *acks))))
    }

    /// Turns group commit on: operations of a kind with a list form that find one of their kind
    /// on its way queue, and leave together in one call when it is back (see [`commit`]). Set
    /// after [`with_sharded`](Self::with_sharded). `fallback`: where a list is sent from when
    /// the caller that passes it on is not on a multi-thread runtime.
    pub(crate) fn with_group_commit(mut self, fallback: Option<tokio::runtime::Handle>) -> Self {
        self.commit = Some(Arc::new(commit::Commit::new(
            self.conn.clone(),
            self.cap,
            self.sharded,
            fallback,
        )));
        self
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
        // Held while the call is on its way alone: passes its lane on when dropped.
        let mut _turn = None;
        if let Some(commit) = &self.commit {
            commit.settle(call).await;
            if !crate::connection::wants_own() {
                match commit.enter(call) {
                    Some(commit::Entry::Listed(waiting)) => return waiting.await,
                    Some(commit::Entry::Alone(turn)) => _turn = Some(turn),
                    None => {}
                }
            }
        }
        let cmd = call.evalsha(self.sharded);
        match self.query(&cmd).await {
            Err(e) if is_noscript(&e) => {
                // Rare (a restarted, failed-over or flushed server): boxed, so the common
                // path's future does not carry a second send.
                Box::pin(after_noscript(
                    &self.conn,
                    self.cap,
                    &cmd,
                    call.script,
                    self.sharded,
                ))
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
                let sha = self.query(&script.load_cmd(self.sharded)).await?;
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

    /// Whether the server knows what the scripts use that is newest: `SET … GET` (Redis 6.2;
    /// the fencing counters are moved with it). Asked once, at connect, as `SET
    /// ferrisson_token:probe 0 XX GET`, which writes nothing (the key never exists: it is no
    /// slot's counter, those carry a hash tag) and is in the README's ACL rule's reach. An older
    /// server answers a syntax error: `false`; a script that met it would stop halfway, or go on
    /// with the error as a counter's value. Any other answer (an ACL user refused the key, a
    /// server out of memory, no answer in time) tells nothing of the version: `true`, and the
    /// calls that follow meet what the probe met, with their own errors.
    pub(crate) async fn has_set_get(&self) -> bool {
        let mut probe = redis::cmd("SET");
        probe
            .arg("ferrisson_token:probe")
            .arg(0)
            .arg("XX")
            .arg("GET");
        match self.query(&probe).await {
            Err(e)
                if e.code() == Some("ERR") && e.detail().is_some_and(|d| d.contains("syntax")) =>
            {
                false
            }
            Err(e) => {
                tracing::debug!(error = %e, "the server's version probe (SET … XX GET) failed");
                true
            }
            Ok(_) => true,
        }
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

    /// Sends one read-only command to the master that serves `slot` (see
    /// [`Connection::send_to_slot`]); `what` names it in errors.
    pub(crate) async fn read_on_slot<T: FromRedisValue>(
        &self,
        cmd: &Cmd,
        slot: u16,
        what: &str,
    ) -> Result<T> {
        let value = self
            .conn
            .send_to_slot(cmd, slot, self.cap)
            .await
            .map_err(|e| Error::from_redis_request(e, "", || what.to_owned()))?;
        T::from_redis_value(value).map_err(|e| Error::unexpected(format!("{what}: {e}")))
    }

    /// Every key name matching `pattern` on the master that serves `slot` (`SCAN … MATCH`, a
    /// thousand keys a call, sorted and each once: SCAN may name a key twice when the keyspace
    /// is resized under it). Names that are not UTF-8 are left out: ferrisson writes none.
    pub(crate) async fn scan_on_slot(&self, slot: u16, pattern: &str) -> Result<Vec<String>> {
        let mut keys = Vec::new();
        let mut cursor = 0u64;
        loop {
            let mut scan = redis::cmd("SCAN");
            scan.arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(1000);
            let (next, found): (u64, Vec<Vec<u8>>) = self
                .read_on_slot(&scan, slot, &format!("SCAN MATCH {pattern}"))
                .await?;
            keys.extend(found.into_iter().filter_map(|k| String::from_utf8(k).ok()));
            if next == 0 {
                keys.sort_unstable();
                keys.dedup();
                return Ok(keys);
            }
            cursor = next;
        }
    }

    /// One slot served by each master: 0 on one server (a Sentinel's master included), on a
    /// Cluster the first slot of each master's first range in `CLUSTER SLOTS`.
    pub(crate) async fn master_slots(&self) -> Result<Vec<u16>> {
        use redis::Value;
        if !self.target().is_cluster() {
            return Ok(vec![0]);
        }
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("SLOTS");
        let reply: Value = self.read(&cmd, "CLUSTER SLOTS").await?;
        let odd = || Error::unexpected(format!("CLUSTER SLOTS answered {reply:?}"));
        let Value::Array(ranges) = &reply else {
            return Err(odd());
        };
        let mut masters: Vec<(&Value, u16)> = Vec::new();
        for range in ranges {
            let Value::Array(fields) = range else {
                return Err(odd());
            };
            // [first slot, last slot, [ip, port, node id, ...] of the master, replicas...]
            let (Some(Value::Int(first)), Some(Value::Array(master))) =
                (fields.first(), fields.get(2))
            else {
                return Err(odd());
            };
            let node = master.get(2).or(master.first()).ok_or_else(odd)?;
            if !masters.iter().any(|(seen, _)| *seen == node) {
                masters.push((node, u16::try_from(*first).map_err(|_| odd())?));
            }
        }
        Ok(masters.into_iter().map(|(_, slot)| slot).collect())
    }

    async fn query(&self, cmd: &Cmd) -> std::result::Result<Value, RedisError> {
        self.conn.send(cmd, self.cap).await
    }
}

/// Whether Redis answered NOSCRIPT: the script is not in its cache, and did not run.
pub(crate) fn is_noscript(e: &RedisError) -> bool {
    e.kind() == ErrorKind::Server(ServerErrorKind::NoScript)
}

/// The answer to NOSCRIPT: `evalsha` (of `script`) sent again on `conn` as an EVAL of the
/// script's source (see [`as_eval`]); the reply is the script's.
///
/// A user whose ACL rule was written before the client sent EVAL (it grants `evalsha` and
/// `script|load` only) is refused the EVAL. The script is then loaded and the EVALSHA sent
/// again, as older versions did, and a warning names the permission to grant: that way leaves
/// a window in which another flush (or, on a cluster, a load that reached other nodes) lets
/// NOSCRIPT through.
pub(crate) async fn after_noscript(
    conn: &Connection,
    cap: Duration,
    evalsha: &Cmd,
    script: &LuaScript,
    sharded: bool,
) -> std::result::Result<Value, RedisError> {
    tracing::debug!(
        script = script.name(),
        "NOSCRIPT: sending the script's source"
    );
    match conn.send(&as_eval(evalsha, script, sharded), cap).await {
        // NOPERM is also what a command inside the script answers when the user may not run
        // it: then the EVALSHA below is refused the same way, and that is the caller's answer.
        Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoPerm) => {
            conn.send(&script.load_cmd(sharded), cap).await?;
            let sent = conn.send(evalsha, cap).await;
            if sent.is_ok() {
                warn_eval_refused();
            }
            sent
        }
        other => other,
    }
}

/// Once per process: the ACL user may not run EVAL (see [`after_noscript`]).
fn warn_eval_refused() {
    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
        tracing::warn!(
            "Redis refused EVAL to this client's ACL user: after an emptied script cache (a \
             restart, a failover, SCRIPT FLUSH) scripts are loaded and called again, which a \
             second flush can still interrupt with a NOSCRIPT error. Grant +eval to the user \
             (see the README's ACL rule)"
        );
    }
}

#[cfg(test)]
mod tests;
