//! The blocking lock guard.

use std::time::Duration;

use super::Blocker;
use crate::error::Result;

/// One hold of a lock, for synchronous code: the blocking twin of
/// [`ferrisson::LockGuard`](crate::LockGuard). `Send` and `'static`: it carries its hold to
/// another thread, where it may be released.
///
/// While it lives, a hold taken without a fixed lease is renewed by the client's watchdog on the
/// client's own thread, whatever the holding thread does: CPU work or a long
/// `std::thread::sleep` never costs the lease. [`is_lost`](Self::is_lost) and
/// [`wait_lost`](Self::wait_lost) tell when it is lost anyway (the key deleted, Redis gone for
/// longer than the lease).
///
/// Release it with [`unlock`](Self::unlock), which reports errors. Dropping it instead stops the
/// renewal at once and sends the release from the client's thread, without blocking the thread
/// that drops it (failures are logged with `tracing`; the lease frees the lock if the release
/// cannot be sent).
///
/// # Examples
///
/// ```no_run
/// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
/// let guard = client.get_lock("invoices").lock()?;
/// for batch in 0..10 {
///     if guard.is_lost() {
///         eprintln!("lease lost before batch {batch}: stop writing");
///         break;
///     }
///     // write(batch, guard.fencing_token())
/// }
/// guard.unlock()?;
/// # Ok(()) }
/// ```
#[must_use = "if unused the lock is released immediately"]
#[clippy::has_significant_drop]
#[derive(Debug)]
pub struct LockGuard {
    guard: crate::LockGuard,
    blocker: Blocker,
}

impl LockGuard {
    pub(super) fn wrap(guard: crate::LockGuard, blocker: Blocker) -> Self {
        LockGuard { guard, blocker }
    }

