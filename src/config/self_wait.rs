//! The builder's settings of what an acquisition gets that waits for a hold its own task (or,
//! outside any task, its own thread) keeps: the deadlock of code that expects a second
//! `lock()` to be reentrant, as in Java (see the guide's [wait for your own
//! hold](crate::guide::semantics#a-wait-for-your-own-hold)).

use std::time::Duration;

use super::ClientBuilder;
use crate::error::{Error, Result};

/// What an acquisition that waits for a hold its own task (or thread) keeps gets (see
/// `lock::self_wait`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct SelfWait {
    /// After how long such a wait logs a WARN (then every ten times as long).
    pub(crate) warning: Duration,
    /// Refuse such an acquisition at once with `Error::SelfWait` instead.
    pub(crate) fail: bool,
}

impl ClientBuilder {
    /// After how long an acquisition that waits for a hold its own task keeps logs a WARN:
    /// outside any task (the [`blocking`](crate::blocking) API) its own thread. Such a wait
    /// lasts for ever while the watchdog renews that hold (a `lock()` called again where Java
    /// would be reentrant, or a read holder asking for the write side). The WARN names the
    /// lock, where the hold was taken and where the waiting call was made (`file:line:column`),
    /// how long it has waited and how to nest instead; it comes again every ten times `after`
    /// while the wait goes on and the hold stands.
    ///
    /// Correct code that waits for its own task's hold (futures of one task in `join!` or
    /// `buffer_unordered`, a dispatcher whose guards went to workers: the client knows where a
    /// hold was taken, not where its guard is now) logs nothing as long as that holder gives
    /// the lock back within `after`. An acquisition that never waits costs nothing more: the
    /// timer starts with its first refusal.
    ///
    /// Default is 3 s; between 1 ms and a day.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo() -> ferrisson::Result<()> {
    /// use std::time::Duration;
    ///
    /// let client = ferrisson::Client::builder()
    ///     .url("redis://127.0.0.1:6379")
    ///     // holds of this service last milliseconds: a second of waiting for its own is a bug
    ///     .self_wait_warning(Duration::from_secs(1))
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn self_wait_warning(mut self, after: Duration) -> Self {
        self.self_wait_warning = after;
        self
    }

    /// Whether an acquisition made outside every scope of the lock, for a lock its own task
    /// (outside any task, its own thread) holds, fails at once with
    /// [`Error::SelfWait`](crate::Error::SelfWait) (naming where the hold was taken and where
    /// the call was made), before anything is sent, instead of waiting. Also `try_lock`,
    /// which would otherwise answer `None`, as a Java port would not expect. For ports from
    /// Java and for tests: it finds every place that relies on Java's reentrancy.
    ///
    /// It also refuses code that is correct: futures of one task that take the same lock
    /// (`join_all` of one lock's `lock()`s, `buffer_unordered`), and a dispatcher task that
    /// hands a guard to a worker and locks again while the worker still holds it. The client
    /// knows which task took a hold, not where its guard is now.
    ///
    /// Nested acquisitions are not affected (inside [`RLock::with_lock`](crate::RLock::with_lock)'s
    /// work or [`guard.scope(..)`](crate::LockGuard::scope), or taken with
    /// [`guard.reenter()`](crate::LockGuard::reenter)), nor waits for holds of other tasks or
    /// threads. Each acquisition looks through the holds this client keeps now (a scan, under
    /// a lock, of one entry per live hold) before it is sent.
    ///
    /// Default is false.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo() -> ferrisson::Result<()> {
    /// let client = ferrisson::Client::builder()
    ///     .url("redis://127.0.0.1:6379")
    ///     .fail_on_self_wait(cfg!(test))
    ///     .build()
    ///     .await?;
    /// let lock = client.get_lock("ledger");
    /// let guard = lock.lock().await?;
    /// // The Java way: would wait for `guard` for ever; refused here when failing fast.
    /// if let Err(e @ ferrisson::Error::SelfWait { .. }) = lock.try_lock().await {
    ///     eprintln!("{e}");
    /// }
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn fail_on_self_wait(mut self, on: bool) -> Self {
        self.fail_on_self_wait = on;
        self
    }

    /// The settings checked, for [`check`](Self::check).
    pub(super) fn self_wait(&self) -> Result<SelfWait> {
        let after = self.self_wait_warning;
        let day = Duration::from_secs(24 * 3600);
        if after < Duration::from_millis(1) || after > day {
            return Err(Error::Config(format!(
                "self_wait_warning must be between 1ms and a day, got {after:?}"
            )));
        }
        Ok(SelfWait {
            warning: after,
            fail: self.fail_on_self_wait,
        })
    }
}
