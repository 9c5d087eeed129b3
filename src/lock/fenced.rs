//! `RFencedLock`: an RLock whose methods hand out the fencing token first.

use std::future::Future;
use std::ops::Deref;
use std::panic::Location;
use std::sync::Arc;
use std::time::Duration;

use crate::core::Core;
use crate::error::Result;
use crate::lock::guard::LockGuard;
use crate::lock::handle::ClientLocks;
use crate::lock::plain::PlainOps;
use crate::lock::rlock::RLock;
use crate::names;

/// Redisson's `RFencedLock`: a reentrant lock whose acquire methods return the fencing token
/// together with the guard, for code that must pass a token with every write.
///
/// Every ferrisson lock has tokens (see [`LockGuard::fencing_token`]); this handle puts them
/// first, and its grants also count in Redisson's per-name counter `redisson_lock_token:{name}`
/// (besides the slot's counter every kind uses, see [`RLock::token_counter_key`]), leaving both
/// at the larger value. So a Java `RFencedLock` and this one hand out one increasing sequence
/// for a name, and that name keeps its counter key, as with Redisson. ferrisson never deletes
/// or expires either counter (`force_unlock` included), so tokens never go backwards. It
/// dereferences to [`RLock`] for everything else.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
/// let lock = client.get_fenced_lock("ledger");
/// let (token, guard) = lock.lock_and_get_token().await?;
/// // storage.write_if_token_at_least(token, ...)
/// # let _ = token;
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RFencedLock {
    lock: RLock,
}

impl RFencedLock {
    pub(crate) fn new(core: Arc<Core>, locks: Arc<ClientLocks>, name: &str) -> Self {
        let ops = PlainOps::fenced(name, core.config.starvation);
        RFencedLock {
            lock: RLock::of(core, locks, Box::new(ops)),
        }
    }

    /// Waits for the lock (watchdog lease) and returns its token and guard.
    ///
    /// # Errors
    ///
    /// As [`RLock::lock`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`RLock::lock`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::RFencedLock) -> ferrisson::Result<()> {
    /// let (token, guard) = lock.lock_and_get_token().await?;
    /// # let _ = token;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn lock_and_get_token(&self) -> impl Future<Output = Result<(u64, LockGuard)>> + Send + '_ {
        let lock = self.lock.lock_at(Location::caller());
        async move { lock.await.map(with_token) }
    }

    /// Waits for the lock with a fixed `lease` and returns its token and guard.
    ///
    /// # Errors
    ///
    /// As [`RLock::lock_with_lease`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`RLock::lock`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::RFencedLock) -> ferrisson::Result<()> {
    /// let (token, guard) = lock.lock_and_get_token_with_lease(std::time::Duration::from_secs(5)).await?;
    /// # let _ = token;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn lock_and_get_token_with_lease(
        &self,
        lease: Duration,
    ) -> impl Future<Output = Result<(u64, LockGuard)>> + Send + '_ {
        let lock = self.lock.lock_with_lease_at(lease, Location::caller());
        async move { lock.await.map(with_token) }
    }

    /// One attempt; `Ok(None)` when the lock is taken.
    ///
    /// # Errors
    ///
    /// As [`RLock::try_lock`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`RLock::lock`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::RFencedLock) -> ferrisson::Result<()> {
    /// if let Some((token, guard)) = lock.try_lock_and_get_token().await? {
    ///     # let _ = token;
    ///     guard.unlock().await?;
    /// }
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn try_lock_and_get_token(
        &self,
    ) -> impl Future<Output = Result<Option<(u64, LockGuard)>>> + Send + '_ {
        let lock = self.lock.try_lock_at(Location::caller());
        async move { Ok(lock.await?.map(with_token)) }
    }

    /// Waits at most `wait`; with `lease` the lease is fixed, without it the watchdog renews.
    ///
    /// # Errors
    ///
    /// As [`RLock::try_lock_for`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`RLock::lock`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::RFencedLock) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// if let Some((token, guard)) = lock.try_lock_and_get_token_for(Duration::from_secs(1), None).await? {
    ///     # let _ = token;
    ///     guard.unlock().await?;
    /// }
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn try_lock_and_get_token_for(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> impl Future<Output = Result<Option<(u64, LockGuard)>>> + Send + '_ {
        let lock = self.lock.try_lock_for_at(wait, lease, Location::caller());
        async move { Ok(lock.await?.map(with_token)) }
    }

    /// The last token a fenced grant of this name handed out (by any client, Java's
    /// `RFencedLock` included), `None` before the first: Redisson's per-name counter. Grants of
    /// other kinds on the name count only in the slot's counter and may have gone higher.
    ///
    /// # Errors
    ///
    /// [`Error::WrongType`](crate::Error::WrongType) when the counter key holds something else;
    /// [`Error::Redis`](crate::Error::Redis); [`Error::InvalidArgument`](crate::Error::InvalidArgument).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (read only).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::RFencedLock) -> ferrisson::Result<()> {
    /// println!("last token: {:?}", lock.token().await?);
    /// # Ok(()) }
    /// ```
    pub async fn token(&self) -> Result<Option<u64>> {
        self.lock.check()?;
        let key = names::token_key(self.lock.name());
        let mut cmd = redis::cmd("GET");
        cmd.arg(&key);
        self.lock.core().executor.read(&cmd, &key).await
    }
}

fn with_token(guard: LockGuard) -> (u64, LockGuard) {
    (guard.fencing_token(), guard)
}

impl Deref for RFencedLock {
    type Target = RLock;

    fn deref(&self) -> &RLock {
        &self.lock
    }
}
