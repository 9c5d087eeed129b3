//! Blocking lock handles: `RLock` (plain and fair) and `RFencedLock`.

use std::ops::Deref;
use std::panic::Location;
use std::time::Duration;

use super::{Blocker, LockGuard};
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;

/// A reentrant distributed lock, Redisson's `RLock`, for synchronous code: the blocking twin of
/// [`ferrisson::RLock`](crate::RLock), whose documentation tells what each method does.
///
/// A hold belongs to its acquisition: threads sharing a handle exclude each other, a guard
/// handed to another thread carries its hold, and a second `lock()` on the same thread waits.
/// Only an acquisition nested in a hold's scope (inside [`with_lock`](Self::with_lock)'s closure
/// or [`LockGuard::scope`], or taken with [`LockGuard::reenter`]) is reentrant: one more hold,
/// same token, no wait. The fair lock and both sides of a read-write lock are `RLock`s too.
///
/// Every method that talks to Redis fails with [`Error::InsideRuntime`] when called from async
/// code; inside `spawn_blocking` or `block_in_place` it works (see [where it may be
/// called](crate::blocking#where-it-may-be-called-threads-that-may-block)).
///
/// # Examples
///
/// ```no_run
/// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
/// use std::time::Duration;
///
/// let lock = client.get_lock("nightly-report");
/// let mut workers = Vec::new();
/// for _ in 0..4 {
///     let lock = lock.clone();
///     // Four threads, four acquisitions: one at a time inside.
///     workers.push(std::thread::spawn(move || -> ferrisson::Result<()> {
///         lock.with_lock(|_token| -> ferrisson::Result<()> {
///             let again = lock.lock()?; // nested in the hold's closure: reentrant
///             again.unlock()
///         })?
///     }));
/// }
/// for worker in workers {
///     worker.join().expect("worker")?;
/// }
/// if let Some(guard) = lock.try_lock_for(Duration::from_secs(5), None)? {
///     guard.unlock()?;
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RLock {
    pub(super) lock: crate::RLock,
    blocker: Blocker,
}

/// A fair lock: an [`RLock`] whose waiters are granted in the order they asked. From
/// [`Client::get_fair_lock`](super::Client::get_fair_lock); see
/// [`ferrisson::RFairLock`](crate::RFairLock).
pub type RFairLock = RLock;

impl RLock {
    pub(super) fn wrap(lock: crate::RLock) -> Self {
        RLock {
            blocker: Blocker::of(lock.core()),
            lock,
        }
    }

    pub(super) fn blocker(&self) -> &Blocker {
        &self.blocker
    }

    fn guard(&self, guard: crate::LockGuard) -> LockGuard {
        LockGuard::wrap(guard, self.blocker.clone())
    }

    fn guarded(&self, guard: Result<Option<crate::LockGuard>>) -> Result<Option<LockGuard>> {
        Ok(guard?.map(|g| self.guard(g)))
    }

