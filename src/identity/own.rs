//! This client's own identity, as it writes it: when it connects, and at each heartbeat with
//! the TTL its holds need (see [`beat_ttl`]).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use uuid::Uuid;

use super::{BEAT_TTL, TTL, key, sites};
use crate::error::{Error, Result};
use crate::script::{CLIENT_BEAT, CLIENT_IDENTITY, Executor, ScriptCall};
use crate::watchdog::Sites;

/// The TTL a beat gives the identity when the longest any hold of the client may still live is
/// `hold_for` (`None`: it holds nothing): [`TTL`] past that, and 2% more for the clocks (a
/// fixed lease's end is counted on this host's clock, Redis counts on its own), so that the
/// identity of a stopped or hung holder outlives every hold it may keep; [`TTL`] when it holds
/// nothing. Rounded up to whole seconds and to 4 significant bits (36 s, 448 s...): a
/// fixed lease's remainder shrinks every beat, and the beat writes the TTL only when it
/// changes, so over a fixed lease of an hour a rounded one is written some 70 times rather
/// than 3600.
pub(crate) fn beat_ttl(hold_for: Option<Duration>) -> Duration {
    let Some(hold_for) = hold_for else {
        return TTL;
    };
    let ms = hold_for.as_millis() + hold_for.as_millis() / 50 + TTL.as_millis();
    let secs = u64::try_from(ms.div_ceil(1000)).unwrap_or(u64::MAX / 2);
    let step = 1u64 << (u64::BITS - secs.leading_zeros()).saturating_sub(4);
    Duration::from_secs(secs.div_ceil(step).saturating_mul(step))
}

/// The identity's field that announces the client's takeover grace, in ms (read by
/// `lua/presence.lua`).
const PRESENCE: &str = "presence_grace_ms";

