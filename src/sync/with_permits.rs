//! Work under permits: [`RSemaphore::with_permits`] and
//! [`RPermitExpirableSemaphore::with_permit`], each with a bounded twin, on the core every
//! object shares ([`run_held`]) where the permits have a guard.

use std::future::Future;
use std::time::Duration;

use tokio::sync::oneshot;

use crate::error::{Error, Result};
use crate::lock::bounded::{Held, run_held};
use crate::sync::{PermitGuard, RPermitExpirableSemaphore, RSemaphore};

/// The WARN of permits whose release failed after the work under them ran to its end: the
/// output is still the answer, so this line is where the failure shows.
fn released_late(name: &str, error: &dyn std::fmt::Display) {
    tracing::warn!(
        semaphore = %name,
        error = %error,
        "the work under the permits ran to its end, but their release failed; the work's output \
         is returned all the same"
    );
}

impl Held for PermitGuard {
    fn name(&self) -> String {
        PermitGuard::name(self).to_owned()
    }

    fn is_lost(&self) -> bool {
        PermitGuard::is_lost(self)
    }

    fn lost(&self) -> impl Future<Output = ()> + Send + '_ {
        PermitGuard::lost(self)
    }

    fn release(self) -> impl Future<Output = Result<()>> + Send {
        PermitGuard::release(self)
    }

    async fn give_up(self) -> Error {
        let (name, held) = (PermitGuard::name(&self).to_owned(), self.ids().len());
        match self.release().await {
            // The release counted what was gone.
            Err(lost @ Error::PermitLost { .. }) => lost,
            // The guard's one lease covers every permit: all of them count as lost.
            _ => Error::PermitLost {
                name,
                lost: held,
                held,
            },
        }
    }

    fn released_late(name: &str, error: &Error) {
        released_late(name, error);
    }

    fn lost_meanwhile(name: &str) {
        tracing::warn!(
            semaphore = %name,
            "the permits were lost while the work under them ran; the work ran to its end and \
             its output is returned, but it may have run beside more holders than the permits allow"
        );
    }
}

/// Permits of an [`RSemaphore`] taken for work: given back exactly once, when the work is done
/// ([`give_back`](Self::give_back)), or in the background when this is dropped first (the work
/// cancelled, or panicking).
#[derive(Debug)]
pub(crate) struct Taken {
    semaphore: Option<RSemaphore>,
    n: u64,
}

impl Taken {
    /// `n` permits of `semaphore`, taken.
    pub(crate) fn new(semaphore: &RSemaphore, n: u64) -> Self {
        Taken {
            semaphore: Some(semaphore.clone()),
            n,
        }
    }

    /// Gives the permits back and waits for the answer; a failure is logged, never returned.
    ///
    /// The release runs on the client's thread: a caller that stops waiting neither cuts it
    /// short nor has it sent twice (a semaphore's release is not idempotent).
    pub(crate) async fn give_back(mut self) {
        let Some(semaphore) = self.semaphore.take() else {
            return;
        };
        let name = semaphore.name().to_owned();
        let (answer, answered) = oneshot::channel();
        release(semaphore, self.n, Some(answer));
        match answered.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => released_late(&name, &e),
            Err(_) => released_late(&name, &"the client's thread is gone"),
        }
    }
}

impl Drop for Taken {
    fn drop(&mut self) {
        if let Some(semaphore) = self.semaphore.take() {
            release(semaphore, self.n, None);
        }
    }
}

/// Gives back `n` permits of `semaphore` from the client's thread; the result goes to `answer`,
/// or is logged when nobody waits for it.
fn release(semaphore: RSemaphore, n: u64, answer: Option<oneshot::Sender<Result<()>>>) {
    let core = semaphore.inner();
    core.spawn({
        let semaphore = semaphore.clone();
        async move {
            let released = semaphore.release(n).await;
            let unheard = match answer {
                Some(answer) => answer.send(released).err(),
                None => Some(released),
            };
            if let Some(Err(e)) = unheard {
                tracing::warn!(semaphore = %semaphore.name(), permits = n, error = %e, "permits taken for work could not be given back; they stay taken until somebody releases them");
            }
        }
    });
}

