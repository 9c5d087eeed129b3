//! What the watchdog does for the client's presence (see [`presence`](crate::presence)): count
//! every hold another client may take over lost when the presence is in doubt past its grace,
//! and hold acquisitions back meanwhile.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{Shared, Watchdog};

impl Watchdog {
    /// What the presence task calls while in doubt past its deadline: counts every hold that
    /// another client may take over (a lock's, not permits) lost; answers how many it marked.
    pub(crate) fn loser(&self) -> impl Fn() -> usize + Send + 'static {
        let shared = Arc::downgrade(&self.shared);
        move || shared.upgrade().map_or(0, |shared| lose_takeovers(&shared))
    }

    /// Waits, at most `within`, while the client's presence is in doubt past its deadline (see
    /// [`Doubt::past`]): a hold taken then would be lost as soon as it is taken. Answers how
    /// long it waited (`None`: not at all). Cancel safe.
    pub(crate) async fn presence_settled(&self, within: Duration) -> Option<Duration> {
        let doubt = self.doubt.as_ref().filter(|d| d.past())?;
        let started = Instant::now();
        let _ = tokio::time::timeout(within, doubt.settled()).await;
        Some(started.elapsed())
    }

    /// Whether the client holds anything the watchdog keeps, for the presence task.
    pub(crate) fn holding(&self) -> impl Fn() -> bool + Send + 'static {
        let shared = Arc::downgrade(&self.shared);
        move || {
            shared
                .upgrade()
                .is_some_and(|shared| !shared.registry().entries.is_empty())
        }
    }
}

/// Counts every hold another client may take over lost (see [`Watchdog::loser`]).
fn lose_takeovers(shared: &Shared) -> usize {
    let mut registry = shared.registry();
    let mut lost = 0;
    registry.entries.retain(|_, entry| {
        let renewal = &entry.renewal;
        if !renewal.target.may_be_taken_over() {
            return true;
        }
        if !renewal.lease.is_lost() {
            crate::observe::lease_lost(
                &renewal.labels,
                renewal.target.key(),
                crate::observe::Lost::Expired,
                None,
            );
            renewal.lease.mark_lost();
            lost += 1;
        }
        false
    });
    lost
}
