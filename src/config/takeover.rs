//! How soon a dead holder's locks may be taken over (see `presence`).

use std::time::Duration;

use super::ClientBuilder;
use crate::error::{Error, Result};

impl ClientBuilder {
    /// How soon after this client's process is found gone its lock holds may be taken over by
    /// other clients, instead of at the end of their lease; `None` turns takeover off (for this
    /// client's holds and for its waiters).
    ///
    /// The client keeps a connection of its own subscribed to a channel of its own. When a
    /// process dies on a live machine (`kill -9`, an OOM kill, a panic that aborts) the kernel
    /// closes its connections and Redis drops the subscription at once; a waiter that has
    /// waited half a second and finds the holder's channel still empty this long later takes
    /// the hold over. With the default of 2 s, another client has a dead holder's lock within
    /// about 2 s.
    ///
    /// The holder, in turn, counts its holds lost (tells [`lost`]) this long after its
    /// presence was last confirmed, less a margin for the clocks, whenever it cannot tell that
    /// its subscription stands. On one server a connection that drops and comes back within
    /// the grace (a Redis restart that quick) costs nothing, one down for longer costs the
    /// holds; behind sentinels the grace counts from the last confirmation (every half second),
    /// and a master that does not answer one counts as a master that may be being replaced, so
    /// a failover, or a pause of the master, longer than about the grace costs them. On one
    /// server a Redis that is paused or a runtime that is blocked drops no connection and costs
    /// nothing; a machine that is lost or cut off keeps the lease rule (no FIN reaches Redis).
    ///
    /// Needs the client's [`identity`](Self::identity), which says the grace; works on one
    /// server (alone, or a sentinel's master), not on a cluster, where it is off. Holds of
    /// clients without it (Java Redisson, an older ferrisson, identities off) keep the lease
    /// rule, and so do permits. Between 1 s and a day; default 2 s, or off with
    /// [`sync_replicas`](Self::sync_replicas), whose holds are meant to survive a failover
    /// (set both to have both). See
    /// [what a death costs](crate::guide::lifecycle#what-a-death-costs).
    ///
    /// [`lost`]: crate::LockGuard::lost
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo() -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// let client = ferrisson::Client::builder()
    ///     .url("redis://127.0.0.1:6379")
    ///     .takeover_grace(Some(Duration::from_secs(5)))
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn takeover_grace(mut self, grace: Option<Duration>) -> Self {
        self.takeover_grace = Some(grace);
        self
    }
}

/// The grace `asked` for (`None`: not set), or the default: 2 s, or none with replica-synced
/// grants (`synced`), which are there to survive a failover that takeover would not let a hold
/// survive. Between 1 s and a day.
pub(super) fn checked(asked: Option<Option<Duration>>, synced: bool) -> Result<Option<Duration>> {
    let grace = match asked {
        Some(grace) => grace,
        None if synced => None,
        None => Some(crate::presence::DEFAULT_GRACE),
    };
    match grace {
        Some(g) if g < Duration::from_secs(1) || g > Duration::from_secs(24 * 3600) => {
            Err(Error::Config(format!(
                "takeover_grace must be between 1s and a day, got {g:?}"
            )))
        }
        grace => Ok(grace),
    }
}
