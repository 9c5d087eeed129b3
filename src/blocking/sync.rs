//! Blocking synchronizers: `RMutex`, `RCountDownLatch`, `RSemaphore`.

use std::panic::Location;
use std::time::Duration;

use super::{Blocker, LockGuard};
use crate::error::Result;

/// A non-reentrant distributed mutex (Apache Curator's `InterProcessSemaphoreMutex`) for
/// synchronous code: the blocking twin of [`ferrisson::RMutex`](crate::RMutex). Every acquire is
/// its own owner: while it is held, a second `lock()` waits, even on the same thread.
///
/// # Examples
///
/// ```no_run
/// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
/// let mutex = client.get_mutex("migration");
/// let guard = mutex.lock()?;
/// assert!(mutex.try_lock()?.is_none()); // not even this thread gets it again
/// guard.unlock()?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RMutex {
    pub(super) mutex: crate::RMutex,
    pub(super) blocker: Blocker,
}

impl RMutex {
    pub(super) fn wrap(mutex: crate::RMutex, blocker: Blocker) -> Self {
        RMutex { mutex, blocker }
    }

    fn guarded(&self, guard: Result<Option<crate::LockGuard>>) -> Result<Option<LockGuard>> {
        Ok(guard?.map(|g| LockGuard::wrap(g, self.blocker.clone())))
    }

    /// The mutex's name (its key).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) {
    /// assert_eq!(client.get_mutex("migration").name(), "migration");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        self.mutex.name()
    }

    /// Waits until the mutex is free and takes it (watchdog lease).
    ///
    /// # Errors
    ///
    /// As [`RLock::lock`](super::RLock::lock).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(mutex: ferrisson::blocking::RMutex) -> ferrisson::Result<()> {
    /// mutex.lock()?.unlock()?;
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn lock(&self) -> Result<LockGuard> {
        let lock = self.mutex.as_lock().lock_at(Location::caller());
        let guard = self.blocker.call(lock)?;
        Ok(LockGuard::wrap(guard, self.blocker.clone()))
    }

    /// Waits until the mutex is free and takes it with a fixed `lease`, never renewed.
    ///
    /// # Errors
    ///
    /// As [`RLock::lock_with_lease`](super::RLock::lock_with_lease).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(mutex: ferrisson::blocking::RMutex) -> ferrisson::Result<()> {
    /// mutex.lock_with_lease(std::time::Duration::from_secs(10))?.unlock()?;
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn lock_with_lease(&self, lease: Duration) -> Result<LockGuard> {
        let lock = self.mutex.as_lock();
        let guard = (self.blocker).call(lock.lock_with_lease_at(lease, Location::caller()))?;
        Ok(LockGuard::wrap(guard, self.blocker.clone()))
    }

    /// One attempt: `Ok(None)` when the mutex is held, by anybody (this thread included).
    ///
    /// # Errors
    ///
    /// As [`RLock::lock`](super::RLock::lock).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(mutex: ferrisson::blocking::RMutex) -> ferrisson::Result<()> {
    /// if let Some(guard) = mutex.try_lock()? {
    ///     guard.unlock()?;
    /// }
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn try_lock(&self) -> Result<Option<LockGuard>> {
        let lock = self.mutex.as_lock().try_lock_at(Location::caller());
        self.guarded(self.blocker.call(lock))
    }

    /// Waits at most `wait`; with `lease` the lease is fixed, without it the watchdog renews.
    ///
    /// # Errors
    ///
    /// As [`RLock::try_lock_for`](super::RLock::try_lock_for).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(mutex: ferrisson::blocking::RMutex) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// if let Some(guard) = mutex.try_lock_for(Duration::from_secs(1), None)? {
    ///     guard.unlock()?;
    /// }
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn try_lock_for(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Option<LockGuard>> {
        let lock = self.mutex.as_lock();
        let lock = lock.try_lock_for_at(wait, lease, Location::caller());
        self.guarded(self.blocker.call(lock))
    }

    /// Whether anybody holds the mutex.
    ///
    /// # Errors
    ///
    /// As [`RLock::is_locked`](super::RLock::is_locked).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(mutex: ferrisson::blocking::RMutex) -> ferrisson::Result<()> {
    /// println!("held: {}", mutex.is_locked()?);
    /// # Ok(()) }
    /// ```
    pub fn is_locked(&self) -> Result<bool> {
        self.blocker.call(self.mutex.is_locked())
    }

    /// What Redis holds for this mutex now, read in one round trip that changes nothing: the
    /// blocking twin of [`RMutex::snapshot`](crate::RMutex::snapshot).
    ///
    /// # Errors
    ///
    /// [`Error::InsideRuntime`](crate::Error::InsideRuntime), and as
    /// [`RMutex::snapshot`](crate::RMutex::snapshot).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(x: ferrisson::blocking::RMutex) -> ferrisson::Result<()> {
    /// println!("{:?}", x.snapshot()?);
    /// # Ok(()) }
    /// ```
    pub fn snapshot(&self) -> Result<crate::inspect::LockSnapshot> {
        self.blocker.call(self.mutex.snapshot())
    }

    /// Frees the mutex whoever holds it; returns whether it was held.
    ///
    /// # Errors
    ///
    /// As [`RLock::force_unlock`](super::RLock::force_unlock).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(mutex: ferrisson::blocking::RMutex) -> ferrisson::Result<()> {
    /// mutex.force_unlock()?;
    /// # Ok(()) }
    /// ```
    pub fn force_unlock(&self) -> Result<bool> {
        self.blocker.call(self.mutex.force_unlock())
    }

    /// Asks the holder of the mutex to let go; returns how many holds were asked.
    ///
    /// # Errors
    ///
    /// As [`RLock::request_revocation`](super::RLock::request_revocation).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(mutex: ferrisson::blocking::RMutex) -> ferrisson::Result<()> {
    /// mutex.request_revocation()?;
    /// # Ok(()) }
    /// ```
    pub fn request_revocation(&self) -> Result<usize> {
        self.blocker.call(self.mutex.request_revocation())
    }
}

