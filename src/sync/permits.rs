//! `RPermitExpirableSemaphore`: Redisson's semaphore whose permits are owned, each under an id
//! with an expiry, so the permits of a holder that dies come back by themselves.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;
use uuid::Uuid;

use super::permit_guard::{PermitGuard, Permits};
use super::{Attempt, wait_for};
use crate::core::Core;
use crate::error::{Error, Result};
use crate::lease::Lease;
use crate::observe::Acquire;
use crate::pubsub::Wake;
use crate::script::{PERMIT_ACQUIRE, PERMIT_RELEASE, PERMIT_SET, ScriptCall};
use crate::{names, slots};

/// The longest permit id [`release_by_id`](RPermitExpirableSemaphore::release_by_id) accepts.
const MAX_ID_LEN: usize = 1024;

/// A semaphore whose permits expire, Redisson's `RPermitExpirableSemaphore`: every permit taken
/// is recorded under its own id with a lease, renewed by the client's watchdog while its
/// [`PermitGuard`] lives, so the permits of a process that dies (or stalls past its lease) come
/// back to the semaphore by themselves.
///
/// In Redis it is Redisson's layout: a string `name` holding the count of free permits, a zset
/// `{name}:timeout` of permit id → expiry (epoch ms), and the channel `redisson_sc:{name}`
/// carrying the free count after each release, so Java Redisson clients share the permits.
/// Unlike Redisson's:
/// - expiry is judged by the Redis server's clock (`TIME`), never by a client's;
/// - every script of the semaphore, renewals included, first gives back the expired permits
///   (not only the next acquirer's), and says so on the channel;
/// - a late release of an expired permit adds nothing (the permit came back once, when it
///   expired): it reports [`Error::PermitLost`];
/// - [`acquire_many`](Self::acquire_many) takes its permits in one atomic step, all or none, and
///   the guard carries a fencing token;
/// - waiters wake on release messages and when the first permit out is due to expire (capped by
///   the client's re-check interval), never by polling alone.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
/// let workers = client.get_permit_expirable_semaphore("render-slots");
/// workers.try_set_permits(4).await?;
/// let permit = workers.acquire().await?; // renewed by the watchdog while it lives
/// let token = permit.fencing_token();    // hand it to the resource with every write
/// # let _ = token;
/// permit.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RPermitExpirableSemaphore {
    shared: Arc<Shared>,
}

#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) core: Arc<Core>,
    pub(crate) name: String,
    /// `{name}:timeout`: permit id → expiry in epoch ms.
    pub(crate) timeouts: Arc<str>,
    pub(crate) channel: Arc<str>,
    /// The count key, shared with the watchdog's renewals.
    pub(crate) count: Arc<str>,
    token_counter: String,
    /// `{name}:ferrisson_sc_request:`, the prefix of the tombstones of given-up acquires.
    requests: String,
    /// Why the name was refused, reported by every operation.
    invalid: Option<String>,
}

impl Shared {
    pub(crate) fn inner(&self) -> &Core {
        &self.core
    }

    /// The release (or undo, with `tombstone`) of `ids`; replies `{released, free}`.
    pub(crate) fn release_call(&self, ids: &[String], tombstone: Option<&str>) -> ScriptCall {
        let record_ms = self.inner().config.unlock_latch_ttl().as_millis() as u64;
        let mut call = ScriptCall::new(&PERMIT_RELEASE)
            .key(&*self.count)
            .key(&*self.timeouts)
            .key(&*self.channel);
        if let Some(tombstone) = tombstone {
            call = call.key(tombstone);
        }
        call = call.arg(record_ms);
        for id in ids {
            call = call.arg(id.as_str());
        }
        call
    }
}

/// Checks a count of permits for one guard.
fn checked(n: u64) -> Result<usize> {
    if (1..=RPermitExpirableSemaphore::MAX_PERMITS_PER_GUARD).contains(&n) {
        Ok(n as usize)
    } else {
        Err(Error::InvalidArgument(format!(
            "a guard holds between 1 and {} permits, got {n}",
            RPermitExpirableSemaphore::MAX_PERMITS_PER_GUARD
        )))
    }
}