impl RSemaphore {
    /// Waits until `n` permits are free and takes them (as [`acquire`](Self::acquire) does),
    /// runs `work`, and gives the `n` permits back: the semaphore's
    /// [`RLock::with_lock`](crate::RLock::with_lock), where the permits cannot be forgotten.
    ///
    /// The permits are not owned and cannot be lost (nothing renews or expires them), so once
    /// started `work` always runs to its end: `Ok(output)` means it did, `Err` that it never
    /// ran (the acquire failed). The release runs once `work` has finished; should it fail
    /// (Redis down or not answering), the output is still the answer and a WARN naming the
    /// semaphore says the permits may not have come back (an unanswered release may or may
    /// not have been applied, and is not resent, so none is given back twice).
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire): `work` did not run. Never an error of the release.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped while it waits, it leaves no permit taken; dropped while `work`
    /// runs (or while the permits are given back), it drops `work` and the permits are given
    /// back in the background, once.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// let api = client.get_semaphore("partner-api");
    /// api.try_set_permits(4).await?; // at most 4 calls at once, fleet-wide
    /// let status = api.with_permits(1, || async { /* call the partner API */ 200 }).await?;
    /// assert_eq!(status, 200);
    /// # Ok(()) }
    /// ```
    pub async fn with_permits<T, F, Fut>(&self, n: u64, work: F) -> Result<T>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = T>,
    {
        self.acquire(n).await?;
        let taken = Taken::new(self, n);
        let out = work().await;
        taken.give_back().await;
        Ok(out)
    }

    /// Waits at most `wait` until `n` permits are free and takes them (as
    /// [`try_acquire_for`](Self::try_acquire_for) does), runs `work`, and gives them back:
    /// [`with_permits`](Self::with_permits) with a bounded wait. `Ok(None)` when the permits
    /// were not had within `wait`: `work` did not run.
    ///
    /// `wait` bounds the acquisition only: once the permits are taken, `work` runs to its end
    /// however long it takes. Everything else is [`with_permits`](Self::with_permits)'s.
    /// `Duration::ZERO` makes one attempt.
    ///
    /// # Errors
    ///
    /// As [`try_acquire_for`](Self::try_acquire_for): `work` did not run. Never an error of
    /// the release.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`with_permits`](Self::with_permits).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(api: ferrisson::RSemaphore) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// match api.try_with_permits_for(1, Duration::from_millis(100), || async { 200 }).await? {
    ///     Some(status) => println!("called: {status}"),
    ///     None => println!("the partner API is at its limit: shed the request"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_with_permits_for<T, F, Fut>(
        &self,
        n: u64,
        wait: Duration,
        work: F,
    ) -> Result<Option<T>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = T>,
    {
        if !self.try_acquire_for(n, wait).await? {
            return Ok(None);
        }
        let taken = Taken::new(self, n);
        let out = work().await;
        taken.give_back().await;
        Ok(Some(out))
    }
}

/// The id and fencing token `with_permit`'s work is given.
pub(crate) fn id_and_token(permit: &PermitGuard) -> (String, u64) {
    let id = permit.ids().first().cloned().unwrap_or_default();
    (id, permit.fencing_token())
}

impl RPermitExpirableSemaphore {
    /// Waits until a permit is free and takes it (as [`acquire`](Self::acquire) does: renewed by
    /// the watchdog), runs `work` with the permit's id and fencing token, and gives the permit
    /// back: the semaphore's [`RLock::with_lock`](crate::RLock::with_lock).
    ///
    /// If the permit is lost while `work` runs ([`PermitGuard::lost`]: it expired, or was
    /// released elsewhere), `work` is dropped at once (it stops at its next `.await`) and the
    /// answer is [`Error::PermitLost`]. Once `work` has finished, its output is the answer even
    /// when the release then fails (a WARN naming the semaphore, and the release metrics): the
    /// lease gives the permit back then.
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire) for the acquire (`work` did not run);
    /// [`Error::PermitLost`] when the permit was lost while `work` ran (`work` was stopped, its
    /// output is gone). Never an error of the release.
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
    /// let slots = client.get_permit_expirable_semaphore("render-slots");
    /// slots.try_set_permits(4).await?;
    /// let frames = slots
    ///     .with_permit(|id, token| async move {
    ///         println!("rendering under permit {id}, token {token}");
    ///         24
    ///     })
    ///     .await?;
    /// assert_eq!(frames, 24);
    /// # Ok(()) }
    /// ```
    pub async fn with_permit<T, F, Fut>(&self, work: F) -> Result<T>
    where
        F: FnOnce(String, u64) -> Fut,
        Fut: Future<Output = T>,
    {
        let permit = self.acquire().await?;
        let (id, token) = id_and_token(&permit);
        run_held(permit, work(id, token)).await
    }

    /// Waits at most `wait` for a permit (as [`try_acquire_for`](Self::try_acquire_for) with
    /// one permit and the watchdog's lease), runs `work` with its id and fencing token, and
    /// gives it back: [`with_permit`](Self::with_permit) with a bounded wait. `Ok(None)` when
    /// no permit was had within `wait`: `work` did not run.
    ///
    /// `wait` bounds the acquisition only: once the permit is taken, `work` runs to its end
    /// however long it takes (the watchdog renews the permit meanwhile). Everything else is
    /// [`with_permit`](Self::with_permit)'s. `Duration::ZERO` makes one attempt.
    ///
    /// # Errors
    ///
    /// As [`try_acquire_for`](Self::try_acquire_for) for the acquire (`work` did not run);
    /// [`Error::PermitLost`] when the permit was lost while `work` ran. Never an error of the
    /// release.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`with_permit`](Self::with_permit).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(slots: ferrisson::RPermitExpirableSemaphore) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// let rendered = slots
    ///     .try_with_permit_for(Duration::from_millis(250), |_id, _token| async { 24 })
    ///     .await?;
    /// if rendered.is_none() {
    ///     println!("every slot is busy");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_with_permit_for<T, F, Fut>(&self, wait: Duration, work: F) -> Result<Option<T>>
    where
        F: FnOnce(String, u64) -> Fut,
        Fut: Future<Output = T>,
    {
        let Some(permit) = self.try_acquire_for(1, wait, None).await? else {
            return Ok(None);
        };
        let (id, token) = id_and_token(&permit);
        run_held(permit, work(id, token)).await.map(Some)
    }
}
