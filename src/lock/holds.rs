//! What the client knows of one owner's holds on one side of a lock: the count, the lease the
//! holds share, and the leftovers an unanswered command may have left on the server. Plain
//! state, kept behind the owner's per-side mutex; the engine's rooms read and move it.

use std::sync::Arc;

use tokio::time::Instant;

use crate::lease::Lease;

#[derive(Debug, Default)]
pub(crate) struct Holds {
    pub(crate) count: u32,
    pub(crate) lease: Option<Arc<Lease>>,
    /// What the client knows of leftovers (see [`leftover`](crate::lock::leftover)).
    pub(crate) leftovers: Leftovers,
}

impl Holds {
    /// The holds the owner has on the server, as far as the client knows.
    pub(crate) fn count(&self) -> u32 {
        self.count
    }

    /// Whether the owner holds the lock with a lease not known to be lost: only then may an
    /// acquire be answered as one more hold of it (sharing its token).
    pub(crate) fn live(&self) -> bool {
        self.count > 0 && self.lease.as_ref().is_some_and(|l| !l.is_lost())
    }
}

/// What a holder knows of its owner's leftovers.
#[derive(Debug, Default)]
pub(crate) struct Leftovers {
    /// The server may count holds of the owner that the client gave up (a release or repair
    /// failed or went unanswered), and a command of it may still reach Redis late.
    pub(crate) tainted: bool,
    /// The owner's leftover (while it holds nothing) was removed since it was tainted.
    pub(crate) removed: bool,
    /// A background task is at work; it stops trying at `until`.
    pub(crate) working: bool,
    pub(crate) until: Option<Instant>,
}

impl Leftovers {
    /// Marks the owner tainted: its leftover goes in the background, and a nested acquisition
    /// finds its hold gone once the owner holds nothing (see [`scope`](crate::lock::scope)).
    pub(crate) fn taint(&mut self) {
        self.tainted = true;
        self.removed = false;
    }

    pub(crate) fn pending(&self, count: u32) -> bool {
        self.tainted && count == 0 && !self.removed
    }
}