/// Redisson's `RCountDownLatch` for synchronous code: the blocking twin of
/// [`ferrisson::RCountDownLatch`](crate::RCountDownLatch).
///
/// # Examples
///
/// ```no_run
/// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
/// let ready = client.get_count_down_latch("workers-ready");
/// ready.try_set_count(3)?;
/// // ... each of three workers, anywhere, calls:
/// ready.count_down()?;
/// # ready.count_down()?; ready.count_down()?;
/// // ... and the coordinator waits for all of them:
/// ready.await_zero()?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RCountDownLatch {
    latch: crate::RCountDownLatch,
    blocker: Blocker,
}

impl RCountDownLatch {
    pub(super) fn wrap(latch: crate::RCountDownLatch, blocker: Blocker) -> Self {
        RCountDownLatch { latch, blocker }
    }

    /// The latch's name.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) {
    /// assert_eq!(client.get_count_down_latch("done").name(), "done");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        self.latch.name()
    }

    /// Sets the count to `count` if the latch is not set; returns whether it was set. A count
    /// of 0 leaves the latch open: waiters return at once, and no key is written.
    ///
    /// # Errors
    ///
    /// [`Error::InsideRuntime`](crate::Error::InsideRuntime); otherwise as
    /// [`ferrisson::RCountDownLatch::try_set_count`](crate::RCountDownLatch::try_set_count).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(latch: ferrisson::blocking::RCountDownLatch) -> ferrisson::Result<()> {
    /// if !latch.try_set_count(5)? {
    ///     println!("already counting: {}", latch.get_count()?);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn try_set_count(&self, count: u64) -> Result<bool> {
        self.blocker.call(self.latch.try_set_count(count))
    }

    /// Counts the latch down by one and returns the count left; at zero every waiter, in
    /// every process, is woken.
    ///
    /// # Errors
    ///
    /// As [`try_set_count`](Self::try_set_count).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(latch: ferrisson::blocking::RCountDownLatch) -> ferrisson::Result<()> {
    /// println!("{} to go", latch.count_down()?);
    /// # Ok(()) }
    /// ```
    pub fn count_down(&self) -> Result<u64> {
        self.blocker.call(self.latch.count_down())
    }

    /// The count left: 0 when the latch is open (or was never set).
    ///
    /// # Errors
    ///
    /// As [`try_set_count`](Self::try_set_count).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(latch: ferrisson::blocking::RCountDownLatch) -> ferrisson::Result<()> {
    /// println!("{} to go", latch.get_count()?);
    /// # Ok(()) }
    /// ```
    pub fn get_count(&self) -> Result<u64> {
        self.blocker.call(self.latch.get_count())
    }

    /// What Redis holds for this latch now, read in one round trip that changes nothing: the
    /// blocking twin of [`RCountDownLatch::snapshot`](crate::RCountDownLatch::snapshot).
    ///
    /// # Errors
    ///
    /// [`Error::InsideRuntime`](crate::Error::InsideRuntime), and as
    /// [`RCountDownLatch::snapshot`](crate::RCountDownLatch::snapshot).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(x: ferrisson::blocking::RCountDownLatch) -> ferrisson::Result<()> {
    /// println!("{:?}", x.snapshot()?);
    /// # Ok(()) }
    /// ```
    pub fn snapshot(&self) -> Result<crate::inspect::LatchSnapshot> {
        self.blocker.call(self.latch.snapshot())
    }

    /// Deletes the latch, which opens it; returns whether it was set.
    ///
    /// # Errors
    ///
    /// As [`try_set_count`](Self::try_set_count).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(latch: ferrisson::blocking::RCountDownLatch) -> ferrisson::Result<()> {
    /// latch.delete()?; // give up on the count: everybody goes on
    /// # Ok(()) }
    /// ```
    pub fn delete(&self) -> Result<bool> {
        self.blocker.call(self.latch.delete())
    }

    /// Blocks until the latch is open (Redisson's `await`).
    ///
    /// # Errors
    ///
    /// As [`try_set_count`](Self::try_set_count).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(latch: ferrisson::blocking::RCountDownLatch) -> ferrisson::Result<()> {
    /// latch.await_zero()?;
    /// # Ok(()) }
    /// ```
    pub fn await_zero(&self) -> Result<()> {
        self.blocker.call(self.latch.await_zero())
    }

    /// Blocks at most `timeout` until the latch is open; returns whether it opened.
    ///
    /// # Errors
    ///
    /// As [`try_set_count`](Self::try_set_count).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(latch: ferrisson::blocking::RCountDownLatch) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// if !latch.await_for(Duration::from_secs(10))? {
    ///     println!("still {} to go after 10 s", latch.get_count()?);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn await_for(&self, timeout: Duration) -> Result<bool> {
        self.blocker.call(self.latch.await_for(timeout))
    }
}

