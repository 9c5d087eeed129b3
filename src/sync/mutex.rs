//! `RMutex`: a non-reentrant distributed mutex (Apache Curator's `InterProcessSemaphoreMutex`).

use std::future::Future;
use std::panic::Location;
use std::sync::Arc;
use std::time::Duration;

use crate::core::Core;
use crate::error::Result;
use crate::lock::{ClientLocks, LockGuard, RLock};

/// A non-reentrant distributed mutex, Apache Curator's `InterProcessSemaphoreMutex`: while it is
/// held, a second `lock()` waits like anyone else's, even inside the hold's `with_lock` work or
/// [`scope`](crate::LockGuard::scope), and `try_lock()` returns `None`.
///
/// Every acquire is its own owner, so the guard is all there is to a hold: it carries a fencing
/// token, reports a lost lease, is renewed by the watchdog while it lives (or has a fixed
/// lease), and can be moved to another task and released there. In Redis it is an `RLock`'s
/// hash (a Java Redisson `RLock` on the same name contends with it).
///
/// Pick it over [`RLock`] when holding a lock must never nest: code that calls itself, or two
/// steps of one job that must not both run under one hold, then wait instead of passing through
/// (a deadlock there is a bug to see, not to hide). Pick [`RLock`] when a task takes the lock
/// again on purpose.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
/// use std::time::Duration;
///
/// let mutex = client.get_mutex("migration");
/// let guard = mutex.lock().await?;
/// // The same handle does not get it again while held:
/// assert!(mutex.try_lock().await?.is_none());
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RMutex {
    /// A plain lock each of whose acquires is an owner of its own.
    pub(super) lock: RLock,
}

impl RMutex {
    pub(crate) fn new(core: Arc<Core>, locks: Arc<ClientLocks>, name: &str) -> Self {
        RMutex {
            lock: RLock::mutex(core, locks, name),
        }
    }

    /// The lock handle every acquire of this mutex works through.
    pub(crate) fn as_lock(&self) -> &RLock {
        &self.lock
    }

    /// The mutex's name (its key).
    pub fn name(&self) -> &str {
        self.lock.name()
    }

    /// Waits until the mutex is free and takes it (watchdog lease).
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
    /// # async fn demo(mutex: ferrisson::RMutex) -> ferrisson::Result<()> {
    /// mutex.lock().await?.unlock().await?;
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn lock(&self) -> impl Future<Output = Result<LockGuard>> + Send + '_ {
        self.lock.lock_at(Location::caller())
    }

    /// Waits until the mutex is free and takes it with a fixed `lease`, never renewed.
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
    /// # async fn demo(mutex: ferrisson::RMutex) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// mutex.lock_with_lease(Duration::from_secs(10)).await?.unlock().await?;
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn lock_with_lease(
        &self,
        lease: Duration,
    ) -> impl Future<Output = Result<LockGuard>> + Send + '_ {
        self.lock.lock_with_lease_at(lease, Location::caller())
    }

    /// Takes the mutex if it is free now: `None` while anybody holds it, this handle included.
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
    /// # async fn demo(mutex: ferrisson::RMutex) -> ferrisson::Result<()> {
    /// if let Some(guard) = mutex.try_lock().await? {
    ///     guard.unlock().await?;
    /// }
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn try_lock(&self) -> impl Future<Output = Result<Option<LockGuard>>> + Send + '_ {
        self.lock.try_lock_at(Location::caller())
    }

    /// Waits at most `wait` for the mutex; `lease` fixes the lease (else the watchdog renews it).
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
    /// # async fn demo(mutex: ferrisson::RMutex) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// if let Some(guard) = mutex.try_lock_for(Duration::from_secs(1), None).await? {
    ///     guard.unlock().await?;
    /// }
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn try_lock_for(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> impl Future<Output = Result<Option<LockGuard>>> + Send + '_ {
        self.lock.try_lock_for_at(wait, lease, Location::caller())
    }

    /// What Redis holds for this mutex now: a plain lock's snapshot (see [`RLock::snapshot`]).
    ///
    /// # Errors
    ///
    /// As [`RLock::snapshot`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (read only).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(mutex: ferrisson::RMutex) -> ferrisson::Result<()> {
    /// println!("held by {:?}", mutex.snapshot().await?.holders);
    /// # Ok(()) }
    /// ```
    pub async fn snapshot(&self) -> Result<crate::inspect::LockSnapshot> {
        self.lock.snapshot().await
    }

    /// Whether anybody holds the mutex.
    ///
    /// # Errors
    ///
    /// As [`RLock::is_locked`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (read only).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(mutex: ferrisson::RMutex) -> ferrisson::Result<()> {
    /// println!("held: {}", mutex.is_locked().await?);
    /// # Ok(()) }
    /// ```
    pub async fn is_locked(&self) -> Result<bool> {
        self.lock.is_locked().await
    }

    /// Frees the mutex whoever holds it; returns whether it was held.
    ///
    /// # Errors
    ///
    /// As [`RLock::force_unlock`].
    ///
    /// # Cancel safety
    ///
    /// As [`RLock::force_unlock`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(mutex: ferrisson::RMutex) -> ferrisson::Result<()> {
    /// mutex.force_unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn force_unlock(&self) -> Result<bool> {
        self.lock.force_unlock().await
    }

    /// Asks the mutex's holder to let go; returns how many holds were asked (0: nobody holds
    /// it). See [`RLock::request_revocation`].
    ///
    /// # Errors
    ///
    /// As [`RLock::request_revocation`].
    ///
    /// # Cancel safety
    ///
    /// As [`RLock::request_revocation`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(mutex: ferrisson::RMutex) -> ferrisson::Result<()> {
    /// mutex.request_revocation().await?;
    /// # Ok(()) }
    /// ```
    pub async fn request_revocation(&self) -> Result<usize> {
        self.lock.request_revocation().await
    }
}
