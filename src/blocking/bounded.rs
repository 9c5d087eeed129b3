//! Blocking work under a hold, for every object: `try_with_lock_for` of the lock handles,
//! `with_lock` and `try_with_lock_for` of [`RMutex`], [`MultiLock`] and [`RedLock`], and the
//! semaphores' `with_permits` / `with_permit` with their bounded twins.
//!
//! Every one has the blocking [`RLock::with_lock`]'s contract: the closure runs on the calling
//! thread, inside the hold's scope where the kind nests, and once started always runs to its
//! end (synchronous work cannot be stopped from outside); its output is the answer even when
//! the hold was lost meanwhile or the release then fails (each logged as a WARN). An `Err`
//! means the closure never ran. The bounded twins wait at most `wait` for the acquisition only,
//! and answer `Ok(None)` (the closure did not run) when it was not had in time.

use std::time::Duration;

use super::combinator::driven_by;
use super::{Blocker, MultiLock, RLock, RMutex, RPermitExpirableSemaphore, RSemaphore, RedLock};
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::lock::LockGuard;
use crate::lock::bounded::{Held, run_held_here};
use crate::sync::with_permits::{Taken, id_and_token};

/// Runs `work` on the calling thread under `held` and gives the hold back through `blocker`:
/// the output, whatever the release says (see [`run_held_here`]).
pub(super) fn work_under<H: Held, T>(blocker: &Blocker, held: H, work: impl FnOnce() -> T) -> T {
    run_held_here(held, work, |held| blocker.call(held.release()))
}

/// The parts' fencing tokens, in the order of the guard's parts.
fn tokens(parts: &[LockGuard]) -> Vec<u64> {
    parts.iter().map(LockGuard::fencing_token).collect()
}

impl RLock {
    /// Waits at most `wait` for the lock (as [`try_lock_for`](Self::try_lock_for) with the
    /// watchdog's lease), runs `work` with the hold's fencing token on the calling thread, and
    /// gives the lock back: [`with_lock`](Self::with_lock) with a bounded wait. `Ok(None)` when
    /// the lock was not had within `wait`: `work` did not run. As
    /// [`ferrisson::RLock::try_with_lock_for`](crate::RLock::try_with_lock_for).
    ///
    /// `wait` bounds the acquisition only: once the lock is held, `work` runs to its end
    /// however long it takes (the watchdog renews the lease meanwhile). Everything else is
    /// [`with_lock`](Self::with_lock)'s: `work` runs inside the hold's scope, and its output is
    /// the answer even when the hold was lost meanwhile or the release fails (a WARN naming the
    /// lock). `Duration::ZERO` makes one attempt. [`RFencedLock`](super::RFencedLock) has it
    /// too, through `Deref`.
    ///
    /// # Errors
    ///
    /// As [`try_lock_for`](Self::try_lock_for) for the acquire (`work` did not run). Never an
    /// error of the release.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// let lock = client.get_lock("nightly-report");
    /// match lock.try_with_lock_for(Duration::from_millis(200), |_token| "sent")? {
    ///     Some(outcome) => println!("report {outcome}"),
    ///     None => println!("somebody else is on it"),
    /// }
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn try_with_lock_for<T>(
        &self,
        wait: Duration,
        work: impl FnOnce(u64) -> T,
    ) -> Result<Option<T>> {
        let blocker = self.blocker();
        let Some(guard) = blocker.call(self.lock.try_lock_for(wait, None))? else {
            return Ok(None);
        };
        let token = guard.fencing_token();
        Ok(Some(work_under(blocker, guard, || work(token))))
    }
}

