//! Nesting, the public side of [`scope`](crate::lock::scope): `with_lock` (a hold that cannot
//! outlive its work, whose work runs inside the hold's scope and whose finished work is never
//! reported as failed), and
//! a guard's [`reenter`](LockGuard::reenter), [`scope`](LockGuard::scope) and
//! [`hold_count`](LockGuard::hold_count).

use std::future::Future;
use std::panic::Location;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::lock::guard::LockGuard;
use crate::lock::holder::LeaseMode;
use crate::lock::rlock::RLock;
use crate::lock::scope::{Entry, Nesting, Scoped};

impl RLock {
    /// Takes the lock (as [`lock`](Self::lock) does), runs `work` with the hold's fencing
    /// token, and gives the lock back. If the hold is lost while `work` runs
    /// ([`LockGuard::lost`](crate::LockGuard::lost)), `work` is dropped at once (it stops at its
    /// next `.await`) and the answer is [`Error::LockLost`]: nothing it would still do could be
    /// trusted to be alone.
    ///
    /// The answer tells the two outcomes apart: `Ok(output)` means `work` ran to its end;
    /// `Err` means it never ran (the acquire failed) or was stopped ([`Error::LockLost`]). Once
    /// `work` has finished, its output is the answer even when the release then fails (Redis
    /// paused or restarting, the lease run out at the end): what `work` did is done, and an
    /// error would invite a retry of it. Such a failed release is logged (a WARN naming the
    /// lock and the error), counted (`ferrisson_releases_total` with outcome `error` or `lost`),
    /// and set right as far as it can be: the hold is removed in the background, or runs out
    /// with its lease.
    ///
    /// `work` runs inside the hold's scope: an acquisition of this lock that `work` makes
    /// (through any handle of the client and name; a read inside a write hold's work) is one
    /// more hold of this one, with its token and no wait. Futures polled beside `work` in the
    /// same task (`join!`, `select!`) and tasks it spawns are outside the scope: they wait like
    /// any other acquisition.
    ///
    /// It reads better than the guard by hand where the work is one block: the release cannot
    /// be forgotten, and a lost lease stops the work without a `select!`. Take the guard by hand
    /// to hand it to other tasks, to decide what to do on a loss yourself, or to act on the
    /// release's own result. [`try_with_lock_for`](Self::try_with_lock_for) bounds the wait
    /// for the lock (never the work).
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock) for the acquire (`work` did not run); [`Error::LockLost`] when
    /// the hold was lost while `work` ran (`work` was stopped, its output is gone). Never an
    /// error of the release.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped, it drops `work` and the guard, whose release runs in the
    /// background.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// let lock = client.get_lock("invoice:7");
    /// let total = lock
    ///     .with_lock(|token| async move {
    ///         // every write carries `token`, so a late holder's writes are refused
    ///         let _ = token;
    ///         42
    ///     })
    ///     .await?;
    /// assert_eq!(total, 42);
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn with_lock<T, F, Fut>(&self, work: F) -> impl Future<Output = Result<T>>
    where
        F: FnOnce(u64) -> Fut,
        Fut: Future<Output = T>,
    {
        let at = Location::caller();
        async move {
            let guard = self.lock_at(at).await?;
            let token = guard.fencing_token();
            // The work runs inside the hold's scope: what it acquires of this lock nests in it.
            crate::lock::bounded::run_held(guard, work(token)).await
        }
    }
}

/// The WARN of a release that failed after `with_lock`'s work ran to its end (the async and the
/// blocking one): the output is still the answer, so this line is where the failure shows.
pub(crate) fn released_late(name: &str, error: &Error) {
    tracing::warn!(
        lock = %name,
        error = %error,
        "the work under the lock ran to its end, but its release failed; the work's output is \
         returned all the same, and the hold is removed in the background or runs out with its lease"
    );
}

