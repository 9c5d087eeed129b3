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
mod with_lock;

use std::future::Future;

use futures::future::{BoxFuture, join_all};

pub use multi::{MultiGuard, MultiLock};
pub use redlock::{RedLock, RedLockGuard};

use crate::error::Error;
use crate::lock::LockGuard;

/// One part's acquire or release, boxed as `dyn` (see the module docs).
type PartFuture<'a, T> = BoxFuture<'a, T>;

/// Releases every guard at once and collects every failure, each named by its part
/// ([`Error::Part`]), never stopping at the first.
async fn release_all(guards: Vec<LockGuard>) -> Result<(), Error> {
    release_each(guards, LockGuard::unlock).await
}

/// Gives back parts the combinator will not hand out, and returns once every server has let
/// them go: also a grant the client already counts lost (its reply came past the lease), which
/// its server may still hold. Failures as [`release_all`]'s.
async fn give_back_all(guards: Vec<LockGuard>) -> Result<(), Error> {
    release_each(guards, LockGuard::give_back).await
}

async fn release_each<Fut>(
    guards: Vec<LockGuard>,
    release: impl Fn(LockGuard) -> Fut,
) -> Result<(), Error>
where
    Fut: Future<Output = Result<(), Error>> + Send + 'static,
{
    let releases = guards.into_iter().map(|guard| {
        let part = guard.part();
        let release = release(guard);
        let named: PartFuture<'static, _> =
            Box::pin(async move { release.await.map_err(|e| part.failed(e)) });
        named
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

/// The one failed part's error as it is, several in an [`Error::Multiple`]; `None` for none.
fn failures(mut errors: Vec<Error>) -> Option<Error> {
    match errors.len() {
        0 => None,
        1 => errors.pop(),
        _ => Some(Error::Multiple { errors }),
    }
}
