//! Blocking combinators: `MultiLock` and `RedLock`.

use std::panic::Location;
use std::time::Duration;

use super::{Blocker, RLock};
use crate::error::{Error, Result};

/// The blocker of the first lock given; `None` for no locks at all, which every acquire refuses.
fn first_blocker(locks: &[RLock]) -> Option<Blocker> {
    locks.first().map(|lock| lock.blocker().clone())
}

pub(super) fn driven_by<'a>(blocker: &'a Option<Blocker>, what: &str) -> Result<&'a Blocker> {
    blocker
        .as_ref()
        .ok_or_else(|| Error::InvalidArgument(format!("a {what} needs at least one lock")))
}

/// Several locks, from one or several clients, taken as one, all or none: the blocking twin of
/// [`ferrisson::MultiLock`](crate::MultiLock). The locks are taken in one canonical order, so
/// two MultiLocks over the same locks never deadlock; the parts' holds belong to the calling
/// thread.
///
/// # Examples
///
/// ```no_run
/// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
/// use ferrisson::blocking::MultiLock;
///
/// let transfer = MultiLock::new([client.get_lock("account:1"), client.get_lock("account:2")]);
/// let guard = transfer.lock()?;
/// // ... move money between both accounts ...
/// guard.unlock()?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct MultiLock {
    pub(super) multi: crate::MultiLock,
    pub(super) blocker: Option<Blocker>,
}

impl MultiLock {
    /// A MultiLock over `locks`. One acquisition takes all parts as one owner: a lock given
    /// twice (the same handle, or another of the same client and name) is one more hold of its
    /// first part.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(a: ferrisson::blocking::Client, b: ferrisson::blocking::Client) {
    /// use ferrisson::blocking::MultiLock;
    /// // Locks of two clients (two servers, say) in one MultiLock.
    /// let both = MultiLock::new([a.get_lock("stock:9"), b.get_lock("stock:9")]);
    /// # let _ = both;
    /// # }
    /// ```
    pub fn new(locks: impl IntoIterator<Item = RLock>) -> Self {
        let locks: Vec<RLock> = locks.into_iter().collect();
        MultiLock {
            blocker: first_blocker(&locks),
            multi: crate::MultiLock::new(locks.into_iter().map(|l| l.lock)),
        }
    }

    fn guard(&self, guard: crate::MultiGuard, blocker: &Blocker) -> MultiGuard {
        MultiGuard {
            guard,
            blocker: blocker.clone(),
        }
    }

    /// Blocks until every part is acquired (watchdog leases).
    ///
    /// # Errors
    ///
    /// [`Error::InsideRuntime`] in async code; otherwise as
    /// [`ferrisson::MultiLock::lock`](crate::MultiLock::lock): the first part that fails, as
    /// [`Error::Part`] (its lock's name, its server and its own error), after every part
    /// acquired so far was released; [`Error::InvalidArgument`] for an empty MultiLock or a
    /// malformed name.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(multi: ferrisson::blocking::MultiLock) -> ferrisson::Result<()> {
    /// multi.lock()?.unlock()?;
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn lock(&self) -> Result<MultiGuard> {
        let blocker = driven_by(&self.blocker, "MultiLock")?;
        let guard = blocker.call(self.multi.lock_at(Location::caller()))?;
        Ok(self.guard(guard, blocker))
    }

