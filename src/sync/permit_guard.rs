//! The guard of permits taken from an [`RPermitExpirableSemaphore`](crate::RPermitExpirableSemaphore).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use tracing::Instrument;

use super::permits::Shared;
use crate::error::{Error, Result};
use crate::lease::Lease;
use crate::live::{GiveBack, GivingBack, Hold};
use crate::observe::{Held, Release};
use crate::watchdog::{RenewTarget, Renewal, Watch};

/// What a guard stands for: its permits, their lease and their renewal.
#[derive(Debug)]
pub(crate) struct Permits {
    shared: Arc<Shared>,
    ids: Vec<String>,
    lease: Arc<Lease>,
    target: RenewTarget,
    /// The watchdog registration renewing the permits (or, with a fixed lease, having the
    /// heartbeat look at them), while there is one.
    renewal: Mutex<Option<u64>>,
    /// Counts the permits as held until the guard is released or dropped.
    held: Held,
    /// The permits' id in the client's [live holds](crate::live), from their guard's making to
    /// its release or drop.
    listed: std::sync::OnceLock<u64>,
}

impl Permits {
    /// The permits `ids` just granted with `lease`; `renewed`: the watchdog keeps them.
    pub(crate) fn new(
        shared: Arc<Shared>,
        ids: Vec<String>,
        lease: Arc<Lease>,
        renewed: bool,
    ) -> Self {
        let target = RenewTarget::Permits {
            count: shared.count.clone(),
            timeouts: shared.timeouts.clone(),
            channel: shared.channel.clone(),
            ids: ids.join(" ").into(),
        };
        let labels = shared.inner().observe.labels("permit", &shared.name);
        let how = if renewed { Watch::Renew } else { Watch::Check };
        let renewal = shared.inner().watchdog.watch(
            Renewal {
                site: None,
                target: target.clone(),
                lease: lease.clone(),
                labels: labels.clone(),
            },
            how,
        );
        Permits {
            shared,
            ids,
            lease,
            target,
            renewal: Mutex::new(Some(renewal)),
            held: Held::began(&labels),
            listed: std::sync::OnceLock::new(),
        }
    }

    /// Lists the permits among the client's live holds (once they are shared by their guard).
    fn list(self: &Arc<Self>) {
        let by: Arc<dyn GiveBack> = self.clone();
        let hold = Hold {
            by: Arc::downgrade(&by),
            whose: None,
            lease: Arc::downgrade(&self.lease),
        };
        let id = self.shared.inner().list_hold(hold);
        let _ = self.listed.set(id);
    }

    /// The guard gives the permits back itself (released or dropped).
    fn unlist(&self) {
        if let Some(id) = self.listed.get() {
            self.shared.inner().unlist_hold(*id);
        }
    }

    fn take_renewal(&self) -> Option<u64> {
        self.renewal
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// After the lease was fixed: the watchdog only re-checks the permits from now on.
    fn check_from_now(&self) {
        let renewal = Renewal {
            site: None,
            target: self.target.clone(),
            lease: self.lease.clone(),
            labels: self
                .shared
                .inner()
                .observe
                .labels("permit", &self.shared.name),
        };
        let id = self.shared.inner().watchdog.watch(renewal, Watch::Check);
        let stale = self
            .renewal
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .replace(id);
        if let Some(stale) = stale {
            self.shared.inner().watchdog.deregister(stale);
        }
    }

    fn stop_renewal(&self) {
        if let Some(id) = self.take_renewal() {
            self.shared.inner().watchdog.deregister(id);
        }
    }

    fn lost(&self, lost: usize) -> Error {
        Error::PermitLost {
            name: self.shared.name.clone(),
            lost,
            held: self.ids.len(),
        }
    }

    /// Gives the permits back, in a `ferrisson.release` span.
    async fn release(&self) -> Result<()> {
        let token = self.lease.token();
        let observed = Release::start(
            &self.shared.inner().observe,
            "permit",
            &self.shared.name,
            token,
        );
        let result = self.send_release().instrument(observed.span()).await;
        observed.finish(result)
    }

    async fn send_release(&self) -> Result<()> {
        let call = self.shared.release_call(&self.ids, None);
        let (released, _): (i64, i64) = self
            .shared
            .inner()
            .executor
            .run(&call, &self.shared.name)
            .await?;
        let released = usize::try_from(released).unwrap_or(0);
        if released >= self.ids.len() {
            Ok(())
        } else {
            self.lease.mark_lost();
            Err(self.lost(self.ids.len() - released))
        }
    }
}

/// A guard's permits give themselves back: renewal stops, and they are released.
impl GiveBack for Permits {
    fn name(&self) -> &str {
        &self.shared.name
    }

