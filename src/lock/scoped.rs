//! `with_lock`: a hold that cannot outlive its work nor hide its release's error.

use std::future::Future;

use crate::error::{Error, Result};
use crate::lock::rlock::RLock;

impl RLock {
    /// Takes the lock (as [`lock`](Self::lock) does), runs `work` with the hold's fencing
    /// token, and gives the lock back, reporting the release's error. If the hold is lost while
    /// `work` runs ([`LockGuard::lost`](crate::LockGuard::lost)), `work` is dropped at once (it
    /// stops at its next `.await`) and the answer is [`Error::LockLost`]: nothing it would
    /// still do could be trusted to be alone.
    ///
    /// `work` runs inside the hold's scope: an acquisition of this lock that `work` makes
    /// (through any handle of the client and name; a read inside a write hold's work) is one
    /// more hold of this one, with its token and no wait. Futures polled beside `work` in the
    /// same task (`join!`, `select!`) and tasks it spawns are outside the scope: they wait like
    /// any other acquisition.
    ///
    /// It reads better than the guard by hand where the work is one block: the release cannot
    /// be forgotten, a lost lease stops the work without a `select!`, and an error of the
    /// release (the lease ran out at the end, Redis gone) is the answer instead of a dropped
    /// `Result`. Take the guard by hand to hand it to other tasks, or to decide what to do on a
    /// loss yourself.
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock) for the acquire; [`Error::LockLost`] when the hold was lost
    /// during `work` or found gone by the release; the release's other errors as
    /// [`LockGuard::unlock`](crate::LockGuard::unlock). `work`'s output is given up then.
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
    pub async fn with_lock<T, F, Fut>(&self, work: F) -> Result<T>
    where
        F: FnOnce(u64) -> Fut,
        Fut: Future<Output = T>,
    {
        let guard = self.lock().await?;
        // The work runs inside the hold's scope: what it acquires of this lock nests in it.
        let work = guard.enter().run(work(guard.fencing_token()));
        let done = tokio::select! {
            biased;
            out = work => Some(out),
            () = guard.lost() => None,
        };
        let released = guard.unlock().await;
        match (done, released) {
            (Some(out), Ok(())) => Ok(out),
            (None, _) => Err(Error::LockLost {
                name: self.name().to_owned(),
            }),
            (Some(_), Err(e)) => Err(e),
        }
    }
}
