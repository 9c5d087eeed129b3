//! Work under a combinator's hold: `with_lock` and `try_with_lock_for` of [`MultiLock`] and
//! [`RedLock`], on the core every object shares ([`run_held`]).

use std::future::Future;
use std::panic::Location;
use std::time::Duration;

use crate::combinator::{MultiGuard, MultiLock, RedLock, RedLockGuard};
use crate::error::{Error, Result};
use crate::lock::LockGuard;
use crate::lock::bounded::{Held, run_held, scope_of_parts};
use crate::lock::scope::Entry;

/// The parts' names, each once, in order: what logs and errors name a combinator's hold by.
fn names(parts: &[LockGuard]) -> String {
    let mut names: Vec<&str> = Vec::with_capacity(parts.len());
    for part in parts {
        if !names.contains(&part.name()) {
            names.push(part.name());
        }
    }
    names.join(", ")
}

/// The answer of a combinator's hold lost while its work ran: the first lost part's lock.
fn lost(parts: &[LockGuard]) -> Error {
    let part = parts.iter().find(|p| p.is_lost()).or(parts.first());
    Error::LockLost {
        name: part.map(|p| p.name().to_owned()).unwrap_or_default(),
    }
}

impl Held for MultiGuard {
    fn name(&self) -> String {
        names(self.parts())
    }

    fn is_lost(&self) -> bool {
        MultiGuard::is_lost(self)
    }

    fn lost(&self) -> impl Future<Output = ()> + Send + '_ {
        MultiGuard::lost(self)
    }

    fn release(self) -> impl Future<Output = Result<()>> + Send {
        self.unlock()
    }

    async fn give_up(self) -> Error {
        let answer = lost(self.parts());
        // The release only tidies up; the loss is the answer.
        let _ = self.unlock().await;
        answer
    }

    fn work_scope(&self) -> Vec<Entry> {
        scope_of_parts(self.parts())
    }
}

impl Held for RedLockGuard {
    fn name(&self) -> String {
        names(&self.parts)
    }

    fn is_lost(&self) -> bool {
        RedLockGuard::is_lost(self)
    }

    fn lost(&self) -> impl Future<Output = ()> + Send + '_ {
        RedLockGuard::lost(self)
    }

    fn release(self) -> impl Future<Output = Result<()>> + Send {
        self.unlock()
    }

    async fn give_up(self) -> Error {
        let answer = lost(&self.parts);
        let _ = self.unlock().await;
        answer
    }

    fn work_scope(&self) -> Vec<Entry> {
        scope_of_parts(&self.parts)
    }
}

impl MultiGuard {
    /// Each part's fencing token, in the order of [`parts`](Self::parts).
    fn tokens(&self) -> Vec<u64> {
        self.parts().iter().map(LockGuard::fencing_token).collect()
    }
}

impl MultiLock {
    /// Takes every part (as [`lock`](Self::lock) does), runs `work` with the parts' fencing
    /// tokens (in the order of [`MultiGuard::parts`]), and gives every part back. The
    /// MultiLock's [`RLock::with_lock`](crate::RLock::with_lock).
    ///
    /// `work` runs inside every part's scope: an acquisition of one of the parts' locks that
    /// `work` makes (through any handle of the client and name, a MultiLock over some of them
    /// included) is one more hold of that part, with its token and no wait. If any part is lost
    /// while `work` runs, `work` is dropped at once (it stops at its next `.await`) and the
    /// answer is [`Error::LockLost`] naming that part's lock. Once `work` has finished, its
    /// output is the answer even when releasing a part then fails (a WARN naming the locks,
    /// and the parts' release metrics).
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock) for the acquire (`work` did not run); [`Error::LockLost`] when
    /// a part was lost while `work` ran (`work` was stopped, its output is gone). Never an
    /// error of the release.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped, it drops `work` and the guard, whose parts are released in the
    /// background.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// use ferrisson::MultiLock;
    ///
    /// let transfer = MultiLock::new([client.get_lock("account:1"), client.get_lock("account:2")]);
    /// let moved = transfer
    ///     .with_lock(|tokens| async move {
    ///         // one token per part, for the writes to each account
    ///         tokens.len()
    ///     })
    ///     .await?;
    /// assert_eq!(moved, 2);
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn with_lock<T, F, Fut>(&self, work: F) -> impl Future<Output = Result<T>>
    where
        F: FnOnce(Vec<u64>) -> Fut,
        Fut: Future<Output = T>,
    {
        let at = Location::caller();
        async move {
            let guard = self.lock_at(at).await?;
            let tokens = guard.tokens();
            run_held(guard, work(tokens)).await
        }
    }

    /// Waits at most `wait` for every part together (as [`try_lock_for`](Self::try_lock_for)
    /// with watchdog leases), runs `work` with the parts' fencing tokens, and gives every part
    /// back: [`with_lock`](Self::with_lock) with a bounded wait. `Ok(None)` when the parts were
    /// not all had within `wait`, with nothing held: `work` did not run.
    ///
    /// `wait` bounds the acquisition only: once every part is held, `work` runs to its end
    /// however long it takes (the watchdog renews the parts meanwhile). Everything else is
    /// [`with_lock`](Self::with_lock)'s. `Duration::ZERO` makes one attempt.
    ///
    /// # Errors
    ///
    /// As [`try_lock_for`](Self::try_lock_for) for the acquire (`work` did not run);
    /// [`Error::LockLost`] when a part was lost while `work` ran. Never an error of the
    /// release.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`with_lock`](Self::with_lock).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(transfer: ferrisson::MultiLock) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// let done = transfer
    ///     .try_with_lock_for(Duration::from_millis(500), |_tokens| async { "moved" })
    ///     .await?;
    /// if done.is_none() {
    ///     println!("an account is busy: try later");
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
        F: FnOnce(Vec<u64>) -> Fut,
        Fut: Future<Output = T>,
    {
        let at = Location::caller();
        async move {
            let Some(guard) = self.acquire(Some(wait), None, at).await? else {
                return Ok(None);
            };
            let tokens = guard.tokens();
            run_held(guard, work(tokens)).await.map(Some)
        }
    }
}

