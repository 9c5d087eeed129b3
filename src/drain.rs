//! A client's drain on SIGTERM or SIGINT (see
//! [`Client::close_on_signal`](crate::Client::close_on_signal)): the client refuses new
//! acquisitions ([`Error::Draining`](crate::Error::Draining)) while the holds it has keep their
//! leases until their work gives them back, or until its drain grace runs out.
//!
//! A client holds nothing once no guard of it stands for a hold (the [live](crate::live)
//! list is empty) and no release of it is under way (a dropped guard's, or an `unlock` still
//! awaited: both are counted as [pending](crate::pending) work). Only then may the process end
//! without leaving a lock to its lease.

use std::time::Duration;

use crate::config::ClientBuilder;
use crate::core::Core;
use crate::signal::Signal;

/// The drain grace a client has unless told otherwise: below the 30 s Kubernetes waits
/// between SIGTERM and SIGKILL, so the holds left are given back before the kill.
pub(crate) const DEFAULT_GRACE: Duration = Duration::from_secs(25);

impl ClientBuilder {
    /// How long the process's first SIGTERM or SIGINT lets this client's holds finish their
    /// work before they are given back (see
    /// [`Client::close_on_signal`](crate::Client::close_on_signal)). Meanwhile the client
    /// refuses new acquisitions with [`Error::Draining`](crate::Error::Draining), and the
    /// watchdog goes on renewing the holds it has.
    ///
    /// Set it below the time the process is given between SIGTERM and SIGKILL (Kubernetes'
    /// `terminationGracePeriodSeconds`, 30 s by default; `docker stop`'s 10 s; systemd's
    /// `TimeoutStopSec`, 90 s), with room for the give-back itself (at most twice the response
    /// timeout). Zero gives every hold back at once, as a second signal does.
    ///
    /// Default is 25 s; at most a day.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo() -> ferrisson::Result<()> {
    /// use std::time::Duration;
    ///
    /// // `docker stop` sends SIGKILL 10 s after SIGTERM.
    /// let client = ferrisson::Client::builder()
    ///     .url("redis://127.0.0.1:6379")
    ///     .drain_grace(Duration::from_secs(7))
    ///     .build()
    ///     .await?;
    /// client.close_on_signal()?;
    /// # Ok(()) }
    /// ```
    pub fn drain_grace(mut self, grace: Duration) -> Self {
        self.drain_grace = grace;
        self
    }
}

impl Core {
    /// Starts the drain: from now on a new acquisition is refused. The first signal counts.
    pub(crate) fn start_draining(&self, signal: Signal) {
        let _ = self.draining.set(signal);
    }

    /// Waits until the client holds nothing, at most its drain grace; `false` when the grace
    /// ran out first. With a zero grace, only says whether it holds nothing now.
    pub(crate) async fn drained(&self) -> bool {
        let deadline = tokio::time::Instant::now() + self.config.drain_grace;
        let holds = &self.pending.holds;
        let drained = async {
            loop {
                holds.emptied().await;
                let within = deadline.saturating_duration_since(tokio::time::Instant::now());
                let left = self.pending.settled(within).await;
                // A release that was under way may have been one of a hold still listed (a
                // reentrant guard's), or a waiter granted meanwhile may hold again: look again.
                if left.is_empty() && holds.is_empty() {
                    return;
                }
                if !left.is_empty() {
                    // The grace is over (settled waited up to the deadline).
                    std::future::pending::<()>().await;
                }
            }
        };
        tokio::time::timeout_at(deadline, drained).await.is_ok()
    }
}
