//! Combinators over several locks: [`MultiLock`] (all of them) and [`RedLock`] (a majority of
//! independent masters).
//!
//! A combinator runs its parts' acquires and releases inside its own future. Each part's future
//! is boxed as `dyn` ([`PartFuture`]): with their concrete types nested in it, a combinator's
//! future is so deep that proving it `Send`, at a user's `tokio::spawn`, overflows the
//! compiler's default recursion limit (E0275). That costs one allocation per part and call,
//! next to a round trip to Redis; a single lock's operations are not boxed so.

mod multi;
mod redlock;

use futures::future::{BoxFuture, join_all};

pub use multi::{MultiGuard, MultiLock};
pub use redlock::{RedLock, RedLockGuard};

use crate::error::Error;
use crate::lock::LockGuard;

/// One part's acquire or release, boxed as `dyn` (see the module docs).
type PartFuture<'a, T> = BoxFuture<'a, T>;

/// Releases every guard at once and collects every failure, never stopping at the first.
async fn release_all(guards: Vec<LockGuard>) -> Result<(), Error> {
    let releases = guards.into_iter().map(|guard| {
        let release: PartFuture<'static, _> = Box::pin(guard.unlock());
        release
    });
    let errors: Vec<Error> = join_all(releases)
        .await
        .into_iter()
        .filter_map(Result::err)
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(Error::Multiple { errors })
    }
}