impl RedLock {
    /// Waits until a majority grants (as [`lock`](Self::lock) does), runs `work` with the
    /// granted instances' fencing tokens (as [`RedLockGuard::fencing_tokens`]: not comparable
    /// across instances), and releases every instance. The RedLock's
    /// [`RLock::with_lock`](crate::RLock::with_lock).
    ///
    /// When the guard counts itself lost while `work` runs (fewer than a majority hold, or the
    /// validity deadline passed: [`RedLockGuard::lost`]), `work` is dropped at once (it stops
    /// at its next `.await`) and the answer is [`Error::LockLost`]. Once `work` has finished,
    /// its output is the answer even when releasing an instance then fails (a down instance,
    /// say: a WARN naming the lock). `work` runs inside every granted part's scope: an
    /// acquisition of a granted part's lock that `work` makes (this RedLock's included) is one
    /// more hold of that part, with no wait.
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock) for the acquire (`work` did not run); [`Error::LockLost`] when
    /// the majority was lost while `work` ran (`work` was stopped). Never an error of the
    /// release.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped, it drops `work` and the guard, whose parts are released in the
    /// background.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(redlock: ferrisson::RedLock) -> ferrisson::Result<()> {
    /// let granted = redlock
    ///     .with_lock(|tokens| async move {
    ///         // tokens are per instance: send the one of the store you write to
    ///         tokens.len()
    ///     })
    ///     .await?;
    /// assert!(granted >= redlock.quorum());
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn with_lock<T, F, Fut>(&self, work: F) -> impl Future<Output = Result<T>>
    where
        F: FnOnce(Vec<u64>) -> Fut,
        Fut: Future<Output = T>,
    {
        let at = Location::caller();
        async move {
            let guard = self.lock_at(at).await?;
            let tokens = guard.fencing_tokens();
            run_held(guard, work(tokens)).await
        }
    }

    /// Attempts until a majority grants or `wait` is spent (as
    /// [`try_lock_for`](Self::try_lock_for) with watchdog leases), runs `work` with the granted
    /// instances' fencing tokens, and releases every instance: [`with_lock`](Self::with_lock)
    /// with a bounded wait. `Ok(None)` when no majority was had within `wait`: `work` did not
    /// run.
    ///
    /// `wait` bounds the acquisition only: once a majority is held, `work` runs to its end
    /// however long it takes. Everything else is [`with_lock`](Self::with_lock)'s.
    /// `Duration::ZERO` makes one attempt.
    ///
    /// # Errors
    ///
    /// As [`try_lock_for`](Self::try_lock_for) for the acquire (`work` did not run);
    /// [`Error::LockLost`] when the majority was lost while `work` ran. Never an error of the
    /// release.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`with_lock`](Self::with_lock).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(redlock: ferrisson::RedLock) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// match redlock.try_with_lock_for(Duration::from_secs(1), |_| async { "ran" }).await? {
    ///     Some(ran) => println!("{ran}"),
    ///     None => println!("no majority within 1 s"),
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
        F: FnOnce(Vec<u64>) -> Fut,
        Fut: Future<Output = T>,
    {
        let at = Location::caller();
        async move {
            let Some(guard) = self.acquire(Some(wait), None, at).await? else {
                return Ok(None);
            };
            let tokens = guard.fencing_tokens();
            run_held(guard, work(tokens)).await.map(Some)
        }
    }
}