    fn give_back(
        self: Arc<Self>,
        _whose: Option<Arc<dyn std::any::Any + Send + Sync>>,
    ) -> GivingBack {
        Box::pin(async move {
            self.stop_renewal();
            self.release().await
        })
    }
}

/// Permits held from an [`RPermitExpirableSemaphore`](crate::RPermitExpirableSemaphore): one, or
/// the `n` of an `acquire_many(n)`, taken together and given back together. `'static` and
/// `Send`, so it can move into a task.
///
/// Give the permits back with [`release`](Self::release), which reports errors. Dropping the
/// guard instead stops the renewal at once and sends the release from a background task on the
/// client's thread (failures are logged with `tracing`; the lease gives the permits back if the
/// release cannot be sent).
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
/// let slots = client.get_permit_expirable_semaphore("gpu");
/// let permit = slots.acquire().await?;
/// tokio::select! {
///     () = permit.lost() => eprintln!("permit lost: stop using the GPU slot"),
///     () = async { /* the work */ } => {}
/// }
/// permit.release().await?;
/// # Ok(()) }
/// ```
#[must_use = "if unused the permits are released immediately"]
#[clippy::has_significant_drop]
#[derive(Debug)]
pub struct PermitGuard {
    permits: Arc<Permits>,
    armed: bool,
}

impl PermitGuard {
    pub(crate) fn new(permits: Permits) -> Self {
        let permits = Arc::new(permits);
        permits.list();
        PermitGuard {
            permits,
            armed: true,
        }
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        &self.permits.shared.name
    }

    /// The ids of the permits held, as in the semaphore's `{name}:timeout` zset (32 hex digits,
    /// like Redisson's): one may be given back elsewhere with
    /// [`release_by_id`](crate::RPermitExpirableSemaphore::release_by_id).
    pub fn ids(&self) -> &[String] {
        &self.permits.ids
    }

    /// The fencing token of this grant: strictly greater than that of every earlier grant of the
    /// same name (permits and locks of that name draw from one counter), from any client.
    pub fn fencing_token(&self) -> u64 {
        self.permits.lease.token()
    }

    /// True once the permits are known lost: a renewal found one gone, or the lease ran out
    /// without a confirmed renewal. The holder must stop using what the permits guard. Once
    /// true, it stays true.
    pub fn is_lost(&self) -> bool {
        self.permits.lease.is_lost()
    }

    /// Resolves when the permits are lost (see [`is_lost`](Self::is_lost)); pends for ever while
    /// the watchdog keeps them.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(permit: ferrisson::PermitGuard) {
    /// permit.lost().await;
    /// eprintln!("permit lost");
    /// # }
    /// ```
    pub async fn lost(&self) {
        self.permits.lease.lost().await;
    }

    /// True once the permits are known to be asked to let go (see
    /// [`RPermitExpirableSemaphore::request_revocation`](crate::RPermitExpirableSemaphore::request_revocation)).
    /// Once true, it stays true.
    pub fn is_revocation_requested(&self) -> bool {
        self.permits.lease.is_revoked()
    }

    /// Resolves when somebody asks these permits to let go: by message within milliseconds
    /// while this future listens, found when it starts, or at the next watchdog renewal for
    /// renewed permits. Pends for ever when no request comes. See
    /// [`LockGuard::revocation_requested`](crate::LockGuard::revocation_requested).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(permit: ferrisson::PermitGuard) -> ferrisson::Result<()> {
    /// permit.revocation_requested().await;
    /// permit.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn revocation_requested(&self) {
        let permits = &self.permits;
        let marks: Vec<&str> = permits.ids.iter().map(String::as_str).collect();
        let inner = permits.shared.inner();
        let heed = crate::revoke::Heed::Any;
        crate::revoke::requested(inner, &permits.shared.name, &marks, heed, &permits.lease).await;
    }

