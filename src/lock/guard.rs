//! The guard: proof of one hold, and the only way to see release errors.

use std::sync::Arc;

use crate::error::Result;
use crate::lease::Lease;
use crate::pending::Work;
use tokio::sync::OwnedMutexGuard;

use crate::lock::handle::PartOf;
use crate::lock::holder::Holder;
use crate::lock::holds::Holds;

/// One hold of a lock. Returned by every acquire; `'static` and `Send`, so it can move into a
/// task or a thread.
///
/// A hold belongs to its acquisition, not to a task or thread: the guard carries it, and may be
/// moved, unlocked or dropped anywhere; it is renewed and reports [`lost`](Self::lost) wherever
/// it lives. Another acquisition of the same lock waits for it, in whatever task, thread or
/// future it is made, unless it is *nested*: made inside [`RLock::with_lock`](crate::RLock::with_lock)'s
/// work or a [`scope`](Self::scope) of this guard, or taken with [`reenter`](Self::reenter).
/// A nested acquisition is one more hold of this one (same owner, same fencing token, no wait).
///
/// Release it with [`unlock`](Self::unlock), which reports errors. Dropping it instead stops the
/// lease renewal at once and sends the release from a background task on the client's own thread,
/// wherever the guard is dropped: in any runtime, during a runtime's shutdown, or on a plain thread
/// (best effort, failures are logged with `tracing`; the lease TTL frees the lock if the release
/// cannot be sent). Only while the process tears down may that thread be gone: a warning then
/// names the lock, and its lease frees it. The owner's next acquire of the name runs after that
/// release, so it takes a new hold with a new token.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
/// let guard = client.get_lock("invoices").lock().await?;
/// let token = guard.fencing_token(); // send it along with every write the lock protects
/// # let _ = token;
/// tokio::select! {
///     _ = guard.lost() => eprintln!("lease lost: stop writing"),
///     _ = async { /* the work */ } => {}
/// }
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[must_use = "if unused the lock is released immediately"]
#[clippy::has_significant_drop]
#[derive(Debug)]
pub struct LockGuard {
    pub(super) holder: Holder,
    pub(super) lease: Arc<Lease>,
    /// The grant asked for watchdog renewal.
    pub(super) renewed: bool,
    armed: bool,
}

impl LockGuard {
    pub(crate) fn new(holder: Holder, lease: Arc<Lease>, renewed: bool) -> Self {
        LockGuard {
            holder,
            lease,
            renewed,
            armed: true,
        }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.holder.name()
    }