impl RMutex {
    /// Takes the mutex (as [`lock`](Self::lock) does), runs `work` with the hold's fencing
    /// token on the calling thread, and gives the mutex back, with the blocking
    /// [`RLock::with_lock`]'s contract: `work` always runs to its end once started, and its
    /// output is the answer even when the hold was lost meanwhile or the release fails (a WARN
    /// naming the mutex). Nothing nests in a mutex's hold: a `lock()` of this mutex inside
    /// `work` waits for it, so for ever.
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock) for the acquire (`work` did not run). Never an error of the
    /// release.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
    /// let applied = client.get_mutex("migration").with_lock(|_token| 3)?;
    /// assert_eq!(applied, 3);
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn with_lock<T>(&self, work: impl FnOnce(u64) -> T) -> Result<T> {
        let guard = self.blocker.call(self.mutex.lock())?;
        let token = guard.fencing_token();
        Ok(work_under(&self.blocker, guard, || work(token)))
    }

    /// Waits at most `wait` for the mutex (watchdog lease), runs `work` with the hold's
    /// fencing token, and gives the mutex back: [`with_lock`](Self::with_lock) with a bounded
    /// wait, which bounds the acquisition only (`work` runs to its end once started).
    /// `Ok(None)` when the mutex was not had within `wait`: `work` did not run.
    /// `Duration::ZERO` makes one attempt.
    ///
    /// # Errors
    ///
    /// As [`try_lock_for`](Self::try_lock_for) for the acquire (`work` did not run). Never an
    /// error of the release.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// let migration = client.get_mutex("migration");
    /// if migration.try_with_lock_for(Duration::from_secs(1), |_| "migrated")?.is_none() {
    ///     println!("another migration is running");
    /// }
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn try_with_lock_for<T>(
        &self,
        wait: Duration,
        work: impl FnOnce(u64) -> T,
    ) -> Result<Option<T>> {
        let Some(guard) = self.blocker.call(self.mutex.try_lock_for(wait, None))? else {
            return Ok(None);
        };
        let token = guard.fencing_token();
        Ok(Some(work_under(&self.blocker, guard, || work(token))))
    }
}

impl MultiLock {
    /// Takes every part (as [`lock`](Self::lock) does), runs `work` on the calling thread with
    /// the parts' fencing tokens (in the order of [`MultiGuard::parts`](super::MultiGuard::parts)),
    /// and gives every part back, with the blocking [`RLock::with_lock`]'s contract: `work`
    /// always runs to its end once started, and its output is the answer even when a part was
    /// lost meanwhile or a release fails (a WARN naming the locks). `work` runs inside every
    /// part's scope: an acquisition of a part's lock it makes on this thread is one more hold
    /// of that part. As [`ferrisson::MultiLock::with_lock`](crate::MultiLock::with_lock).
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock) for the acquire (`work` did not run). Never an error of the
    /// release.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
    /// use ferrisson::blocking::MultiLock;
    /// let transfer = MultiLock::new([client.get_lock("account:1"), client.get_lock("account:2")]);
    /// let parts = transfer.with_lock(|tokens| tokens.len())?;
    /// assert_eq!(parts, 2);
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn with_lock<T>(&self, work: impl FnOnce(Vec<u64>) -> T) -> Result<T> {
        let blocker = driven_by(&self.blocker, "MultiLock")?;
        let guard = blocker.call(self.multi.lock())?;
        let tokens = tokens(guard.parts());
        Ok(work_under(blocker, guard, || work(tokens)))
    }

    /// Waits at most `wait` for every part together (watchdog leases), runs `work` with the
    /// parts' fencing tokens, and gives every part back: [`with_lock`](Self::with_lock) with a
    /// bounded wait, which bounds the acquisition only (`work` runs to its end once started).
    /// `Ok(None)` when the parts were not all had within `wait`, with nothing held: `work` did
    /// not run. `Duration::ZERO` makes one attempt.
    ///
    /// # Errors
    ///
    /// As [`try_lock_for`](Self::try_lock_for) for the acquire (`work` did not run). Never an
    /// error of the release.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(transfer: ferrisson::blocking::MultiLock) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// if transfer.try_with_lock_for(Duration::from_millis(500), |_| "moved")?.is_none() {
    ///     println!("an account is busy: try later");
    /// }
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn try_with_lock_for<T>(
        &self,
        wait: Duration,
        work: impl FnOnce(Vec<u64>) -> T,
    ) -> Result<Option<T>> {
        let blocker = driven_by(&self.blocker, "MultiLock")?;
        let Some(guard) = blocker.call(self.multi.try_lock_for(wait, None))? else {
            return Ok(None);
        };
        let tokens = tokens(guard.parts());
        Ok(Some(work_under(blocker, guard, || work(tokens))))
    }
}

