//! Work under a hold, for every object: the one core of `with_lock` and its bounded twin
//! `try_with_lock_for` (the wait bounds the acquisition only, never the work), and
//! [`RLock::try_with_lock_for`].
//!
//! [`Held`] is what each kind of hold (a lock's guard, a MultiLock's or RedLock's, permits)
//! gives the core: where its work runs (the hold's scope), how it is lost, how it is given back
//! and what a loss answers. [`run_held`] runs async work under it; the blocking API runs its
//! closures with [`Held::work_scope`] and settles the hold as the blocking `with_lock` does.

use std::future::Future;
use std::panic::Location;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::lock::guard::LockGuard;
use crate::lock::rlock::RLock;
use crate::lock::scope::{Entry, Scoped, run_here};
use crate::lock::scoped::released_late;

/// A hold that work runs under: taken before the work, given back after it.
pub(crate) trait Held: Sized + Send {
    /// What logs and errors name: the lock's (or the semaphore's) name.
    fn name(&self) -> String;

    /// Whether the hold is known lost.
    fn is_lost(&self) -> bool;

    /// Resolves when the hold is lost; pends for ever while it stands.
    fn lost(&self) -> impl Future<Output = ()> + Send + '_;

    /// Gives the hold back.
    fn release(self) -> impl Future<Output = Result<()>> + Send;

    /// Gives back a hold lost while the work ran (tidying up only), and says what the answer
    /// is.
    fn give_up(self) -> impl Future<Output = Error> + Send;

    /// The holds the work runs inside of (the last innermost), inside the scope of whatever
    /// runs it: an acquisition the work makes of a lock this hold holds is one more hold of it.
    /// Empty: the caller's own scope.
    fn work_scope(&self) -> Vec<Entry> {
        Vec::new()
    }

    /// Logs a release that failed after the work ran to its end.
    fn released_late(name: &str, error: &Error) {
        released_late(name, error);
    }

    /// Logs (the blocking API) a hold lost while its work, which cannot be stopped, ran on.
    fn lost_meanwhile(name: &str) {
        tracing::warn!(
            lock = %name,
            "the hold was lost while the work under the lock ran; the work ran to its end and \
             its output is returned, but it may have run beside another holder"
        );
    }
}

/// Runs `work` under `held`, inside its scope, and gives the hold back: `Ok(output)` once
/// `work` ran to its end, even when the release then fails (logged, never the answer); when the
/// hold is lost first, `work` is dropped at once and the answer is [`Held::give_up`]'s.
pub(crate) async fn run_held<H: Held, W: Future>(held: H, work: W) -> Result<W::Output> {
    let work = Scoped::new(held.work_scope(), work);
    let done = tokio::select! {
        biased;
        out = work => Some(out),
        () = held.lost() => None,
    };
    // `work` is dropped here, before anything is given back.
    let Some(out) = done else {
        return Err(held.give_up().await);
    };
    let name = held.name();
    if let Err(e) = held.release().await {
        H::released_late(&name, &e);
    }
    Ok(out)
}

/// Runs synchronous `work` under `held` on the calling thread, inside its scope, and gives the
/// hold back with `release` (which blocks): the work always runs to its end, and its output is
/// the answer whatever the release says (a failure is logged: a loss meanwhile, or a late
/// release).
pub(crate) fn run_held_here<H: Held, T>(
    held: H,
    work: impl FnOnce() -> T,
    release: impl FnOnce(H) -> Result<()>,
) -> T {
    let out = run_here(held.work_scope(), work);
    let (name, lost) = (held.name(), held.is_lost());
    match release(held) {
        Err(_) if lost => H::lost_meanwhile(&name),
        Err(e) => H::released_late(&name, &e),
        Ok(()) => {}
    }
    out
}

impl Held for LockGuard {
    fn name(&self) -> String {
        LockGuard::name(self).to_owned()
    }

    fn is_lost(&self) -> bool {
        LockGuard::is_lost(self)
    }

    fn lost(&self) -> impl Future<Output = ()> + Send + '_ {
        LockGuard::lost(self)
    }

    fn release(self) -> impl Future<Output = Result<()>> + Send {
        self.unlock()
    }

    async fn give_up(self) -> Error {
        let name = LockGuard::name(&self).to_owned();
        // The release only tidies up (the hold is gone); the loss is the answer.
        let _ = self.unlock().await;
        Error::LockLost { name }
    }

    fn work_scope(&self) -> Vec<Entry> {
        vec![self.entry()]
    }
}

/// The scope of a hold made of several guards: inside each of them, in order.
pub(crate) fn scope_of_parts(parts: &[LockGuard]) -> Vec<Entry> {
    parts.iter().map(LockGuard::entry).collect()
}

impl RLock {
    /// Waits at most `wait` for the lock (as [`try_lock_for`](Self::try_lock_for) with the
    /// watchdog's lease), runs `work` with the hold's fencing token, and gives the lock back:
    /// [`with_lock`](Self::with_lock) with a bounded wait. `Ok(None)` when the lock was not had
    /// within `wait`: `work` did not run.
    ///
    /// `wait` bounds the acquisition only: once the lock is held, `work` runs to its end
    /// however long it takes (the watchdog renews the lease meanwhile), where wrapping
    /// `with_lock` in `tokio::time::timeout` would cut it off. Everything else is
    /// [`with_lock`](Self::with_lock)'s: `work` runs inside the hold's scope, is stopped when
    /// the hold is lost ([`Error::LockLost`]), and once it has finished its output is the
    /// answer even when the release fails (logged as a WARN naming the lock, and counted).
    /// `Duration::ZERO` makes one attempt. The fair lock, both sides of a read-write lock and
    /// [`RFencedLock`](crate::RFencedLock) (through `Deref`) have it too.
    ///
    /// # Errors
    ///
    /// As [`try_lock_for`](Self::try_lock_for) for the acquire (`work` did not run);
    /// [`Error::LockLost`] when the hold was lost while `work` ran (`work` was stopped, its
    /// output is gone). Never an error of the release.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped, it drops `work` and the guard, whose release runs in the
    /// background; dropped while it waits, it leaves no hold behind.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    ///
    /// let lock = client.get_lock("nightly-report");
    /// // At most 200 ms for the lock; the report itself takes what it takes.
    /// match lock
    ///     .try_with_lock_for(Duration::from_millis(200), |token| async move {
    ///         let _ = token; // every write carries it
    ///         "sent"
    ///     })
    ///     .await?
    /// {
    ///     Some(outcome) => println!("report {outcome}"),
    ///     None => println!("somebody else is on it"),
    /// }
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn try_with_lock_for<T, F, Fut>(
        &self,
        wait: Duration,
        work: F,
    ) -> impl Future<Output = Result<Option<T>>>
    where
        F: FnOnce(u64) -> Fut,
        Fut: Future<Output = T>,
    {
        let at = Location::caller();
        async move {
            let Some(guard) = self.try_lock_for_at(wait, None, at).await? else {
                return Ok(None);
            };
            let token = guard.fencing_token();
            run_held(guard, work(token)).await.map(Some)
        }
    }
}