    /// Blocks until every part is acquired, each with the fixed `lease`.
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock); [`Error::InvalidArgument`] for a lease under 1 ms.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(multi: ferrisson::blocking::MultiLock) -> ferrisson::Result<()> {
    /// multi.lock_with_lease(std::time::Duration::from_secs(10))?.unlock()?;
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn lock_with_lease(&self, lease: Duration) -> Result<MultiGuard> {
        let blocker = driven_by(&self.blocker, "MultiLock")?;
        let lock = self.multi.lock_with_lease_at(lease, Location::caller());
        let guard = blocker.call(lock)?;
        Ok(self.guard(guard, blocker))
    }

    /// One attempt at every part; `Ok(None)` when any is taken, with every part it took
    /// released on its server before it returns.
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(multi: ferrisson::blocking::MultiLock) -> ferrisson::Result<()> {
    /// if let Some(guard) = multi.try_lock()? {
    ///     guard.unlock()?;
    /// }
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn try_lock(&self) -> Result<Option<MultiGuard>> {
        let blocker = driven_by(&self.blocker, "MultiLock")?;
        let lock = self
            .multi
            .acquire(Some(Duration::ZERO), None, Location::caller());
        let guard = blocker.call(lock)?;
        Ok(guard.map(|g| self.guard(g, blocker)))
    }

    /// Blocks at most `wait` for every part; with `lease` the leases are fixed.
    ///
    /// # Errors
    ///
    /// As [`lock_with_lease`](Self::lock_with_lease). Running out of `wait` is `Ok(None)`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(multi: ferrisson::blocking::MultiLock) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// if let Some(guard) = multi.try_lock_for(Duration::from_secs(1), None)? {
    ///     guard.unlock()?;
    /// }
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn try_lock_for(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Option<MultiGuard>> {
        let blocker = driven_by(&self.blocker, "MultiLock")?;
        let lock = self.multi.acquire(Some(wait), lease, Location::caller());
        let guard = blocker.call(lock)?;
        Ok(guard.map(|g| self.guard(g, blocker)))
    }
}

/// All parts of a [`MultiLock`], held. Released with [`unlock`](Self::unlock); dropped, each
/// part is released in the background, on its client's thread.
///
/// # Examples
///
/// ```no_run
/// # fn demo(multi: ferrisson::blocking::MultiLock) -> ferrisson::Result<()> {
/// let guard = multi.lock()?;
/// let tokens: Vec<u64> = guard.parts().iter().map(|p| p.fencing_token()).collect();
/// # let _ = tokens;
/// guard.unlock()?;
/// # Ok(()) }
/// ```
#[must_use = "if unused the locks are released immediately"]
#[clippy::has_significant_drop]
#[derive(Debug)]
pub struct MultiGuard {
    guard: crate::MultiGuard,
    blocker: Blocker,
}

impl MultiGuard {
    /// Releases every part, all at once, and reports every failure.
    ///
    /// # Errors
    ///
    /// [`Error::InsideRuntime`] in async code (the guard is dropped then, which
    /// releases every part in the background); [`Error::Multiple`] with one [`Error::Part`] per
    /// part that could not be released, naming its lock and server (the others are released
    /// all the same).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(multi: ferrisson::blocking::MultiLock) -> ferrisson::Result<()> {
    /// let guard = multi.lock()?;
    /// if let Err(ferrisson::Error::Multiple { errors }) = guard.unlock() {
    ///     for e in errors {
    ///         eprintln!("{e}"); // lock `account:2` on 10.0.0.2:6379: redis request failed: ...
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn unlock(self) -> Result<()> {
        let MultiGuard { guard, blocker } = self;
        blocker.call(guard.unlock())
    }

    /// True once any part's lease is lost. Never blocks.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(multi: ferrisson::blocking::MultiLock) -> ferrisson::Result<()> {
    /// let guard = multi.lock()?;
    /// assert!(!guard.is_lost());
    /// # Ok(()) }
    /// ```
    pub fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    /// Blocks until any part's lease is lost or `timeout` has passed; whether one was lost.
    ///
    /// # Errors
    ///
    /// [`Error::InsideRuntime`] in async code.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(multi: ferrisson::blocking::MultiLock) -> ferrisson::Result<()> {
    /// let guard = multi.lock()?;
    /// if guard.wait_lost(std::time::Duration::from_secs(1))? {
    ///     eprintln!("a part was lost: stop");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn wait_lost(&self, timeout: Duration) -> Result<bool> {
        self.blocker.wait_for(timeout, self.guard.lost())
    }

    /// The parts' guards, in acquisition order: their plain methods
    /// ([`fencing_token`](crate::LockGuard::fencing_token), [`name`](crate::LockGuard::name),
    /// [`is_lost`](crate::LockGuard::is_lost)) need no runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(multi: ferrisson::blocking::MultiLock) -> ferrisson::Result<()> {
    /// let guard = multi.lock()?;
    /// for part in guard.parts() {
    ///     println!("{}: token {}", part.name(), part.fencing_token());
    /// }
    /// # Ok(()) }
    /// ```
    pub fn parts(&self) -> &[crate::LockGuard] {
        self.guard.parts()
    }
}

/// The Redlock algorithm over locks of independent masters, for synchronous code: the blocking
/// twin of [`ferrisson::RedLock`](crate::RedLock). Held once a majority granted, with a
/// validity deadline.
///
/// # Examples
///
/// ```no_run
/// # fn demo(a: ferrisson::blocking::Client, b: ferrisson::blocking::Client, c: ferrisson::blocking::Client) -> ferrisson::Result<()> {
/// use ferrisson::blocking::RedLock;
///
/// let lock = RedLock::new([a.get_lock("job"), b.get_lock("job"), c.get_lock("job")]);
/// let guard = lock.lock()?;
/// println!("valid until {:?}", guard.validity_deadline());
/// guard.unlock().ok(); // an instance that is down reports an error here
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RedLock {
    pub(super) redlock: crate::RedLock,
    pub(super) blocker: Option<Blocker>,
}

impl RedLock {
    /// A RedLock over `locks`, one per independent master.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(clients: Vec<ferrisson::blocking::Client>) {
    /// use ferrisson::blocking::RedLock;
    /// let lock = RedLock::new(clients.iter().map(|c| c.get_lock("job")));
    /// assert_eq!(lock.quorum(), clients.len() / 2 + 1);
    /// # }
    /// ```
    pub fn new(locks: impl IntoIterator<Item = RLock>) -> Self {
        let locks: Vec<RLock> = locks.into_iter().collect();
        RedLock {
            blocker: first_blocker(&locks),
            redlock: crate::RedLock::new(locks.into_iter().map(|l| l.lock)),
        }
    }

    /// How long one instance may take to answer an acquire before it counts as not answering.
    ///
    /// Default is a twentieth of the lease, between 10 ms and 1 s.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::RedLock) {
    /// let lock = lock.instance_timeout(std::time::Duration::from_millis(50));
    /// # let _ = lock;
    /// # }
    /// ```
    #[must_use]
    pub fn instance_timeout(self, timeout: Duration) -> Self {
        RedLock {
            redlock: self.redlock.instance_timeout(timeout),
            blocker: self.blocker,
        }
    }

    /// The longest random pause between two attempts.
    ///
    /// Default is 100 ms.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::RedLock) {
    /// let lock = lock.retry_delay(std::time::Duration::from_millis(20));
    /// # let _ = lock;
    /// # }
    /// ```
    #[must_use]
    pub fn retry_delay(self, max: Duration) -> Self {
        RedLock {
            redlock: self.redlock.retry_delay(max),
            blocker: self.blocker,
        }
    }

    /// The majority: N/2+1.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::RedLock) {
    /// println!("needs {} grants", lock.quorum());
    /// # }
    /// ```
    pub fn quorum(&self) -> usize {
        self.redlock.quorum()
    }

    fn guard(&self, guard: crate::RedLockGuard, blocker: &Blocker) -> RedLockGuard {
        RedLockGuard {
            guard,
            blocker: blocker.clone(),
        }
    }

    /// Blocks until a majority grants (watchdog leases).
    ///
    /// # Errors
    ///
    /// [`Error::InsideRuntime`] in async code; otherwise as
    /// [`ferrisson::RedLock::lock`](crate::RedLock::lock): [`Error::QuorumNotReached`],
    /// [`Error::InvalidArgument`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(redlock: ferrisson::blocking::RedLock) -> ferrisson::Result<()> {
    /// redlock.lock()?.unlock().ok();
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn lock(&self) -> Result<RedLockGuard> {
        let blocker = driven_by(&self.blocker, "RedLock")?;
        let guard = blocker.call(self.redlock.lock_at(Location::caller()))?;
        Ok(self.guard(guard, blocker))
    }

    /// Blocks until a majority grants, with the fixed `lease`.
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock); [`Error::InvalidArgument`] for a lease under 1 ms.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(redlock: ferrisson::blocking::RedLock) -> ferrisson::Result<()> {
    /// redlock.lock_with_lease(std::time::Duration::from_secs(10))?.unlock().ok();
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn lock_with_lease(&self, lease: Duration) -> Result<RedLockGuard> {
        let blocker = driven_by(&self.blocker, "RedLock")?;
        let lock = self.redlock.lock_with_lease_at(lease, Location::caller());
        let guard = blocker.call(lock)?;
        Ok(self.guard(guard, blocker))
    }

    /// One attempt; `Ok(None)` when no majority granted (or the validity was spent), with every
    /// grant it got released on its server before it returns.
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(redlock: ferrisson::blocking::RedLock) -> ferrisson::Result<()> {
    /// if let Some(guard) = redlock.try_lock()? {
    ///     guard.unlock().ok();
    /// }
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn try_lock(&self) -> Result<Option<RedLockGuard>> {
        let blocker = driven_by(&self.blocker, "RedLock")?;
        let lock = self
            .redlock
            .acquire(Some(Duration::ZERO), None, Location::caller());
        let guard = blocker.call(lock)?;
        Ok(guard.map(|g| self.guard(g, blocker)))
    }

    /// Blocks at most `wait` for a majority; with `lease` the leases are fixed.
    ///
    /// # Errors
    ///
    /// As [`lock_with_lease`](Self::lock_with_lease). Running out of `wait` is `Ok(None)`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(redlock: ferrisson::blocking::RedLock) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// if let Some(guard) = redlock.try_lock_for(Duration::from_secs(1), None)? {
    ///     guard.unlock().ok();
    /// }
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn try_lock_for(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Option<RedLockGuard>> {
        let blocker = driven_by(&self.blocker, "RedLock")?;
        let lock = self.redlock.acquire(Some(wait), lease, Location::caller());
        let guard = blocker.call(lock)?;
        Ok(guard.map(|g| self.guard(g, blocker)))
    }
}

/// A [`RedLock`] held on a majority of its instances. Released with [`unlock`](Self::unlock);
/// dropped, each instance's part is released in the background.
///
/// # Examples
///
/// ```no_run
/// # fn demo(redlock: ferrisson::blocking::RedLock) -> ferrisson::Result<()> {
/// let guard = redlock.lock()?;
/// println!("{} of the instances granted", guard.granted());
/// guard.unlock().ok();
/// # Ok(()) }
/// ```
#[must_use = "if unused the lock is released immediately"]
#[clippy::has_significant_drop]
#[derive(Debug)]
pub struct RedLockGuard {
    guard: crate::RedLockGuard,
    blocker: Blocker,
}

impl RedLockGuard {
    /// Until when the lock is held on a majority. As
    /// [`ferrisson::RedLockGuard::validity_deadline`](crate::RedLockGuard::validity_deadline).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(guard: ferrisson::blocking::RedLockGuard) {
    /// let left = guard.validity_deadline().saturating_duration_since(std::time::Instant::now());
    /// println!("{left:?} left");
    /// # }
    /// ```
    pub fn validity_deadline(&self) -> std::time::Instant {
        self.guard.validity_deadline()
    }

    /// True once fewer than a majority of parts hold, or the validity deadline has passed.
    /// Never blocks.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(guard: ferrisson::blocking::RedLockGuard) {
    /// if guard.is_lost() {
    ///     eprintln!("no majority any more: stop");
    /// }
    /// # }
    /// ```
    pub fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    /// Blocks until [`is_lost`](Self::is_lost) is true or `timeout` has passed; whether it was
    /// lost.
    ///
    /// # Errors
    ///
    /// [`Error::InsideRuntime`] in async code.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(guard: ferrisson::blocking::RedLockGuard) -> ferrisson::Result<()> {
    /// if guard.wait_lost(std::time::Duration::from_secs(1))? {
    ///     eprintln!("no majority any more: stop");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn wait_lost(&self, timeout: Duration) -> Result<bool> {
        self.blocker.wait_for(timeout, self.guard.lost())
    }

    /// Each granted instance's fencing token. They are not comparable across instances.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(guard: ferrisson::blocking::RedLockGuard) {
    /// println!("tokens {:?}", guard.fencing_tokens());
    /// # }
    /// ```
    pub fn fencing_tokens(&self) -> Vec<u64> {
        self.guard.fencing_tokens()
    }

    /// How many instances granted.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(guard: ferrisson::blocking::RedLockGuard) {
    /// println!("{} grants", guard.granted());
    /// # }
    /// ```
    pub fn granted(&self) -> usize {
        self.guard.granted()
    }

    /// Releases every instance at once and reports every failure.
    ///
    /// # Errors
    ///
    /// [`Error::InsideRuntime`] in async code (the guard is dropped then, which
    /// releases in the background); [`Error::ReleasedOnMajority`] when a majority released
    /// (the lock is free: go on) but some instances did not; [`Error::Multiple`] when fewer
    /// than a majority released (the lock may stay taken until their leases run out). Each
    /// with one [`Error::Part`] per instance that could not be released, naming its lock and
    /// server. See [`ferrisson::RedLockGuard::unlock`](crate::RedLockGuard::unlock).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(redlock: ferrisson::blocking::RedLock) -> ferrisson::Result<()> {
    /// let guard = redlock.lock()?;
    /// match guard.unlock() {
    ///     Ok(()) | Err(ferrisson::Error::ReleasedOnMajority { .. }) => {} // free for others
    ///     Err(e) => eprintln!("may stay taken until its leases run out: {e}"),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn unlock(self) -> Result<()> {
        let RedLockGuard { guard, blocker } = self;
        blocker.call(guard.unlock())
    }
}
