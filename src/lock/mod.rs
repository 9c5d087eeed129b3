//! The lock family. Every kind (`plain`, `fair`, `rwlock`, the handles `rlock` and `fenced`)
//! plugs its scripts ([`ops`]) into one engine, whose rooms import in one direction, in the
//! order a `lock()` walks through them:
//!
//! - [`handle`]: what a handle and its clones share, and whose an acquisition is: a new
//!   [`owner`] (its [`holds`]), or the owner of the hold whose [`scope`] the caller runs in;
//! - [`holder`]: one owner's holds worked through one kind: the watchdog registration, repairs;
//! - [`acquire`]: attempts and waiting ([`wait`], [`handover`] inside one client), with
//!   [`in_flight`] repairing what a dropped or unanswered attempt may have left, and
//!   [`self_wait`] watching a wait for a hold of the waiter's own task;
//! - [`guard`]: the hold as the caller has it, and its release ([`release`], [`leftover`]);
//! - [`scoped`]: nesting (`with_lock`, `reenter`, `scope`), [`bounded`]: work under a hold of
//!   any object (`try_with_lock_for`), and [`observed`]: the spans.

mod acquire;
pub(crate) mod bounded;
mod fair;
mod fenced;
mod guard;
mod handle;
pub(crate) mod handover;
pub(crate) mod holder;
mod holds;
mod in_flight;
mod leftover;
mod observed;
mod ops;
pub(crate) mod owner;
mod plain;
mod release;
mod replies;
mod rlock;
mod rwlock;
pub(crate) mod scope;
pub(crate) mod scoped;
pub(crate) mod self_wait;
pub(crate) mod wait;

use std::time::Duration;

pub(crate) use fair::FairOps;
pub use fair::RFairLock;
pub use fenced::RFencedLock;
pub use guard::LockGuard;
pub(crate) use handle::ClientLocks;
pub use rlock::RLock;
pub use rwlock::{RReadWriteLock, RwPolicy};

use crate::error::{Error, Result};
pub(crate) use crate::lease::MAX_LEASE;

/// A lease given by the caller, checked and in milliseconds.
pub(crate) fn lease_ms(lease: Duration) -> Result<u64> {
    if lease < Duration::from_millis(1) {
        return Err(Error::InvalidArgument(format!(
            "a lease must be at least 1 ms, got {lease:?}"
        )));
    }
    if lease > MAX_LEASE {
        return Err(Error::InvalidArgument(format!(
            "a lease of {lease:?} is longer than the {MAX_LEASE:?} allowed"
        )));
    }
    Ok(lease.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_are_checked() {
        assert!(matches!(
            lease_ms(Duration::ZERO),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            lease_ms(Duration::from_micros(999)),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            lease_ms(Duration::MAX),
            Err(Error::InvalidArgument(_))
        ));
        assert_eq!(lease_ms(Duration::from_millis(1500)).unwrap(), 1500);
    }
}