    /// Gives the permits a fixed lease of `lease` from now (Redisson's `updateLeaseTime`): the
    /// watchdog stops renewing them, and they come back to the semaphore when it runs out.
    ///
    /// # Errors
    ///
    /// [`Error::PermitLost`] when a permit was gone already (the guard is lost then);
    /// [`Error::InvalidArgument`] for a lease under 1 ms; [`Error::Redis`].
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a future dropped midway may leave the permits unrenewed on their old
    /// lease; [`is_lost`](Self::is_lost) then turns true when that lease runs out.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(permit: ferrisson::PermitGuard) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// permit.update_lease(Duration::from_secs(120)).await?; // a long step ahead
    /// # Ok(()) }
    /// ```
    pub async fn update_lease(&self, lease: Duration) -> Result<()> {
        let lease_ms = super::permits::checked_lease(lease)?;
        let permits = &self.permits;
        let inner = permits.shared.inner();
        if let Some(id) = permits.take_renewal() {
            // A renewal still on its way would overwrite the new lease with the watchdog's.
            inner.watchdog.deregister_settled(id).await;
        }
        let sent_at = Instant::now();
        let call = permits.target.call(lease_ms);
        let renewed: Vec<i64> = inner.executor.run(&call, self.name()).await?;
        match renewed.first() {
            Some(answer @ (1 | 2)) => {
                permits.lease.extended(sent_at, lease_ms);
                if *answer == 2 {
                    permits.lease.mark_revoked();
                }
                permits.check_from_now();
                Ok(())
            }
            Some(missing) => {
                permits.lease.mark_lost();
                let lost = usize::try_from(missing.unsigned_abs()).unwrap_or(usize::MAX);
                Err(permits.lost(lost.min(permits.ids.len())))
            }
            None => Err(Error::unexpected("a permit renewal answered nothing")),
        }
    }

    /// Gives the permits back and wakes waiters.
    ///
    /// # Errors
    ///
    /// [`Error::PermitLost`] when some were gone already (expired and taken back, or released
    /// elsewhere): those are not added a second time, the others are given back;
    /// [`Error::Redis`] when Redis could not be reached, in which case the lease, no longer
    /// renewed, gives them back when it runs out.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: renewal stops at the first poll, and if the future is dropped before the
    /// release completes, the release finishes in the background (it is idempotent).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(permit: ferrisson::PermitGuard) -> ferrisson::Result<()> {
    /// permit.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn release(mut self) -> Result<()> {
        self.armed = false;
        // Counted as under way before the permits leave the live list: a signal's drain ends
        // the process only once the release is done.
        let core = &self.permits.shared.core;
        let _under_way = (core.pending).begin(
            format!("the release of permits of `{}`", self.permits.shared.name),
            false,
        );
        self.permits.stop_renewal();
        self.permits.unlist();
        self.permits.held.end();
        let mut pending = PendingRelease {
            permits: self.permits.clone(),
            done: false,
        };
        let result = pending.permits.release().await;
        pending.done = true;
        result
    }
}

impl Drop for PermitGuard {
    fn drop(&mut self) {
        if self.armed {
            self.permits.stop_renewal();
            self.permits.unlist();
            self.permits.held.end();
            spawn_release(&self.permits);
        }
    }
}

/// Sends a release from a background task on the client's thread; failures are logged.
fn spawn_release(permits: &Arc<Permits>) {
    let permits = permits.clone();
    let inner = permits.shared.core.clone();
    inner.spawn_release(permits.shared.name.clone(), async move {
        match permits.release().await {
            Ok(()) => {}
            Err(e @ Error::PermitLost { .. }) => {
                tracing::debug!(semaphore = %permits.shared.name, error = %e, "background release: permits gone already");
            }
            Err(e) => {
                tracing::warn!(semaphore = %permits.shared.name, error = %e, "background release failed; the lease gives the permits back");
            }
        }
    });
}

/// A release under way; dropped before it finished, it finishes in the background.
struct PendingRelease {
    permits: Arc<Permits>,
    done: bool,
}

impl Drop for PendingRelease {
    fn drop(&mut self) {
        if !self.done {
            spawn_release(&self.permits);
        }
    }
}

impl crate::observe::Acquired for Option<PermitGuard> {
    fn granted(&self) -> bool {
        self.is_some()
    }
    fn token(&self) -> Option<u64> {
        self.as_ref().map(PermitGuard::fencing_token)
    }
}