impl RedLock {
    /// Waits until a majority grants (as [`lock`](Self::lock) does), runs `work` on the
    /// calling thread with the granted instances' fencing tokens (not comparable across
    /// instances), and releases every instance, with the blocking [`RLock::with_lock`]'s
    /// contract: `work` always runs to its end once started, and its output is the answer even
    /// when the majority was lost meanwhile or a release fails (a WARN naming the lock). As
    /// [`ferrisson::RedLock::with_lock`](crate::RedLock::with_lock).
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock) for the acquire (`work` did not run). Never an error of the
    /// release.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(redlock: ferrisson::blocking::RedLock) -> ferrisson::Result<()> {
    /// let granted = redlock.with_lock(|tokens| tokens.len())?;
    /// assert!(granted >= redlock.quorum());
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn with_lock<T>(&self, work: impl FnOnce(Vec<u64>) -> T) -> Result<T> {
        let blocker = driven_by(&self.blocker, "RedLock")?;
        let guard = blocker.call(self.redlock.lock())?;
        let tokens = guard.fencing_tokens();
        Ok(work_under(blocker, guard, || work(tokens)))
    }

    /// Attempts until a majority grants or `wait` is spent (watchdog leases), runs `work` with
    /// the granted instances' fencing tokens, and releases every instance:
    /// [`with_lock`](Self::with_lock) with a bounded wait, which bounds the acquisition only
    /// (`work` runs to its end once started). `Ok(None)` when no majority was had within
    /// `wait`: `work` did not run. `Duration::ZERO` makes one attempt.
    ///
    /// # Errors
    ///
    /// As [`try_lock_for`](Self::try_lock_for) for the acquire (`work` did not run). Never an
    /// error of the release.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(redlock: ferrisson::blocking::RedLock) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// if redlock.try_with_lock_for(Duration::from_secs(1), |_| "ran")?.is_none() {
    ///     println!("no majority within 1 s");
    /// }
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn try_with_lock_for<T>(
        &self,
        wait: Duration,
        work: impl FnOnce(Vec<u64>) -> T,
    ) -> Result<Option<T>> {
        let blocker = driven_by(&self.blocker, "RedLock")?;
        let Some(guard) = blocker.call(self.redlock.try_lock_for(wait, None))? else {
            return Ok(None);
        };
        let tokens = guard.fencing_tokens();
        Ok(Some(work_under(blocker, guard, || work(tokens))))
    }
}

