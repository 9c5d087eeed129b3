//! Leftover holds: holds the server may still count for an owner after an unlock or a repair
//! whose outcome never reached the client (Redis paused, a connection cut).
//!
//! Two things can go wrong after such an outcome, and each has its answer here:
//! - The leftover keeps the lock taken for other clients until its lease runs out. A background
//!   task removes it as soon as Redis answers again, one task per holder at a time, for a
//!   bounded time.
//! - The unanswered command itself may still reach Redis late (it sat in a socket buffer of a
//!   connection the client gave up), after the same owner was granted the lock anew, and undo
//!   that new grant. Every acquisition is a new owner with a new name, so only an acquire
//!   nested in the owner's scope could meet such a command: an owner with one possibly in
//!   flight is *tainted*, and a nested acquire, once the owner holds nothing on either side of
//!   the lock, works for a new owner instead. A late command can only reach the old name.
//!
//! Whatever the client's view, a new guard never carries an old token: the acquire scripts
//! replace a leftover of an owner that holds nothing live with a fresh grant (see
//! [`LockOps::acquire`](crate::lock::ops::LockOps::acquire)).

use std::sync::Arc;

use std::time::Duration;

use tokio::time::Instant;

use crate::lock::holder::Holder;
use crate::lock::holds::Holds;
use crate::lock::owner::Owner;

/// The first pause before a background retry; it doubles up to [`RETRY_MAX`].
const RETRY: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(2);
/// The longest the background task keeps trying (a leftover's own lease may be longer: it then
/// runs out by itself).
const TRY_FOR: Duration = Duration::from_secs(120);

impl Holder {
    /// An unlock or a repair of the current owner failed or went unanswered, leaving a
    /// possible leftover that a lease of `lease_ms` frees at the latest: remove it in the
    /// background as soon as Redis answers, and work for the owner no more once it holds
    /// nothing.
    pub(super) fn taint(&self, holds: &mut Holds, lease_ms: u64) {
        holds.leftovers.taint();
        self.work_on_leftovers(holds, Duration::from_millis(lease_ms));
    }

    /// Removes the owner's leftover now, when it holds nothing the client knows of but may
    /// still hold on the server; the background removal then finds nothing left to do. One
    /// try: on failure the background removal keeps trying.
    pub(super) async fn remove_leftover_now(&self) -> crate::error::Result<()> {
        let mut holds = self.holds().lock().await;
        if holds.leftovers.pending(holds.count) {
            self.repair_to(&self.owner, 0, 0).await?;
            holds.leftovers.removed = true;
        }
        Ok(())
    }

    /// Makes sure a background task removes the leftovers, trying for at least `within`.
    fn work_on_leftovers(&self, holds: &mut Holds, within: Duration) {
        let leftovers = &mut holds.leftovers;
        let until = Instant::now() + within.min(TRY_FOR);
        leftovers.until = Some(leftovers.until.map_or(until, |u| u.max(until)));
        if leftovers.working {
            return;
        }
        leftovers.working = true;
        let holder = self.clone();
        self.inner()
            .spawn(async move { holder.remove_leftovers().await });
    }

    async fn remove_leftovers(self) {
        let mut pause = RETRY;
        let mut changes = self.inner().executor.connection_changes();
        changes.borrow_and_update();
        loop {
            // The next try comes after the pause, or at once when the client reconnects: a
            // server back from an outage frees the lock without waiting out a long pause.
            let reconnected = async {
                if changes.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            };
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                () = reconnected => {}
            }
            let mut holds = self.holds().lock().await;
            let mut failure = None;
            // The owner, holding nothing the client knows of: its leftover goes. It stays
            // tainted (a late command may still come): no acquire works for it again.
            if holds.leftovers.tainted && holds.count == 0 && !holds.leftovers.removed {
                match self.repair_to(&self.owner, 0, 0).await {
                    Ok(()) => holds.leftovers.removed = true,
                    Err(e) => failure = Some(e),
                }
            }
            let pending = holds.leftovers.pending(holds.count);
            let expired = holds.leftovers.until.is_none_or(|u| Instant::now() >= u);
            if !pending || expired {
                if let (true, Some(e)) = (pending, failure) {
                    tracing::warn!(lock = %self.name(), error = %e, "gave up removing a leftover hold; its lease frees it");
                }
                holds.leftovers.working = false;
                holds.leftovers.until = None;
                return;
            }
            drop(holds);
            pause = (pause * 2).min(RETRY_MAX);
        }
    }
}

/// Removes in the background every hold of `owner`, a waiter of this client whose handed-over
/// hold could not be taken back (no acquire works for that name again), trying for
/// at most `lease_ms` (the hold's lease frees it then).
pub(super) fn take_back_later(holder: Holder, owner: Arc<Owner>, lease_ms: u64) {
    let until = Instant::now() + Duration::from_millis(lease_ms).min(TRY_FOR);
    let inner = holder.handle.core.clone();
    inner.spawn(async move {
        let mut pause = RETRY;
        loop {
            tokio::time::sleep(pause).await;
            match holder.repair_to(&owner, 0, 0).await {
                Ok(()) => return,
                Err(e) if Instant::now() >= until => {
                    tracing::warn!(lock = %holder.name(), error = %e, "gave up taking back a handed-over hold; its lease frees it");
                    return;
                }
                Err(_) => pause = (pause * 2).min(RETRY_MAX),
            }
        }
    });
}
