//! Work under an [`RMutex`]: `with_lock` and `try_with_lock_for`, as the lock's.

use std::future::Future;
use std::time::Duration;

use crate::error::Result;
use crate::sync::RMutex;

impl RMutex {
    /// Takes the mutex (as [`lock`](Self::lock) does), runs `work` with the hold's fencing
    /// token, and gives the mutex back: [`RLock::with_lock`](crate::RLock::with_lock)'s
    /// contract. If the hold is lost while `work` runs, `work` is dropped at once (it stops at
    /// its next `.await`) and the answer is [`Error::LockLost`](crate::Error::LockLost); once
    /// `work` has finished, its output is the answer even when the release then fails (logged
    /// as a WARN naming the mutex, and counted).
    ///
    /// Nothing nests in a mutex's hold: a `lock()` of this mutex inside `work` waits like any
    /// other, which here is for ever (or until it is cancelled). Holds of other locks whose
    /// scope the caller runs in stay in scope inside `work`.
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock) for the acquire (`work` did not run);
    /// [`Error::LockLost`](crate::Error::LockLost) when the hold was lost while `work` ran
    /// (`work` was stopped). Never an error of the release.
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
    /// let migration = client.get_mutex("migration");
    /// let applied = migration.with_lock(|_token| async { 3 }).await?;
    /// assert_eq!(applied, 3);
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn with_lock<T, F, Fut>(&self, work: F) -> impl Future<Output = Result<T>>
    where
        F: FnOnce(u64) -> Fut,
        Fut: Future<Output = T>,
    {
        self.lock.with_lock(work)
    }

    /// Waits at most `wait` for the mutex (as [`try_lock_for`](Self::try_lock_for) with the
    /// watchdog's lease), runs `work` with the hold's fencing token, and gives the mutex back:
    /// [`with_lock`](Self::with_lock) with a bounded wait. `Ok(None)` when the mutex was not had
    /// within `wait`: `work` did not run.
    ///
    /// `wait` bounds the acquisition only: once the mutex is held, `work` runs to its end
    /// however long it takes. Everything else is [`with_lock`](Self::with_lock)'s.
    /// `Duration::ZERO` makes one attempt.
    ///
    /// # Errors
    ///
    /// As [`try_lock_for`](Self::try_lock_for) for the acquire (`work` did not run);
    /// [`Error::LockLost`](crate::Error::LockLost) when the hold was lost while `work` ran.
    /// Never an error of the release.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`with_lock`](Self::with_lock).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// let migration = client.get_mutex("migration");
    /// let ran = migration
    ///     .try_with_lock_for(Duration::from_secs(1), |_token| async { "migrated" })
    ///     .await?;
    /// if ran.is_none() {
    ///     println!("another migration is running");
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
        self.lock.try_with_lock_for(wait, work)
    }
}