impl RSemaphore {
    /// Waits until `n` permits are free and takes them (as [`acquire`](Self::acquire) does),
    /// runs `work` on the calling thread, and gives the `n` permits back. As
    /// [`ferrisson::RSemaphore::with_permits`](crate::RSemaphore::with_permits): the permits
    /// cannot be lost, `work` runs to its end once started, and its output is the answer even
    /// when the release fails (a WARN naming the semaphore; a release whose answer was lost is
    /// not resent). Should `work` panic, the permits are given back in the background.
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire): `work` did not run. Never an error of the release.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
    /// let api = client.get_semaphore("partner-api");
    /// api.try_set_permits(4)?;
    /// let status = api.with_permits(1, || 200)?; // call the partner API inside
    /// assert_eq!(status, 200);
    /// # Ok(()) }
    /// ```
    pub fn with_permits<T>(&self, n: u64, work: impl FnOnce() -> T) -> Result<T> {
        self.blocker.call(self.semaphore.acquire(n))?;
        Ok(self.work_under(n, work))
    }

    /// Waits at most `wait` until `n` permits are free and takes them, runs `work`, and gives
    /// them back: [`with_permits`](Self::with_permits) with a bounded wait, which bounds the
    /// acquisition only (`work` runs to its end once started). `Ok(None)` when the permits were
    /// not had within `wait`: `work` did not run. `Duration::ZERO` makes one attempt.
    ///
    /// # Errors
    ///
    /// As [`try_acquire_for`](Self::try_acquire_for): `work` did not run. Never an error of
    /// the release.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(api: ferrisson::blocking::RSemaphore) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// if api.try_with_permits_for(1, Duration::from_millis(100), || 200)?.is_none() {
    ///     println!("the partner API is at its limit: shed the request");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn try_with_permits_for<T>(
        &self,
        n: u64,
        wait: Duration,
        work: impl FnOnce() -> T,
    ) -> Result<Option<T>> {
        if !self.blocker.call(self.semaphore.try_acquire_for(n, wait))? {
            return Ok(None);
        }
        Ok(Some(self.work_under(n, work)))
    }

    /// Runs `work` under `n` permits just taken, and gives them back.
    fn work_under<T>(&self, n: u64, work: impl FnOnce() -> T) -> T {
        // Armed before `work` runs: a panic gives the permits back in the background.
        let taken = Taken::new(&self.semaphore, n);
        let out = work();
        // A failure is logged by `give_back`; a refused call drops it, which gives them back.
        let _ = self.blocker.run(taken.give_back());
        out
    }
}

impl RPermitExpirableSemaphore {
    /// Waits until a permit is free and takes it (as [`acquire`](Self::acquire) does), runs
    /// `work` on the calling thread with the permit's id and fencing token, and gives the
    /// permit back, with the blocking [`RLock::with_lock`]'s contract: `work` always runs to its
    /// end once started, and its output is the answer even when the permit was lost meanwhile
    /// or the release fails (a WARN naming the semaphore). As
    /// [`ferrisson::RPermitExpirableSemaphore::with_permit`](crate::RPermitExpirableSemaphore::with_permit).
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire) for the acquire (`work` did not run). Never an error of
    /// the release.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
    /// let slots = client.get_permit_expirable_semaphore("render-slots");
    /// slots.try_set_permits(4)?;
    /// let frames = slots.with_permit(|id, token| {
    ///     println!("rendering under permit {id}, token {token}");
    ///     24
    /// })?;
    /// assert_eq!(frames, 24);
    /// # Ok(()) }
    /// ```
    pub fn with_permit<T>(&self, work: impl FnOnce(String, u64) -> T) -> Result<T> {
        let permit = self.blocker.call(self.semaphore.acquire())?;
        let (id, token) = id_and_token(&permit);
        Ok(work_under(&self.blocker, permit, || work(id, token)))
    }

    /// Waits at most `wait` for a permit (watchdog lease), runs `work` with its id and fencing
    /// token, and gives it back: [`with_permit`](Self::with_permit) with a bounded wait, which
    /// bounds the acquisition only (`work` runs to its end once started). `Ok(None)` when no
    /// permit was had within `wait`: `work` did not run. `Duration::ZERO` makes one attempt.
    ///
    /// # Errors
    ///
    /// As [`try_acquire_for`](Self::try_acquire_for) for the acquire (`work` did not run).
    /// Never an error of the release.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(slots: ferrisson::blocking::RPermitExpirableSemaphore) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// if slots.try_with_permit_for(Duration::from_millis(250), |_, _| 24)?.is_none() {
    ///     println!("every slot is busy");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn try_with_permit_for<T>(
        &self,
        wait: Duration,
        work: impl FnOnce(String, u64) -> T,
    ) -> Result<Option<T>> {
        let Some(permit) = self
            .blocker
            .call(self.semaphore.try_acquire_for(1, wait, None))?
        else {
            return Ok(None);
        };
        let (id, token) = id_and_token(&permit);
        Ok(Some(work_under(&self.blocker, permit, || work(id, token))))
    }
}
