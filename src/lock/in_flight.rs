//! The drop guards of an acquire: a wait that may have queued the owner, and an acquire that
//! may have run on the server (repaired when dropped).

use std::sync::atomic::AtomicBool;

use tokio::sync::OwnedMutexGuard;

use crate::lock::holder::Holder;
use crate::lock::holds::Holds;

/// A wait that may have put the owner in a lock's queue; dropped while armed (the caller gave
/// up mid-wait), it takes the owner out in the background.
pub(super) struct Queued<'a> {
    pub(super) holder: &'a Holder,
    pub(super) armed: AtomicBool,
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        if *self.armed.get_mut() {
            let holder = self.holder.clone();
            self.holder
                .inner()
                .spawn(async move { holder.leave_queue().await });
        }
    }
}

/// An acquire that may have run on the server. Dropped while armed, it spawns the repair that
/// sets the server back to the hold count the owner knows, keeping the owner's mutex until the
/// repair is done.
pub(super) struct InFlight {
    pub(super) holder: Holder,
    pub(super) holds: Option<OwnedMutexGuard<Holds>>,
    /// The lease the acquire asked for: how long a grant it may have left behind lives.
    pub(super) lease_ms: u64,
}

impl InFlight {
    pub(super) fn disarm(&mut self) -> OwnedMutexGuard<Holds> {
        self.holds
            .take()
            .expect("an in-flight acquire is disarmed once")
    }

    /// Whether the server is known to match the client's count again.
    pub(super) async fn repair(&mut self) -> bool {
        match &mut self.holds {
            // Boxed: a rare path, kept out of every acquire's future.
            Some(holds) => Box::pin(repair(&self.holder, holds, self.lease_ms)).await,
            None => false,
        }
    }
}

/// Sets the server back to `holds` after an acquire (asking for `sent_lease_ms`) whose outcome
/// is unknown; when Redis does not answer, tries again in the background. Returns whether the
/// server is known to match `holds` now.
async fn repair(holder: &Holder, holds: &mut Holds, sent_lease_ms: u64) -> bool {
    let lease_ms = holds.lease.as_ref().map_or(0, |l| l.lease_ms());
    match holder.repair_to(&holder.owner, holds.count, lease_ms).await {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(lock = %holder.name(), error = %e, "repair after an unknown acquire outcome failed; a leftover is set right in the background");
            holder.taint(holds, sent_lease_ms.max(lease_ms));
            false
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some(holds) = self.holds.take() {
            let holder = self.holder.clone();
            let lease_ms = self.lease_ms;
            self.holder.inner().spawn(async move {
                let mut holds = holds;
                repair(&holder, &mut holds, lease_ms).await;
                drop(holds);
            });
        }
    }
}