    /// The async handle this one wraps: the same lock, for async code.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::blocking::RLock) -> ferrisson::Result<()> {
    /// let guard = lock.as_async().lock().await?;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn as_async(&self) -> &crate::RLock {
        &self.lock
    }

    /// The lock's name.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) {
    /// assert_eq!(client.get_lock("orders:42").name(), "orders:42");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        self.lock.name()
    }

    /// The Redis key of the counter this lock's fencing tokens come from. See
    /// [`ferrisson::RLock::token_counter_key`](crate::RLock::token_counter_key).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) {
    /// let key = client.get_lock("orders:42").token_counter_key();
    /// assert!(key.starts_with("ferrisson_token:{"));
    /// # }
    /// ```
    pub fn token_counter_key(&self) -> String {
        self.lock.token_counter_key()
    }

    /// Waits until the lock is acquired. The lease is the client's watchdog timeout, renewed
    /// every third of it while the guard lives, whatever the calling thread does. As
    /// [`ferrisson::RLock::lock`](crate::RLock::lock).
    ///
    /// # Errors
    ///
    /// [`Error::InsideRuntime`] in async code; [`Error::InvalidArgument`] for a
    /// malformed name, [`Error::WrongType`] when the key holds something else, [`Error::Redis`]
    /// when Redis fails or does not answer within the response timeout.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
    /// let guard = client.get_lock("cart:7").lock()?;
    /// guard.unlock()?;
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn lock(&self) -> Result<LockGuard> {
        let lock = self.lock.lock_at(Location::caller());
        self.blocker.call(lock).map(|g| self.guard(g))
    }

    /// Waits until the lock is acquired, with a fixed `lease` that is never renewed. As
    /// [`ferrisson::RLock::lock_with_lease`](crate::RLock::lock_with_lease).
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock); [`Error::InvalidArgument`] for a lease under 1 ms.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// let guard = client.get_lock("job").lock_with_lease(Duration::from_secs(10))?;
    /// guard.unlock()?;
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn lock_with_lease(&self, lease: Duration) -> Result<LockGuard> {
        let lock = self.lock.lock_with_lease_at(lease, Location::caller());
        let guard = self.blocker.call(lock)?;
        Ok(self.guard(guard))
    }

    /// One attempt, no waiting: `Ok(None)` when somebody else holds the lock. Watchdog lease.
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
    /// if let Some(guard) = client.get_lock("cache-warmup").try_lock()? {
    ///     guard.unlock()?;
    /// }
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn try_lock(&self) -> Result<Option<LockGuard>> {
        let lock = self.lock.try_lock_at(Location::caller());
        self.guarded(self.blocker.call(lock))
    }

    /// Waits at most `wait` for the lock; with `lease` the lease is fixed, without it the
    /// watchdog renews it. `wait` is a deadline, as in
    /// [`ferrisson::RLock::try_lock_for`](crate::RLock::try_lock_for).
    ///
    /// # Errors
    ///
    /// As [`lock_with_lease`](Self::lock_with_lease). Running out of `wait` is `Ok(None)`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// let lock = client.get_lock("payments");
    /// if let Some(guard) = lock.try_lock_for(Duration::from_millis(200), Some(Duration::from_secs(5)))? {
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
        let lock = self.lock.try_lock_for_at(wait, lease, Location::caller());
        self.guarded(self.blocker.call(lock))
    }

    /// Whether anybody holds the lock.
    ///
    /// # Errors
    ///
    /// [`Error::InsideRuntime`], [`Error::WrongType`], [`Error::Redis`],
    /// [`Error::InvalidArgument`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::RLock) -> ferrisson::Result<()> {
    /// println!("locked: {}", lock.is_locked()?);
    /// # Ok(()) }
    /// ```
    pub fn is_locked(&self) -> Result<bool> {
        self.blocker.call(self.lock.is_locked())
    }

    /// What Redis holds for this lock now, read in one round trip that changes nothing: the
    /// blocking twin of [`RLock::snapshot`](crate::RLock::snapshot).
    ///
    /// # Errors
    ///
    /// [`Error::InsideRuntime`](crate::Error::InsideRuntime), and as
    /// [`RLock::snapshot`](crate::RLock::snapshot).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(x: ferrisson::blocking::RLock) -> ferrisson::Result<()> {
    /// println!("{:?}", x.snapshot()?);
    /// # Ok(()) }
    /// ```
    pub fn snapshot(&self) -> Result<crate::inspect::LockSnapshot> {
        self.blocker.call(self.lock.snapshot())
    }

    /// Whether the hold whose scope the calling thread runs in (inside
    /// [`with_lock`](Self::with_lock)'s closure or a guard's [`scope`](LockGuard::scope), of
    /// this lock) still holds it; `false` outside any scope. Redisson's
    /// `isHeldByCurrentThread`. As [`ferrisson::RLock::is_held`](crate::RLock::is_held).
    ///
    /// # Errors
    ///
    /// As [`is_locked`](Self::is_locked).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::RLock) -> ferrisson::Result<()> {
    /// assert!(!lock.is_held()?);
    /// assert!(lock.with_lock(|_| lock.is_held())??);
    /// # Ok(()) }
    /// ```
    pub fn is_held(&self) -> Result<bool> {
        self.blocker.call(self.lock.is_held())
    }

    /// How many holds the hold whose scope the calling thread runs in has on the lock, as
    /// Redis counts them; 0 outside any scope. Redisson's `getHoldCount`. As
    /// [`ferrisson::RLock::hold_count`](crate::RLock::hold_count).
    ///
    /// # Errors
    ///
    /// As [`is_locked`](Self::is_locked).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::RLock) -> ferrisson::Result<()> {
    /// lock.with_lock(|_| -> ferrisson::Result<()> {
    ///     let inner = lock.lock()?; // nested: reentrant
    ///     assert_eq!(lock.hold_count()?, 2);
    ///     inner.unlock()
    /// })??;
    /// # Ok(()) }
    /// ```
    pub fn hold_count(&self) -> Result<u32> {
        self.blocker.call(self.lock.hold_count())
    }

    /// The lock's remaining lease: `None` when it is free or has no TTL.
    ///
    /// # Errors
    ///
    /// As [`is_locked`](Self::is_locked).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::RLock) -> ferrisson::Result<()> {
    /// if let Some(ttl) = lock.remaining_ttl()? {
    ///     println!("free in at most {ttl:?}");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn remaining_ttl(&self) -> Result<Option<Duration>> {
        self.blocker.call(self.lock.remaining_ttl())
    }

    /// Frees the lock whoever holds it, and wakes its waiters. Returns whether it was held.
    /// As [`ferrisson::RLock::force_unlock`](crate::RLock::force_unlock).
    ///
    /// # Errors
    ///
    /// As [`is_locked`](Self::is_locked).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::RLock) -> ferrisson::Result<()> {
    /// let was_held = lock.force_unlock()?;
    /// # let _ = was_held;
    /// # Ok(()) }
    /// ```
    pub fn force_unlock(&self) -> Result<bool> {
        self.blocker.call(self.lock.force_unlock())
    }

    /// Asks the current holders of the lock to let go; returns how many holds were asked. As
    /// [`ferrisson::RLock::request_revocation`](crate::RLock::request_revocation).
    ///
    /// # Errors
    ///
    /// As [`is_locked`](Self::is_locked).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::RLock) -> ferrisson::Result<()> {
    /// if lock.request_revocation()? == 0 {
    ///     println!("nobody holds it");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn request_revocation(&self) -> Result<usize> {
        self.blocker.call(self.lock.request_revocation())
    }

    /// Takes the lock (as [`lock`](Self::lock)), runs `work` with the hold's fencing token on
    /// the calling thread, and gives the lock back. `work` runs inside the hold's scope: an
    /// acquisition of this lock it makes on this thread is one more hold of this one (threads it
    /// starts are outside).
    ///
    /// `Ok(output)` means `work` ran to its end, `Err` that it never ran (the acquire failed).
    /// Synchronous work cannot be stopped from outside, so unlike the async
    /// [`with_lock`](crate::RLock::with_lock) it always runs to its end once started, and its
    /// output is the answer even when the hold was lost meanwhile or the release fails: what
    /// `work` did is done, and an error would invite a retry of it. Either is logged (a WARN
    /// naming the lock) and counted (`ferrisson_releases_total` with outcome `lost` or
    /// `error`). Work that must stop when the hold is lost, or act on it, takes the guard by
    /// hand and checks [`LockGuard::is_lost`] as it goes and the result of
    /// [`LockGuard::unlock`]. Should `work` panic, the guard is dropped on the way out, which
    /// releases the lock.
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock) for the acquire (`work` did not run). Never an error of the
    /// release. [`try_with_lock_for`](Self::try_with_lock_for) bounds the wait for the lock
    /// (never the work).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
    /// let lock = client.get_lock("invoice:7");
    /// let total = lock.with_lock(|token| {
    ///     // every write carries `token`, so a late holder's writes are refused
    ///     let _ = token;
    ///     42
    /// })?;
    /// assert_eq!(total, 42);
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn with_lock<T>(&self, work: impl FnOnce(u64) -> T) -> Result<T> {
        let guard = self.blocker.call(self.lock.lock())?;
        let token = guard.fencing_token();
        // The closure runs inside the hold's scope: what it acquires of this lock, on this
        // thread, nests in it.
        Ok(super::bounded::work_under(&self.blocker, guard, || {
            work(token)
        }))
    }
}