/// Checks a lease: at least a millisecond.
pub(super) fn checked_lease(lease: Duration) -> Result<u64> {
    match u64::try_from(lease.as_millis()) {
        Ok(ms) if ms >= 1 && ms <= i64::MAX as u64 / 2 => Ok(ms),
        _ => Err(Error::InvalidArgument(format!(
            "a permit lease must be between 1 ms and ~146 million years, got {lease:?}"
        ))),
    }
}

impl RPermitExpirableSemaphore {
    /// The most permits one guard may hold (each is a member of the semaphore's zset and an
    /// argument of its scripts).
    pub const MAX_PERMITS_PER_GUARD: u64 = 10_000;

    pub(crate) fn new(core: Arc<Core>, name: &str) -> Self {
        let base = names::suffix_base(name);
        RPermitExpirableSemaphore {
            shared: Arc::new(Shared {
                core,
                name: name.to_owned(),
                timeouts: format!("{base}:timeout").into(),
                channel: names::derived("redisson_sc", name).into(),
                count: name.into(),
                token_counter: slots::token_counter(name),
                requests: format!("{base}:ferrisson_sc_request:"),
                invalid: names::validate(name).err(),
            }),
        }
    }

    /// The semaphore's name (its count's key).
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    fn inner(&self) -> &Core {
        self.shared.inner()
    }

    fn check(&self) -> Result<()> {
        match &self.shared.invalid {
            Some(why) => Err(Error::InvalidArgument(why.clone())),
            None => Ok(()),
        }
    }

    async fn set(&self, what: &str, n: Option<i64>) -> Result<i64> {
        self.check()?;
        let mut call = ScriptCall::new(&PERMIT_SET)
            .key(&*self.shared.count)
            .key(&*self.shared.timeouts)
            .key(&*self.shared.channel)
            .arg(what);
        if let Some(n) = n {
            call = call.arg(n);
        }
        self.inner().executor.run(&call, &self.shared.name).await
    }

    /// Sets the permits to `permits` when none were ever set (Redisson's `trySetPermits`);
    /// returns whether they were set.
    ///
    /// `permits` may be 0: the semaphore then starts closed, as `java.util.concurrent.Semaphore`
    /// with 0 permits does. Its count is set (to 0), so a later `try_set_permits` returns
    /// `false`; acquirers wait (`try_acquire` answers `None`) until
    /// [`add_permits`](Self::add_permits) opens it, from any client.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for more than `i64::MAX` permits or a malformed name;
    /// [`Error::WrongType`] when a key of the semaphore holds something else; [`Error::Redis`].
    ///
    /// # Cancel safety
    ///
    /// The permits may or may not have been set when the future is dropped after it was sent;
    /// calling again is harmless.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::RPermitExpirableSemaphore) -> ferrisson::Result<()> {
    /// semaphore.try_set_permits(4).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// A pool that starts closed and opens once its workers are ready:
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// let gpus = client.get_permit_expirable_semaphore("gpu-slots");
    /// gpus.try_set_permits(0).await?; // closed: acquirers wait
    /// assert!(gpus.try_acquire().await?.is_none());
    /// gpus.add_permits(2).await?; // open: two permits from now on
    /// # Ok(()) }
    /// ```
    pub async fn try_set_permits(&self, permits: u64) -> Result<bool> {
        let n = i64::try_from(permits).map_err(|_| {
            Error::InvalidArgument(format!(
                "a semaphore's permits must be between 0 and {}, got {permits}",
                i64::MAX
            ))
        })?;
        Ok(self.set("set", Some(n)).await? == 1)
    }

    /// Adds `delta` permits (negative: removes free ones, possibly below zero, as Redisson
    /// allows) and returns the permits free now. Waiters are told.
    ///
    /// # Errors
    ///
    /// As [`try_set_permits`](Self::try_set_permits) (any `delta` is accepted).
    ///
    /// # Cancel safety
    ///
    /// Not idempotent: a dropped future whose command was sent may or may not have added them.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::RPermitExpirableSemaphore) -> ferrisson::Result<()> {
    /// semaphore.add_permits(2).await?;
    /// # Ok(()) }
    /// ```
    pub async fn add_permits(&self, delta: i64) -> Result<i64> {
        self.set("add", Some(delta)).await
    }

