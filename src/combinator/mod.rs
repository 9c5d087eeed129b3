//! Combinators over several locks: [`MultiLock`] (all of them) and [`RedLock`] (a majority of
//! independent masters).

mod multi;
mod redlock;

pub use multi::{MultiGuard, MultiLock};
pub use redlock::{RedLock, RedLockGuard};

use crate::error::Error;
use crate::lock::LockGuard;

/// Releases every guard at once and collects every failure, never stopping at the first.
pub(crate) async fn release_all(guards: Vec<LockGuard>) -> Result<(), Error> {
    let results = futures::future::join_all(guards.into_iter().map(LockGuard::unlock)).await;
    let errors: Vec<Error> = results.into_iter().filter_map(Result::err).collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(Error::Multiple { errors })
    }
}