    /// The lock's name.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
    /// let guard = client.get_lock("orders").lock()?;
    /// assert_eq!(guard.name(), "orders");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        self.guard.name()
    }

    /// Gives back this hold. The lock is free once every hold of its owner is given back.
    ///
    /// # Errors
    ///
    /// [`Error::InsideRuntime`](crate::Error::InsideRuntime) in async code (the guard
    /// is dropped then, which releases the hold in the background);
    /// [`Error::LockLost`](crate::Error::LockLost) when the hold was already gone;
    /// [`Error::Redis`](crate::Error::Redis) when Redis could not be reached, in which case the
    /// lease, no longer renewed, frees the lock when it runs out. As
    /// [`ferrisson::LockGuard::unlock`](crate::LockGuard::unlock).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::RLock) -> ferrisson::Result<()> {
    /// let guard = lock.lock()?;
    /// guard.unlock()?;
    /// # Ok(()) }
    /// ```
    pub fn unlock(self) -> Result<()> {
        let LockGuard { guard, blocker } = self;
        blocker.call(guard.unlock())
    }

    /// One more hold of this guard's acquisition, granted at once with this hold's fencing
    /// token: Redisson's reentrant `lock()`, made explicit. As
    /// [`ferrisson::LockGuard::reenter`](crate::LockGuard::reenter).
    ///
    /// # Errors
    ///
    /// [`Error::InsideRuntime`](crate::Error::InsideRuntime) in async code;
    /// [`Error::LockLost`](crate::Error::LockLost) when this hold is gone;
    /// [`Error::Redis`](crate::Error::Redis) when Redis fails.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
    /// fn audit(guard: &ferrisson::blocking::LockGuard) -> ferrisson::Result<()> {
    ///     let nested = guard.reenter()?; // one more hold, same token
    ///     nested.unlock()
    /// }
    /// let guard = client.get_lock("ledger").lock()?;
    /// audit(&guard)?;
    /// guard.unlock()?;
    /// # Ok(()) }
    /// ```
    pub fn reenter(&self) -> Result<LockGuard> {
        let nested = self.blocker.call(self.guard.reenter())?;
        Ok(LockGuard::wrap(nested, self.blocker.clone()))
    }

    /// Runs `work` on the calling thread inside this hold's scope: an acquisition of the same
    /// lock (same client and name, any handle) that `work` makes on this thread is one more
    /// hold of this one, as inside [`RLock::with_lock`](super::RLock::with_lock). Other
    /// threads, those `work` starts included, are outside.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
    /// let lock = client.get_lock("ledger");
    /// let guard = lock.lock()?;
    /// guard.scope(|| -> ferrisson::Result<()> {
    ///     let again = lock.lock()?; // nested: granted at once
    ///     again.unlock()
    /// })?;
    /// guard.unlock()?;
    /// # Ok(()) }
    /// ```
    pub fn scope<T>(&self, work: impl FnOnce() -> T) -> T {
        self.guard.entry().run_here(work)
    }

    /// How many holds this guard's acquisition has on the lock (this one and those nested in
    /// it), as Redis counts them. As
    /// [`ferrisson::LockGuard::hold_count`](crate::LockGuard::hold_count).
    ///
    /// # Errors
    ///
    /// [`Error::InsideRuntime`](crate::Error::InsideRuntime) in async code;
    /// [`Error::Redis`](crate::Error::Redis).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::RLock) -> ferrisson::Result<()> {
    /// let guard = lock.lock()?;
    /// assert_eq!(guard.hold_count()?, 1);
    /// guard.unlock()?;
    /// # Ok(()) }
    /// ```
    pub fn hold_count(&self) -> Result<u32> {
        self.blocker.call(self.guard.hold_count())
    }

    /// The fencing token of this hold: strictly greater than that of every earlier grant of the
    /// same lock name, from any client. Reentrant holds share their first hold's token.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::RLock) -> ferrisson::Result<()> {
    /// let guard = lock.lock()?;
    /// println!("writing with token {}", guard.fencing_token());
    /// # Ok(()) }
    /// ```
    pub fn fencing_token(&self) -> u64 {
        self.guard.fencing_token()
    }

    /// True once the lease is lost: a renewal found the lock no longer ours, or the lease ran
    /// out without a confirmed renewal. The holder must stop touching the resource. Once true,
    /// it stays true. Never blocks.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::RLock) -> ferrisson::Result<()> {
    /// let guard = lock.lock()?;
    /// assert!(!guard.is_lost());
    /// # Ok(()) }
    /// ```
    pub fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    /// Blocks until the lease is lost or `timeout` has passed; whether it was lost.
    /// `Duration::MAX` waits for as long as the hold lasts. For a thread that watches a hold
    /// others work under.
    ///
    /// # Errors
    ///
    /// [`Error::InsideRuntime`](crate::Error::InsideRuntime) in async code.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::RLock) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// let guard = lock.lock()?;
    /// if guard.wait_lost(Duration::from_secs(1))? {
    ///     eprintln!("lease lost: stop");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn wait_lost(&self, timeout: Duration) -> Result<bool> {
        self.blocker.wait_for(timeout, self.guard.lost())
    }

    /// True once this hold is known to be asked to let go (a revocation request, see
    /// [`RLock::request_revocation`](super::RLock::request_revocation)). Never blocks. As
    /// [`ferrisson::LockGuard::is_revocation_requested`](crate::LockGuard::is_revocation_requested).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::RLock) -> ferrisson::Result<()> {
    /// let guard = lock.lock()?;
    /// if guard.is_revocation_requested() {
    ///     guard.unlock()?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn is_revocation_requested(&self) -> bool {
        self.guard.is_revocation_requested()
    }

    /// Blocks until somebody asks this hold to let go, or `timeout` has passed; whether a
    /// request came. Listens for the request's message while it waits. As
    /// [`ferrisson::LockGuard::revocation_requested`](crate::LockGuard::revocation_requested).
    ///
    /// # Errors
    ///
    /// [`Error::InsideRuntime`](crate::Error::InsideRuntime) in async code.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(lock: ferrisson::blocking::RLock) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// let guard = lock.lock()?;
    /// if guard.wait_revocation_requested(Duration::from_secs(60))? {
    ///     eprintln!("asked to let go");
    /// }
    /// guard.unlock()?;
    /// # Ok(()) }
    /// ```
    pub fn wait_revocation_requested(&self, timeout: Duration) -> Result<bool> {
        self.blocker
            .wait_for(timeout, self.guard.revocation_requested())
    }
}