    /// What Redis holds for this semaphore now: the permits free, every permit out with its
    /// expiry, pending revocation requests and the connections waiting, read in one round trip
    /// that changes nothing (expired permits are shown, not given back). See
    /// [`PermitSemaphoreSnapshot`](crate::inspect::PermitSemaphoreSnapshot).
    ///
    /// # Errors
    ///
    /// As [`try_set_permits`](Self::try_set_permits).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (read only).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::RPermitExpirableSemaphore) -> ferrisson::Result<()> {
    /// for permit in semaphore.snapshot().await?.permits {
    ///     println!("{} expires {}", permit.id, permit.expires);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn snapshot(&self) -> Result<crate::inspect::PermitSemaphoreSnapshot> {
        self.check()?;
        crate::inspect::permits(self.inner(), &self.shared.name).await
    }

    /// The permits free now, expired ones counted as free (they are given back first).
    ///
    /// # Errors
    ///
    /// As [`try_set_permits`](Self::try_set_permits).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it changes nothing but giving back expired permits.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::RPermitExpirableSemaphore) -> ferrisson::Result<()> {
    /// println!("{} free", semaphore.available_permits().await?);
    /// # Ok(()) }
    /// ```
    pub async fn available_permits(&self) -> Result<i64> {
        self.set("free", None).await
    }

    /// Waits until a permit is free and takes it; the watchdog renews its lease (the client's
    /// watchdog timeout) while the guard lives.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a malformed name; otherwise as
    /// [`try_set_permits`](Self::try_set_permits). A semaphore with no permits at all (set to 0,
    /// or every permit removed) is closed, not an error: the call waits until
    /// [`add_permits`](Self::add_permits) opens it.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future at any point leaves no permit taken (an attempt that
    /// may have run is undone in the background, and a late delivery of it takes nothing).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::RPermitExpirableSemaphore) -> ferrisson::Result<()> {
    /// let permit = semaphore.acquire().await?;
    /// permit.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire(&self) -> Result<PermitGuard> {
        self.acquire_unbounded(1, None).await
    }

    /// Waits until a permit is free and takes it with a fixed `lease`, never renewed: the
    /// permit comes back to the semaphore when the lease runs out, held or not.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a lease under 1 ms; otherwise as
    /// [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`acquire`](Self::acquire).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::RPermitExpirableSemaphore) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// let permit = semaphore.acquire_with_lease(Duration::from_secs(30)).await?;
    /// permit.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire_with_lease(&self, lease: Duration) -> Result<PermitGuard> {
        self.acquire_unbounded(1, Some(lease)).await
    }

    /// Waits until `n` permits are free and takes them in one atomic step (all or none), under
    /// one guard renewed by the watchdog.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for `n` of 0 or over [`MAX_PERMITS_PER_GUARD`](Self::MAX_PERMITS_PER_GUARD), or when `n`
    /// is more than all the permits the semaphore has, free and out (waiting could never end;
    /// a semaphore with none at all is closed instead, and waited for, as in
    /// [`acquire`](Self::acquire)); otherwise as [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`acquire`](Self::acquire).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::RPermitExpirableSemaphore) -> ferrisson::Result<()> {
    /// let three = semaphore.acquire_many(3).await?;
    /// assert_eq!(three.ids().len(), 3);
    /// three.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire_many(&self, n: u64) -> Result<PermitGuard> {
        self.acquire_unbounded(n, None).await
    }

    /// Takes a permit if one is free now (watchdog lease).
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`acquire`](Self::acquire).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::RPermitExpirableSemaphore) -> ferrisson::Result<()> {
    /// if let Some(permit) = semaphore.try_acquire().await? {
    ///     permit.release().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire(&self) -> Result<Option<PermitGuard>> {
        self.acquire_within(1, Some(Duration::ZERO), None).await
    }

    /// Waits at most `wait` for `n` permits and takes them in one atomic step; `lease` fixes
    /// their lease (else the watchdog renews it). `None` when they did not become free in time.
    ///
    /// # Errors
    ///
    /// As [`acquire_many`](Self::acquire_many) and [`acquire_with_lease`](Self::acquire_with_lease).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`acquire`](Self::acquire).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::RPermitExpirableSemaphore) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// if let Some(two) = semaphore.try_acquire_for(2, Duration::from_secs(1), None).await? {
    ///     two.release().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire_for(
        &self,
        n: u64,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Option<PermitGuard>> {
        self.acquire_within(n, Some(wait), lease).await
    }

    /// Gives back the permit `id`, taken by any client (Java Redisson's too: its permit ids
    /// work here). A permit held through a live [`PermitGuard`] is better given back by the
    /// guard, which also stops its renewal.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownPermit`] when the semaphore has no such permit out (never taken,
    /// released already, or expired: nothing is added then); [`Error::InvalidArgument`] for an
    /// empty or over-long id; otherwise as [`try_set_permits`](Self::try_set_permits).
    ///
    /// # Cancel safety
    ///
    /// Idempotent: a dropped future may or may not have given the permit back; calling again
    /// then answers `UnknownPermit` and adds nothing.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::RPermitExpirableSemaphore) -> ferrisson::Result<()> {
    /// semaphore.release_by_id("8c7e0c5e4e4d4c2a9f3e1b2a3c4d5e6f").await?;
    /// # Ok(()) }
    /// ```
    pub async fn release_by_id(&self, id: &str) -> Result<()> {
        self.check()?;
        if id.is_empty() || id.len() > MAX_ID_LEN || id.contains(char::is_whitespace) {
            return Err(Error::InvalidArgument(format!(
                "a permit id is 1 to {MAX_ID_LEN} bytes without white space, got {} bytes",
                id.len()
            )));
        }
        let call = self.shared.release_call(&[id.to_owned()], None);
        let (released, _): (i64, i64) = self.inner().executor.run(&call, self.name()).await?;
        if released == 1 {
            Ok(())
        } else {
            Err(Error::UnknownPermit {
                name: self.shared.name.clone(),
                id: id.to_owned(),
            })
        }
    }

    /// Asks the holders of every permit out to let go (Apache Curator's revocation); returns
    /// how many permits were asked (0: none out, nothing recorded). Cooperative: see
    /// [`PermitGuard::revocation_requested`]; a holder that ignores it keeps its permits until
    /// their lease runs out, or until [`release_by_id`](Self::release_by_id) takes them.
    ///
    /// # Errors
    ///
    /// [`Error::WrongType`] when the permits key holds something else;
    /// [`Error::InvalidArgument`] for a malformed name; [`Error::Redis`].
    ///
    /// # Cancel safety
    ///
    /// The request may or may not have been made when the future is dropped after it was sent;
    /// asking again is harmless.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(semaphore: ferrisson::RPermitExpirableSemaphore) -> ferrisson::Result<()> {
    /// let asked = semaphore.request_revocation().await?;
    /// println!("asked {asked} permits back");
    /// # Ok(()) }
    /// ```
    pub async fn request_revocation(&self) -> Result<usize> {
        self.check()?;
        let holds = crate::revoke::Holds::Permits;
        let (name, timeouts) = (&self.shared.name, &*self.shared.timeouts);
        crate::revoke::request(self.inner(), name, timeouts, holds).await
    }

    async fn acquire_unbounded(&self, n: u64, lease: Option<Duration>) -> Result<PermitGuard> {
        self.acquire_within(n, None, lease)
            .await?
            .ok_or_else(|| Error::unexpected("an unbounded wait ended without the permits"))
    }

    async fn acquire_within(
        &self,
        n: u64,
        wait: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<Option<PermitGuard>> {
        self.check()?;
        let n = checked(n)?;
        let fixed = lease.map(checked_lease).transpose()?;
        let channel = &self.shared.channel;
        self.inner().accepting()?;
        let observed = Acquire::start(&self.inner().observe, "permit", self.name(), wait);
        let attempt = || observed.attempt(self.attempt(n, fixed));
        let waited = wait_for(self.inner(), channel, Wake::Count, wait, attempt);
        let result = waited.instrument(observed.span()).await;
        observed.finish(result)
    }

    /// One attempt at taking `n` permits. If it is dropped after the script may have run, or
    /// its answer is lost, the permits it may have taken are given back in the background.
    async fn attempt(&self, n: usize, fixed: Option<u64>) -> Result<Attempt<PermitGuard>> {
        let ids: Vec<String> = (0..n)
            .map(|_| Uuid::new_v4().simple().to_string())
            .collect();
        let lease_ms = fixed.unwrap_or(self.inner().watchdog.lease().as_millis() as u64);
        let mut in_flight = Undo {
            shared: self.shared.clone(),
            tombstone: format!("{}{}", self.shared.requests, ids[0]),
            ids: Some(ids),
        };
        let mut call = ScriptCall::new(&PERMIT_ACQUIRE)
            .key(&*self.shared.count)
            .key(&*self.shared.timeouts)
            .key(&*self.shared.channel)
            .key(&self.shared.token_counter)
            .key(&in_flight.tombstone)
            .arg(lease_ms);
        for id in in_flight.ids.iter().flatten() {
            call = call.arg(id.as_str());
        }
        let sent_at = Instant::now();
        let reply = self
            .inner()
            .executor
            .run_synced::<(i64, i64, i64)>(&call, self.name())
            .await;
        let (status, value, wait_ms): (i64, i64, i64) = match reply {
            Ok((reply, Some((acked, wanted)))) if reply.0 == 1 && acked < wanted => {
                // Too few replicas have the grant: `in_flight` gives the permits back.
                tracing::warn!(semaphore = %self.shared.name, acked, wanted, "a permit grant reached too few replicas; undone");
                return Err(Error::ReplicasNotSynced { acked, wanted });
            }
            Ok((reply, _)) => reply,
            // The undo runs when `in_flight` is dropped.
            Err(e) if e.outcome_unknown() => return Err(e),
            Err(e) => {
                in_flight.ids = None;
                return Err(e);
            }
        };
        match status {
            1 => {
                let ids = in_flight.ids.take().unwrap_or_default();
                let token = u64::try_from(value)
                    .map_err(|_| Error::unexpected(format!("permit token {value}")))?;
                let lease = Arc::new(Lease::new(token, sent_at, lease_ms));
                let permits = Permits::new(self.shared.clone(), ids, lease, fixed.is_none());
                Ok(Attempt::Done(PermitGuard::new(permits)))
            }
            0 => {
                in_flight.ids = None;
                // The server counted from when the script ran, a little after it was sent, and
                // in whole ms: a few ms more do not wake the waiter before the expiry.
                let foreseen = u64::try_from(wait_ms)
                    .ok()
                    .map(|ms| Duration::from_millis(ms.saturating_add(5)));
                Ok(Attempt::NotYet(foreseen))
            }
            // No permits at all, free or out: closed (set to 0, or every permit removed), as a
            // `Semaphore(0)` is; only `add_permits` opens it, and says so on the channel.
            -2 if value <= 0 => {
                in_flight.ids = None;
                Ok(Attempt::NotYet(None))
            }
            -2 => {
                in_flight.ids = None;
                Err(Error::InvalidArgument(format!(
                    "{n} permits asked of semaphore `{}`, which has {value} in all",
                    self.shared.name
                )))
            }
            // -1: this request was given up on already; nothing was taken.
            _ => {
                in_flight.ids = None;
                Err(Error::unexpected(format!(
                    "acquire of semaphore `{}` answered {status}",
                    self.shared.name
                )))
            }
        }
    }
}

/// How long an acquire whose answer was lost is tried to be undone: past the lease the permits
/// come back by themselves anyway.
const UNDO_FOR: Duration = Duration::from_secs(60);

/// An acquire attempt that may have run. Dropped while it still holds its ids, it gives back in
/// the background whichever of them were taken, and leaves a tombstone so that a late delivery
/// of the attempt takes nothing.
struct Undo {
    shared: Arc<Shared>,
    tombstone: String,
    ids: Option<Vec<String>>,
}

impl Drop for Undo {
    fn drop(&mut self) {
        let Some(ids) = self.ids.take() else {
            return;
        };
        let shared = self.shared.clone();
        let tombstone = std::mem::take(&mut self.tombstone);
        self.shared.inner().spawn(async move {
            let call = shared.release_call(&ids, Some(&tombstone));
            let undone = shared.inner().executor.run_until_answered(&call, &shared.name, UNDO_FOR);
            if let Err(e) = undone.await {
                tracing::warn!(semaphore = %shared.name, error = %e, "could not undo an acquire whose answer was lost; its permits come back when their lease runs out");
            }
        });
    }
}