/// This client's own identity, as it writes it.
#[derive(Debug)]
pub(crate) struct Own {
    key: String,
    /// What the client says of itself, as hash fields and values.
    fields: [(&'static str, String); 4],
    /// When the client started, server unix ms, as the first write stamped it (0 before): a
    /// write after the key was lost keeps the client's first start, not the write's.
    started: AtomicU64,
    /// The moment of this process at which the first write's answer came, and the server's
    /// clock it stamped: puts the client's own moments on the server's clock.
    clock: OnceLock<(std::time::Instant, u64)>,
    /// Held across a beat's calls, so that a beat that found the key gone cannot write it back
    /// after the removal, and beats publish in order.
    state: tokio::sync::Mutex<Beats>,
    /// Set as the removal starts, before it waits for a beat under way: a removal cut short
    /// by `close`'s deadline still stops every later beat.
    removing: std::sync::atomic::AtomicBool,
    /// The takeover grace the identity announces (see [`presence`](crate::presence)), in ms, once
    /// announced: every later write of the whole identity says it too.
    presence: OnceLock<String>,
}

/// What the beats have done.
#[derive(Debug)]
struct Beats {
    /// Whether [`Client::close`](crate::Client::close) removed the identity.
    removed: bool,
    /// The holds' and self-waits' fields as the identity has them (see [`sites`]).
    published: Vec<(&'static str, String)>,
    /// The TTL the identity's last write or beat set (and its `beat_ttl_ms` says), in ms; 0
    /// when unknown (a call that set it failed).
    ttl_ms: u64,
}

impl Own {
    /// The identity of client `id`; `app`: the name set on the builder, if any.
    pub(crate) fn new(id: Uuid, app: Option<String>) -> Self {
        let app = app.unwrap_or_else(executable_name);
        Own {
            key: key(id),
            fields: [
                ("app", app),
                ("host", host_name()),
                ("pid", std::process::id().to_string()),
                ("version", env!("CARGO_PKG_VERSION").to_owned()),
            ],
            started: AtomicU64::new(0),
            clock: OnceLock::new(),
            state: tokio::sync::Mutex::new(Beats {
                removed: false,
                published: sites::fields(&Sites::default(), None),
                ttl_ms: TTL.as_millis() as u64,
            }),
            removing: std::sync::atomic::AtomicBool::new(false),
            presence: OnceLock::new(),
        }
    }

    /// Writes the identity whole, with its TTL (when the client connects).
    pub(crate) async fn write(&self, executor: &Executor) -> Result<()> {
        self.write_with(executor, TTL.as_millis() as u64, &[]).await
    }

    /// Writes the identity whole with `more` fields, with a TTL of `ttl_ms` (which the script
    /// records as `beat_ttl_ms`).
    async fn write_with(
        &self,
        executor: &Executor,
        ttl_ms: u64,
        more: &[(&str, String)],
    ) -> Result<()> {
        let mut call = ScriptCall::new(&CLIENT_IDENTITY).key(&self.key).arg(ttl_ms);
        let first = self.started.load(Ordering::Relaxed) == 0;
        call = match first {
            true => call.arg(""),
            false => call.arg(self.started.load(Ordering::Relaxed)),
        };
        let presence = self.presence.get().map(|ms| (PRESENCE, ms.clone()));
        for (field, value) in self.fields.iter().chain(more).chain(&presence) {
            call = call.arg(*field).arg(value.as_str());
        }
        let started: String = executor.run(&call, &self.key).await?;
        let started = started.parse().map_err(|_| {
            Error::unexpected(format!("client_identity answered the start {started:?}"))
        })?;
        if first {
            // The server's clock now, give or take half a round trip.
            let _ = self.clock.set((std::time::Instant::now(), started));
        }
        self.started.store(started, Ordering::Relaxed);
        Ok(())
    }

    /// The heartbeat's refresh, to the TTL [`beat_ttl`] gives `hold_for` (the longest any hold
    /// of the client may still live): one `PEXPIRE`, or, when `sites` (what the client's holds
    /// and self-waits are now) differ from what the identity says or the TTL differs from the
    /// last beat's, one script that also sets those fields (and `beat_ttl_ms`); the whole
    /// identity again when the key is gone (a restarted or emptied server). Nothing once the
    /// client was closed.
    pub(crate) async fn beat(
        &self,
        executor: &Executor,
        sites: Option<&Sites>,
        hold_for: Option<Duration>,
    ) -> Result<()> {
        let mut state = self.state.lock().await;
        if state.removed || self.removing.load(Ordering::Acquire) {
            return Ok(());
        }
        let ttl_ms = beat_ttl(hold_for).as_millis() as u64;
        let now = sites.map(|s| sites::fields(s, self.clock.get().copied()));
        let changed = now.filter(|now| *now != state.published);
        let new_ttl = (ttl_ms != state.ttl_ms).then(|| (BEAT_TTL, ttl_ms.to_string()));
        if new_ttl.is_some() {
            // Unknown until the answer comes: a call that ran but whose answer was lost may
            // have set it, and a later PEXPIRE must not leave the field saying another TTL.
            state.ttl_ms = 0;
        }
        let kept: i64 = match (&changed, &new_ttl) {
            (None, None) => {
                let mut pexpire = redis::cmd("PEXPIRE");
                pexpire.arg(&self.key).arg(ttl_ms);
                // Sent as a read is (again, once, on a new connection when the first dropped):
                // a second PEXPIRE does what the first did.
                executor.read(&pexpire, &self.key).await?
            }
            (fields, new_ttl) => {
                let mut call = ScriptCall::new(&CLIENT_BEAT).key(&self.key).arg(ttl_ms);
                for (field, value) in fields.iter().flatten().chain(new_ttl) {
                    call = call.arg(*field).arg(value.as_str());
                }
                // Sets what one call would: sent again as a read is.
                executor.run_read(&call, &self.key).await?
            }
        };
        if kept == 0 {
            tracing::debug!(key = %self.key, "the client's identity was gone: writing it again");
            let fields = changed.as_ref().unwrap_or(&state.published);
            self.write_with(executor, ttl_ms, fields).await?;
        }
        if let Some(fields) = changed {
            state.published = fields;
        }
        state.ttl_ms = ttl_ms;
        Ok(())
    }

    /// Says in the identity that its holds may be taken over `grace` after its presence
    /// channel is found empty (see [`presence`](crate::presence)): called once the channel is
    /// subscribed and confirmed. Only while the identity is there (a hash without its TTL would
    /// list a dead client for ever); an identity found gone is written whole, grace included.
    pub(crate) async fn announce(&self, executor: &Executor, grace: Duration) -> Result<()> {
        let ms = grace.as_millis().to_string();
        let _ = self.presence.set(ms.clone());
        let state = self.state.lock().await;
        let call = ScriptCall::new(&CLIENT_BEAT)
            .key(&self.key)
            .arg(state.ttl_ms.max(TTL.as_millis() as u64))
            .arg(PRESENCE)
            .arg(ms.as_str());
        let kept: i64 = executor.run_read(&call, &self.key).await?;
        if kept == 0 {
            self.write_with(executor, TTL.as_millis() as u64, &state.published)
                .await?;
        }
        Ok(())
    }

    /// Removes the identity for good (see [`Client::close`](crate::Client::close)).
    pub(crate) async fn remove(&self, executor: &Executor) -> Result<()> {
        self.removing.store(true, Ordering::Release);
        let mut state = self.state.lock().await;
        state.removed = true;
        let mut del = redis::cmd("DEL");
        del.arg(&self.key);
        // A DEL sent twice removes what one would.
        executor.read::<i64>(&del, &self.key).await.map(drop)
    }
}

/// The executable's file name: what a process is called in `ps` and `top`.
fn executable_name() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|path| path.file_name().map(|n| n.to_string_lossy().into_owned()))
        .or_else(|| {
            let first = std::env::args_os().next()?;
            let name = std::path::Path::new(&first).file_name()?;
            Some(name.to_string_lossy().into_owned())
        })
        .unwrap_or_default()
}

/// The host's name, read where Linux keeps it (the kernel's, then the configured one), else
/// from the environment (`HOSTNAME`, which shells set; `COMPUTERNAME` on Windows); empty when
/// none says. Reading a file needs no new dependency and no `unsafe` (`gethostname(2)` would
/// need both), and covers the hosts servers run on; elsewhere the environment usually does.
fn host_name() -> String {
    let from_files = ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .into_iter()
        .filter_map(|path| std::fs::read_to_string(path).ok());
    let from_env = ["HOSTNAME", "COMPUTERNAME"]
        .into_iter()
        .filter_map(|name| std::env::var(name).ok());
    from_files
        .chain(from_env)
        .map(|name| name.trim().to_owned())
        .find(|name| !name.is_empty())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_beat_keeps_the_identity_past_every_hold() {
        let secs = |s| Some(Duration::from_secs(s));
        assert_eq!(beat_ttl(None), TTL);
        // The default watchdog: 30 s, 0.6 s for the clocks, 5 s: 36 s.
        assert_eq!(beat_ttl(secs(30)), Duration::from_secs(36));
        assert_eq!(
            beat_ttl(Some(Duration::from_millis(1500))),
            Duration::from_secs(7)
        );
        for ms in (0..4_000_000).step_by(997) {
            let hold = Duration::from_millis(ms);
            let ttl = beat_ttl(Some(hold));
            assert!(ttl >= hold + hold / 50 + TTL, "{hold:?}: {ttl:?}");
            let most = (hold + hold / 50 + TTL) * 9 / 8 + Duration::from_secs(1);
            assert!(ttl <= most, "{hold:?}: {ttl:?}");
        }
        // A fixed hour's lease's remainder, beat by beat: a TTL written some 70 times, not 3600.
        let written = (0..3600)
            .map(|s| beat_ttl(secs(3600 - s)))
            .collect::<std::collections::BTreeSet<_>>();
        assert!(written.len() < 80, "{} TTLs", written.len());
    }

    #[test]
    fn the_host_and_executable_are_named() {
        assert!(!executable_name().is_empty());
        assert!(!host_name().is_empty());
    }
}