impl LockGuard {
    /// One more hold of this guard's acquisition: Redisson's reentrant `lock()`, made explicit.
    /// Granted at once, with this hold's fencing token, and the lock stays held until every hold
    /// is given back, in any order. The new guard's lease is kept as this one's is (renewed by
    /// the watchdog, or the same fixed lease, which the grant starts anew).
    ///
    /// For code that passes guards rather than closures: the nested call of the same lock
    /// takes its hold from the guard it is given instead of calling `lock()`, which would wait
    /// for this hold like any other acquisition.
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`](crate::Error::LockLost) when this hold is gone (at once when the
    /// guard already knows it), [`Error::Redis`](crate::Error::Redis) when Redis fails;
    /// [`Error::Closed`](crate::Error::Closed) after the client was closed;
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an
    /// [`RMutex`](crate::RMutex)'s guard, which is never reentrant.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a hold granted after the future was dropped is given back in the
    /// background.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// async fn audit(guard: &ferrisson::LockGuard) -> ferrisson::Result<()> {
    ///     let nested = guard.reenter().await?; // one more hold, same token
    ///     assert_eq!(nested.fencing_token(), guard.fencing_token());
    ///     nested.unlock().await
    /// }
    /// let guard = client.get_lock("ledger").lock().await?;
    /// audit(&guard).await?;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn reenter(&self) -> Result<LockGuard> {
        let lost = || crate::Error::LockLost {
            name: self.name().to_owned(),
        };
        if self.is_lost() {
            return Err(lost());
        }
        if !self.holder.handle.reentrant() {
            return Err(crate::Error::InvalidArgument(format!(
                "`{}` is an RMutex, which is never reentrant",
                self.name()
            )));
        }
        let mode = match self.renewed {
            true => LeaseMode::Watchdog,
            false => LeaseMode::Fixed(self.lease.lease_ms()),
        };
        let hold = Some(self.nesting());
        let handle = &self.holder.handle;
        match handle.acquire_for(hold, mode, Some(Duration::ZERO)).await? {
            Some(guard) if Arc::ptr_eq(&guard.lease, &self.lease) => Ok(guard),
            // Never expected: the script grants a nested acquisition only as one more hold of
            // the hold it nests in (else it answers lost). Given back, all the same.
            Some(other) => {
                other.unlock().await.ok();
                Err(lost())
            }
            None => Err(lost()),
        }
    }

    /// Runs `work` inside this hold's scope: an acquisition of the same lock (same client and
    /// name, through any handle; a read inside a write hold's scope) made by `work`, and by
    /// nothing polled beside it, is one more hold of this one, as inside
    /// [`RLock::with_lock`](crate::RLock::with_lock). Tasks spawned by `work` are outside the
    /// scope (task-locals do not cross `spawn`). The guard may be moved or given back while
    /// `work` runs: what `work` then acquires finds the hold gone
    /// ([`Error::LockLost`](crate::Error::LockLost), checked on the server).
    ///
    /// The scope takes effect where and while the returned future runs, inside the scopes of
    /// whatever polls it: `tokio::spawn(guard.scope(work))` runs inside this hold only (not in
    /// the scopes of the code that built it), and `a.scope(b.scope(work))` is inside both.
    ///
    /// # Cancel safety
    ///
    /// As cancel safe as `work`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// let lock = client.get_lock("ledger");
    /// let guard = lock.lock().await?;
    /// guard
    ///     .scope(async {
    ///         // nested: one more hold of `guard`'s acquisition, granted at once
    ///         let again = lock.lock().await?;
    ///         again.unlock().await
    ///     })
    ///     .await?;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn scope<F: Future>(&self, work: F) -> impl Future<Output = F::Output> + use<F> {
        Scoped::new(vec![self.entry()], work)
    }

    /// This hold's place in a scope.
    pub(crate) fn entry(&self) -> Entry {
        let handle = &self.holder.handle;
        // Nothing nests in an RMutex's hold.
        let hold = handle.reentrant().then(|| self.nesting());
        Entry::new(handle.scope_key(), hold)
    }

    /// This hold, as an acquisition nested in it sees it.
    fn nesting(&self) -> Nesting {
        Nesting {
            owner: self.holder.owner.clone(),
            side: self.holder.ops().side(),
            lease: self.lease.clone(),
        }
    }

    /// How many holds this guard's acquisition has on the lock (this one and those nested in
    /// it), as Redis counts them: 0 once the hold is gone. For the read side of a read-write
    /// lock, its read holds; for the write side, its write holds.
    ///
    /// # Errors
    ///
    /// [`Error::WrongType`](crate::Error::WrongType), [`Error::Redis`](crate::Error::Redis).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (read only).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::RLock) -> ferrisson::Result<()> {
    /// let guard = lock.lock().await?;
    /// let nested = guard.reenter().await?;
    /// assert_eq!(guard.hold_count().await?, 2);
    /// nested.unlock().await?;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn hold_count(&self) -> Result<u32> {
        Ok(self
            .holder
            .handle
            .inspect_for(Some(&self.holder.owner))
            .await?
            .holds)
    }
}
