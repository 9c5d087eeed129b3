//! The lock family. Every kind plugs its scripts into one engine ([`holder`]): hold counting,
//! the waiting loop, cancellation repair, watchdog registration and the guard.

mod fair;
mod fenced;
mod guard;
pub(crate) mod handover;
pub(crate) mod holder;
mod in_flight;
mod leftover;
mod observed;
mod plain;
mod release;
mod replies;
mod rlock;
mod rwlock;
pub(crate) mod wait;

use std::time::Duration;

pub(crate) use fair::FairOps;
pub use fair::RFairLock;
pub use fenced::RFencedLock;
pub use guard::LockGuard;
pub use rlock::RLock;
pub use rwlock::{RReadWriteLock, RwPolicy};

use crate::error::{Error, Result};

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

/// The longest lease accepted: about 34 years. Redis refuses a TTL that would overflow its
/// clock, and such a refusal in the middle of a script would leave a lock without TTL.
pub(crate) const MAX_LEASE: Duration = Duration::from_millis(1 << 40);

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