    /// Gives back this hold. The lock is free once every hold of its owner is given back.
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`](crate::Error::LockLost) when the hold was already gone (lease expired,
    /// key deleted or forced open), at once and without a round trip when the guard already
    /// knows it ([`is_lost`](Self::is_lost)); [`Error::Redis`](crate::Error::Redis) when Redis could not
    /// be reached, in which case the lease, no longer renewed, frees the lock when it runs out.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: renewal stops at the first poll, and if the future is dropped before the
    /// release completes, the release finishes in the background (it is idempotent, so a
    /// release already sent is not applied twice). The owner's next acquire waits for that
    /// release, so it is a new hold with a new token, not one more hold of this one.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::RLock) -> ferrisson::Result<()> {
    /// let guard = lock.lock().await?;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn unlock(mut self) -> Result<()> {
        self.armed = false;
        // Counted as under way before the hold leaves the live list: a signal's drain ends
        // the process only once the release is done.
        let _under_way = self
            .holder
            .inner()
            .pending
            .begin(Work::Release(self.holder.ops().name().clone()), false);
        self.holder.guard_gone(&self.lease, self.renewed);
        let mut release = PendingRelease {
            holder: self.holder.clone(),
            lease: self.lease.clone(),
            request_id: self.holder.inner().owners.next_request_id(),
            holds: self.holder.holds().clone().try_lock_owned().ok(),
            done: false,
        };
        let holds = match &mut release.holds {
            Some(holds) => holds,
            // Another operation of the owner is under way: the release goes after it.
            None => release
                .holds
                .insert(release.holder.holds().clone().lock_owned().await),
        };
        let result = release
            .holder
            .release(holds, &release.lease, &release.request_id, false)
            .await;
        release.done = true;
        result
    }

    /// The fencing token of this hold: strictly greater than that of every earlier grant of the
    /// same lock name, from any client. Reentrant holds share their first hold's token. Pass it
    /// to the resource so it can refuse writes from a holder whose lease ran out.
    pub fn fencing_token(&self) -> u64 {
        self.lease.token()
    }

    /// True once the lease is lost: a renewal found the lock no longer ours, or the lease ran
    /// out without a confirmed renewal. The holder must stop touching the resource. Once true,
    /// it stays true.
    pub fn is_lost(&self) -> bool {
        self.lease.is_lost()
    }

    /// True once this hold is known to be asked to let go (a revocation request, see
    /// [`RLock::request_revocation`](crate::RLock::request_revocation)): learnt by
    /// [`revocation_requested`](Self::revocation_requested) or by a watchdog renewal. Once true,
    /// it stays true. A request is never a forced release: the hold stays until the guard
    /// releases it.
    pub fn is_revocation_requested(&self) -> bool {
        self.lease.is_revoked()
    }

    /// Resolves when somebody asks this hold to let go (a revocation request for the owner's
    /// hold on this lock, or on this side of a read-write lock): by the request's message
    /// within milliseconds while this future listens; a request made while nobody listened is
    /// found when the future starts, or at the next watchdog renewal (within a third of the
    /// watchdog timeout) for a renewed hold. Pends for ever when no request comes. A request
    /// lives about one lease, so a reentrant hold of the same owner hears it too.
    ///
    /// The holder decides what to do (finish quickly and unlock, say); fencing tokens protect
    /// the resource from a holder that ignores it, and `force_unlock` is the forced path.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::RLock) -> ferrisson::Result<()> {
    /// let guard = lock.lock().await?;
    /// tokio::select! {
    ///     () = guard.revocation_requested() => eprintln!("asked to let go: stopping early"),
    ///     () = async { /* the long job */ } => {}
    /// }
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn revocation_requested(&self) {
        let target = self.holder.ops().renewal(&self.holder.owner);
        let mark = target.mark();
        let inner = &self.holder.handle.core;
        let heed = crate::revoke::Heed::SinceToken;
        crate::revoke::requested(inner, self.holder.name(), &[mark], heed, &self.lease).await;
    }

    /// Turns this watchdog-renewed hold into one with a fixed lease of `lease_ms` from now, and
    /// checks that it is still held: `Ok(false)` (and the guard lost) when it is not. For
    /// combinators, whose early parts are renewed while they wait for the later ones.
    pub(crate) async fn fix_lease(&mut self, lease_ms: u64) -> Result<bool> {
        debug_assert!(self.renewed, "only a renewed hold is given a fixed lease");
        self.renewed = false;
        self.holder.fix_lease(&self.lease, lease_ms).await
    }

    /// This hold's lock as a combinator's part, to name it in an error.
    pub(crate) fn part(&self) -> PartOf {
        PartOf::of(&self.holder.handle)
    }

    /// One round trip of this guard's client: a reply, or the opening of its connection.
    pub(crate) fn round_trip(&self) -> std::time::Duration {
        self.holder.handle.core.config.round_trip_cap()
    }

    /// Gives back a hold a combinator will not hand out, and returns once the server has let it
    /// go. As [`unlock`](Self::unlock), except for a hold the client already counts lost: its
    /// lease, counted from when the acquire was sent, ran out before the grant's reply came,
    /// but the server's, counted from when it granted, may still run. `unlock` leaves such a
    /// hold to a background removal; here it is removed before this returns.
    pub(crate) async fn give_back(self) -> Result<()> {
        let holder = self.holder.clone();
        match self.unlock().await {
            Err(crate::Error::LockLost { .. }) => holder.remove_leftover_now().await,
            settled => settled,
        }
    }

    /// When Redis may expire this hold unless a renewal confirms it before.
    pub(crate) fn deadline(&self) -> tokio::time::Instant {
        self.lease.deadline()
    }

    /// Resolves when the lease is lost (see [`is_lost`](Self::is_lost)); pends for ever while
    /// the watchdog keeps it.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(lock: ferrisson::RLock) -> ferrisson::Result<()> {
    /// let guard = lock.lock().await?;
    /// tokio::select! {
    ///     () = guard.lost() => eprintln!("lease lost: stop"),
    ///     () = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
    /// }
    /// guard.unlock().await.ok();
    /// # Ok(()) }
    /// ```
    pub async fn lost(&self) {
        self.lease.lost().await;
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.holder.guard_gone(&self.lease, self.renewed);
        let request_id = self.holder.inner().owners.next_request_id();
        let holds = self.holder.holds().clone().try_lock_owned().ok();
        spawn_release(&self.holder, &self.lease, request_id, false, holds);
    }
}

/// Sends a release from a background task on the client's thread; failures are logged.
/// `resend`: an earlier send of the same request may have run. `holds`: the owner's hold count,
/// when the caller could lock it at once.
///
/// A guard locks its owner's hold count when it gives its hold back, before anything awaits,
/// and the lock passes on to the background release: the owner's next acquire then runs after
/// the release, so it never counts as one more hold of the hold being given back (sharing its
/// token) unless another operation of the owner had the count locked at that moment.
fn spawn_release(
    holder: &Holder,
    lease: &Arc<Lease>,
    request_id: String,
    resend: bool,
    holds: Option<OwnedMutexGuard<Holds>>,
) {
    let (holder, lease) = (holder.clone(), lease.clone());
    let inner = holder.handle.core.clone();
    inner.spawn_release(holder.name().to_owned(), async move {
        let mut holds = match holds {
            Some(holds) => holds,
            None => holder.holds().clone().lock_owned().await,
        };
        if let Err(e) = holder.release(&mut holds, &lease, &request_id, resend).await {
            tracing::warn!(lock = %holder.name(), error = %e, "background release failed; the lease frees the lock");
        }
    });
}

/// A release under way; dropped before it finished, it finishes in the background.
struct PendingRelease {
    holder: Holder,
    lease: Arc<Lease>,
    request_id: String,
    /// The owner's hold count, locked from the start of the release to its end, in the
    /// background too when the unlock is cancelled.
    holds: Option<OwnedMutexGuard<Holds>>,
    done: bool,
}

impl Drop for PendingRelease {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        // The cancelled send may have run: this one is a resend of the same request.
        let request_id = std::mem::take(&mut self.request_id);
        spawn_release(
            &self.holder,
            &self.lease,
            request_id,
            true,
            self.holds.take(),
        );
    }
}

impl crate::observe::Acquired for Option<LockGuard> {
    fn granted(&self) -> bool {
        self.is_some()
    }
    fn token(&self) -> Option<u64> {
        self.as_ref().map(LockGuard::fencing_token)
    }
}