/// Redisson's `RFencedLock` for synchronous code: a reentrant lock whose acquire methods return
/// the fencing token together with the guard. The blocking twin of
/// [`ferrisson::RFencedLock`](crate::RFencedLock); it dereferences to [`RLock`] for everything
/// else.
///
/// # Examples
///
/// ```no_run
/// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
/// let lock = client.get_fenced_lock("ledger");
/// let (token, guard) = lock.lock_and_get_token()?;
/// // storage.write_if_token_at_least(token, ...)
/// # let _ = token;
/// guard.unlock()?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RFencedLock {
    fenced: crate::RFencedLock,
    lock: RLock,
}

impl RFencedLock {
    pub(super) fn wrap(fenced: crate::RFencedLock) -> Self {
        let lock = RLock::wrap((*fenced).clone());
        RFencedLock { fenced, lock }
    }

    fn with_token(&self, guard: crate::LockGuard) -> (u64, LockGuard) {
        (guard.fencing_token(), self.lock.guard(guard))
    }

    /// Waits for the lock (watchdog lease) and returns its token and guard.
    ///
    /// # Errors
    ///
    /// As [`RLock::lock`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::RFencedLock) -> ferrisson::Result<()> {
    /// let (token, guard) = lock.lock_and_get_token()?;
    /// # let _ = token;
    /// guard.unlock()?;
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn lock_and_get_token(&self) -> Result<(u64, LockGuard)> {
        let lock = self.fenced.lock_at(Location::caller());
        let guard = self.lock.blocker.call(lock)?;
        Ok(self.with_token(guard))
    }