/// Redisson's `RSemaphore` for synchronous code: the blocking twin of
/// [`ferrisson::RSemaphore`](crate::RSemaphore). Permits are not owned: anybody may release,
/// and a process that dies holding permits never gives them back (use
/// [`RPermitExpirableSemaphore`](super::RPermitExpirableSemaphore) where that matters).
///
/// # Examples
///
/// ```no_run
/// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
/// let api = client.get_semaphore("partner-api");
/// api.try_set_permits(4)?; // at most 4 calls at once, fleet-wide
/// api.acquire(1)?;
/// // ... call the partner API ...
/// api.release(1)?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RSemaphore {
    pub(super) semaphore: crate::RSemaphore,
    pub(super) blocker: Blocker,
}

impl RSemaphore {
    pub(super) fn wrap(semaphore: crate::RSemaphore, blocker: Blocker) -> Self {
        RSemaphore { semaphore, blocker }
    }

    /// The semaphore's name.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) {
    /// assert_eq!(client.get_semaphore("slots").name(), "slots");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        self.semaphore.name()
    }

    /// Sets the permits to `permits` when none were ever set; returns whether they were set.
    /// With 0 the semaphore starts closed: acquirers wait until [`release`](Self::release) or
    /// [`add_permits`](Self::add_permits) opens it.
    ///
    /// # Errors
    ///
    /// [`Error::InsideRuntime`](crate::Error::InsideRuntime); otherwise as
    /// [`ferrisson::RSemaphore::try_set_permits`](crate::RSemaphore::try_set_permits).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(semaphore: ferrisson::blocking::RSemaphore) -> ferrisson::Result<()> {
    /// semaphore.try_set_permits(4)?;
    /// # Ok(()) }
    /// ```
    pub fn try_set_permits(&self, permits: u64) -> Result<bool> {
        self.blocker.call(self.semaphore.try_set_permits(permits))
    }

    /// Adds `delta` permits (negative: removes free ones) and returns the permits free now.
    ///
    /// # Errors
    ///
    /// As [`try_set_permits`](Self::try_set_permits).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(semaphore: ferrisson::blocking::RSemaphore) -> ferrisson::Result<()> {
    /// semaphore.add_permits(2)?; // the partner raised our quota
    /// # Ok(()) }
    /// ```
    pub fn add_permits(&self, delta: i64) -> Result<i64> {
        self.blocker.call(self.semaphore.add_permits(delta))
    }

    /// The permits free now.
    ///
    /// # Errors
    ///
    /// As [`try_set_permits`](Self::try_set_permits).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(semaphore: ferrisson::blocking::RSemaphore) -> ferrisson::Result<()> {
    /// println!("{} free", semaphore.available_permits()?);
    /// # Ok(()) }
    /// ```
    pub fn available_permits(&self) -> Result<i64> {
        self.blocker.call(self.semaphore.available_permits())
    }

    /// What Redis holds for this semaphore now, read in one round trip that changes nothing: the
    /// blocking twin of [`RSemaphore::snapshot`](crate::RSemaphore::snapshot).
    ///
    /// # Errors
    ///
    /// [`Error::InsideRuntime`](crate::Error::InsideRuntime), and as
    /// [`RSemaphore::snapshot`](crate::RSemaphore::snapshot).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(x: ferrisson::blocking::RSemaphore) -> ferrisson::Result<()> {
    /// println!("{:?}", x.snapshot()?);
    /// # Ok(()) }
    /// ```
    pub fn snapshot(&self) -> Result<crate::inspect::SemaphoreSnapshot> {
        self.blocker.call(self.semaphore.snapshot())
    }

    /// Takes every free permit and returns how many that was.
    ///
    /// # Errors
    ///
    /// As [`try_set_permits`](Self::try_set_permits).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(semaphore: ferrisson::blocking::RSemaphore) -> ferrisson::Result<()> {
    /// let paused = semaphore.drain_permits()?; // stop new work
    /// semaphore.release(paused as u64)?;       // and let it go on
    /// # Ok(()) }
    /// ```
    pub fn drain_permits(&self) -> Result<i64> {
        self.blocker.call(self.semaphore.drain_permits())
    }

    /// Gives back `n` permits (anybody may) and wakes waiters.
    ///
    /// # Errors
    ///
    /// As [`try_set_permits`](Self::try_set_permits).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(semaphore: ferrisson::blocking::RSemaphore) -> ferrisson::Result<()> {
    /// semaphore.acquire(2)?;
    /// semaphore.release(2)?;
    /// # Ok(()) }
    /// ```
    pub fn release(&self, n: u64) -> Result<()> {
        self.blocker.call(self.semaphore.release(n))
    }

    /// Blocks until `n` permits are free and takes them, all at once.
    ///
    /// # Errors
    ///
    /// As [`try_set_permits`](Self::try_set_permits).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(semaphore: ferrisson::blocking::RSemaphore) -> ferrisson::Result<()> {
    /// semaphore.acquire(1)?;
    /// semaphore.release(1)?;
    /// # Ok(()) }
    /// ```
    pub fn acquire(&self, n: u64) -> Result<()> {
        self.blocker.call(self.semaphore.acquire(n))
    }

    /// Takes `n` permits if they are free now; returns whether it did.
    ///
    /// # Errors
    ///
    /// As [`try_set_permits`](Self::try_set_permits).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(semaphore: ferrisson::blocking::RSemaphore) -> ferrisson::Result<()> {
    /// if semaphore.try_acquire(1)? {
    ///     semaphore.release(1)?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn try_acquire(&self, n: u64) -> Result<bool> {
        self.blocker.call(self.semaphore.try_acquire(n))
    }

    /// Blocks at most `wait` until `n` permits are free and takes them; returns whether it did.
    ///
    /// # Errors
    ///
    /// As [`try_set_permits`](Self::try_set_permits).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(semaphore: ferrisson::blocking::RSemaphore) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// if semaphore.try_acquire_for(1, Duration::from_secs(2))? {
    ///     semaphore.release(1)?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn try_acquire_for(&self, n: u64, wait: Duration) -> Result<bool> {
        self.blocker.call(self.semaphore.try_acquire_for(n, wait))
    }
}