    /// Waits for the lock with a fixed `lease` and returns its token and guard.
    ///
    /// # Errors
    ///
    /// As [`RLock::lock_with_lease`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::RFencedLock) -> ferrisson::Result<()> {
    /// let (token, guard) = lock.lock_and_get_token_with_lease(std::time::Duration::from_secs(5))?;
    /// # let _ = token;
    /// guard.unlock()?;
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn lock_and_get_token_with_lease(&self, lease: Duration) -> Result<(u64, LockGuard)> {
        let lock = self.fenced.lock_with_lease_at(lease, Location::caller());
        let guard = self.lock.blocker.call(lock)?;
        Ok(self.with_token(guard))
    }

    /// One attempt; `Ok(None)` when the lock is taken.
    ///
    /// # Errors
    ///
    /// As [`RLock::try_lock`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::RFencedLock) -> ferrisson::Result<()> {
    /// if let Some((token, guard)) = lock.try_lock_and_get_token()? {
    ///     # let _ = token;
    ///     guard.unlock()?;
    /// }
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn try_lock_and_get_token(&self) -> Result<Option<(u64, LockGuard)>> {
        let lock = self.fenced.try_lock_at(Location::caller());
        let guard = self.lock.blocker.call(lock)?;
        Ok(guard.map(|g| self.with_token(g)))
    }

    /// Waits at most `wait`; with `lease` the lease is fixed, without it the watchdog renews.
    ///
    /// # Errors
    ///
    /// As [`RLock::try_lock_for`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::RFencedLock) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// if let Some((token, guard)) = lock.try_lock_and_get_token_for(Duration::from_secs(1), None)? {
    ///     # let _ = token;
    ///     guard.unlock()?;
    /// }
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn try_lock_and_get_token_for(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Option<(u64, LockGuard)>> {
        let lock = self.fenced.try_lock_for_at(wait, lease, Location::caller());
        let guard = self.lock.blocker.call(lock)?;
        Ok(guard.map(|g| self.with_token(g)))
    }

    /// The last token a fenced grant of this name handed out (by any client), `None` before the
    /// first. As [`ferrisson::RFencedLock::token`](crate::RFencedLock::token).
    ///
    /// # Errors
    ///
    /// [`Error::InsideRuntime`], [`Error::WrongType`], [`Error::Redis`],
    /// [`Error::InvalidArgument`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::RFencedLock) -> ferrisson::Result<()> {
    /// println!("last token: {:?}", lock.token()?);
    /// # Ok(()) }
    /// ```
    pub fn token(&self) -> Result<Option<u64>> {
        self.lock.blocker.call(self.fenced.token())
    }
}

impl Deref for RFencedLock {
    type Target = RLock;

    fn deref(&self) -> &RLock {
        &self.lock
    }
}
