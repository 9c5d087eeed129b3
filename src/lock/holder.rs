//! The engine under every lock handle: one owner of one lock.
//!
//! The holder keeps the hold count its owner has on the server, and serializes its round trips
//! through an async mutex so that count and server always move together. When an acquire's
//! outcome is unknown (timeout, dropped connection, cancelled caller) the holder repairs the
//! server to the count it knows, still holding that mutex, so no other operation of the owner
//! can slip in between. A release of the last hold may hand the lock to a waiter of the same
//! client in the same script call (see [`handover`](crate::lock::handover)).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Mutex, OwnedMutexGuard};
use tokio::time::Instant;

use crate::core::Core;
use crate::error::{Error, Result};
use crate::lease::Lease;
use crate::lock::guard::LockGuard;
use crate::lock::handover::HandedHold;
use crate::lock::in_flight::{Acquiring, InFlight, Queued};
use crate::lock::leftover::Leftovers;
pub(crate) use crate::lock::replies::Inspection;
use crate::lock::replies::{Acquired, inspect_field, run_acquire, run_force_unlock};
use crate::lock::wait::{self, Attempt};
use crate::script::ScriptCall;
use crate::watchdog::{RenewTarget, Renewal};

/// One release request: its id (for the latch that makes resends safe) and whether an earlier
/// send of it may have run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReleaseRequest<'a> {
    pub(crate) id: &'a str,
    pub(crate) resend: bool,
    /// The client believes this gives back the owner's last hold. A kind may then send a first
    /// send (never a resend) in a short form that does not decrement, answering
    /// [`SeveralHolds`](crate::lock::replies::Released::SeveralHolds) when the server counts more.
    pub(crate) last: bool,
    /// How long a partial release's latch lives.
    pub(crate) latch_ttl_ms: u64,
}

impl ReleaseRequest<'_> {
    /// The scripts' resend flag.
    pub(crate) fn resend_flag(&self) -> &'static str {
        flag(self.resend)
    }

    /// Whether a kind that has a short form may send it: see [`ReleaseRequest::last`].
    pub(crate) fn short(&self) -> bool {
        self.last && !self.resend
    }
}

/// A flag as the scripts read it.
pub(crate) fn flag(on: bool) -> &'static str {
    if on { "1" } else { "0" }
}

/// One lock kind's server side: names, and the script call of each operation. The holder runs
/// the calls and reads their replies, which every kind shapes alike.
pub(crate) trait LockOps: Send + Sync + fmt::Debug + 'static {
    /// The lock's name (its main key).
    fn name(&self) -> &Arc<str>;
    /// Which kind of lock (part of the order in which MultiLock acquires).
    fn kind(&self) -> &'static str;
    /// The kind as spans and metrics name it (`fenced` and `mutex` are `lock`s to MultiLock).
    fn label(&self) -> &'static str {
        self.kind()
    }
    /// The channel `owner` waits on.
    fn channel(&self, owner: &str) -> String;
    /// Where the owner's holds live, for the watchdog.
    fn renewal(&self, owner: &Arc<str>) -> RenewTarget;
    /// Takes a hold; replies as [`run_acquire`] reads (one integer, or `{status, value}`).
    /// `waiting`: the caller waits when refused (a fair lock queues it; others ignore it).
    /// `stale`: the client knows of no live hold of the owner on this side, so a hold the
    /// server still has for it is a leftover (a release or repair whose outcome never reached
    /// the client) and must be replaced by a fresh grant with a new token, never answered as
    /// reentrant.
    fn acquire(&self, owner: &str, lease_ms: u64, waiting: bool, stale: bool) -> ScriptCall;
    /// Gives back one hold; must be idempotent per request id when `request.resend` is set.
    /// Replies as [`parse_release`] reads.
    fn release(&self, owner: &str, lease_ms: u64, request: ReleaseRequest<'_>) -> ScriptCall;
    /// Sets the owner's hold count on the server to `holds` (0: remove it), never reviving a
    /// hold the server no longer has; remaining holds get a TTL of at least `lease_ms` back.
    /// Replies 1 when it changed something.
    fn repair(&self, owner: &str, holds: u32, lease_ms: u64) -> ScriptCall;
    /// The hash field holding `owner`'s hold count on this side of the lock.
    fn field<'a>(&'a self, owner: &'a str) -> &'a str {
        owner
    }
    /// Frees the lock whoever holds it; replies 1 when it was held.
    fn force_unlock(&self) -> ScriptCall;
    /// The longest a waiter may sleep between two attempts (a fair waiter must keep its place).
    fn max_nap(&self) -> Option<Duration> {
        None
    }
    /// Whether the holder may take a new owner name between two holds (to leave late commands of
    /// the old name behind, see [`leftover`](crate::lock::leftover)): kinds whose owner name no
    /// other handle shares.
    fn rotates(&self) -> bool {
        false
    }
    /// Whether waiters join a queue on the server (and so must leave it when they give up).
    fn queues(&self) -> bool {
        false
    }
    /// Takes a waiter that stops waiting out of the lock's queue; only asked for when
    /// [`queues`](Self::queues) is true.
    fn leave(&self, _owner: &str) -> Option<ScriptCall> {
        None
    }
    /// Whether a release can hand the lock to a waiter of the same client
    /// ([`release_to`](Self::release_to)).
    fn hands_over(&self) -> bool {
        false
    }
    /// Gives back the owner's last hold and grants the lock to `to` with a lease of
    /// `to_lease_ms` in the same step, unless clients other than this one (which has
    /// `own_subscribers` on the lock's channel) wait. Idempotent when `resend` is set. Replies as
    /// [`parse_handover`] reads; `None` for kinds that do not hand over.
    fn release_to(
        &self,
        _owner: &str,
        _to: &str,
        _to_lease_ms: u64,
        _own_subscribers: u8,
        _resend: bool,
    ) -> Option<ScriptCall> {
        None
    }
}

/// When and how an acquire was sent.
#[derive(Debug, Clone, Copy)]
struct Sent {
    at: Instant,
    lease_ms: u64,
    /// The hub's stamp of the lock's channel then (kinds that hand over only).
    stamp: Option<u64>,
}

/// How a grant's lease is kept.
#[derive(Debug, Clone, Copy)]
pub(crate) enum LeaseMode {
    /// The client's watchdog timeout, renewed while a guard lives.
    Watchdog,
    /// A fixed lease in ms, never renewed.
    Fixed(u64),
}

#[derive(Debug, Default)]
pub(crate) struct Holds {
    pub(super) count: u32,
    pub(super) lease: Option<Arc<Lease>>,
    /// What the client knows of leftovers (see [`leftover`](crate::lock::leftover)).
    pub(super) leftovers: Leftovers,
}

impl Holds {
    /// The holds the owner has on the server, as far as the client knows.
    pub(crate) fn count(&self) -> u32 {
        self.count
    }

    /// Whether the owner holds the lock with a lease not known to be lost: only then may an
    /// acquire be answered as one more hold of it (sharing its token).
    fn live(&self) -> bool {
        self.count > 0 && self.lease.as_ref().is_some_and(|l| !l.is_lost())
    }
}

pub(crate) struct Holder {
    pub(crate) core: Arc<Core>,
    pub(crate) ops: Box<dyn LockOps>,
    /// Who this holder is in Redis; replaced only while it holds nothing (see
    /// [`leftover`](crate::lock::leftover)).
    identity: std::sync::Mutex<Identity>,
    pub(super) holds: Arc<Mutex<Holds>>,
    /// Set while the owner may be tainted (see [`leftover`](crate::lock::leftover)).
    pub(super) tainted: Arc<std::sync::atomic::AtomicBool>,
    /// Acquires of this holder under way (clones share the holder): the owner name is only
    /// replaced when no other one is, since a waiter lines up under the name it started with.
    pub(super) acquiring: std::sync::atomic::AtomicUsize,
}

/// An owner name and the channel its waits listen on.
#[derive(Debug)]
struct Identity {
    owner: Arc<str>,
    channel: Arc<str>,
}

impl fmt::Debug for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Holder")
            .field("name", self.ops.name())
            .field("owner", &self.owner())
            .finish_non_exhaustive()
    }
}

impl Holder {
    /// A holder with a fresh owner.
    pub(crate) fn new(core: Arc<Core>, ops: Box<dyn LockOps>) -> Self {
        let owner = core.owners.next_owner();
        Self::with_owner(core, ops, owner)
    }

    /// A holder for an owner that already has one on another part of the same lock (the read
    /// and write sides of a read-write lock are one owner).
    pub(crate) fn with_owner(core: Arc<Core>, ops: Box<dyn LockOps>, owner: Arc<str>) -> Self {
        let identity = Identity {
            channel: ops.channel(&owner).into(),
            owner,
        };
        let holds = Holds::default();
        Holder {
            core,
            ops,
            identity: std::sync::Mutex::new(identity),
            tainted: holds.leftovers.hint(),
            holds: Arc::new(Mutex::new(holds)),
            acquiring: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    fn identity(&self) -> std::sync::MutexGuard<'_, Identity> {
        // Every change under this lock is one assignment.
        self.identity.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The owner this holder is in Redis now.
    pub(crate) fn owner(&self) -> Arc<str> {
        self.identity().owner.clone()
    }

    /// The channel this holder's waits listen on now.
    pub(super) fn channel(&self) -> Arc<str> {
        self.identity().channel.clone()
    }

    /// Becomes `owner` from now on; returns the owner it was.
    pub(super) fn set_owner(&self, owner: Arc<str>) -> Arc<str> {
        let channel = self.ops.channel(&owner).into();
        let mut identity = self.identity();
        identity.channel = channel;
        std::mem::replace(&mut identity.owner, owner)
    }

    pub(crate) fn inner(&self) -> &Core {
        &self.core
    }

    pub(crate) fn name(&self) -> &str {
        self.ops.name()
    }

    /// Acquires, waiting at most `wait` (`None`: for ever); `observed` counts the attempts.
    pub(crate) async fn acquire_observed(
        self: &Arc<Self>,
        mode: LeaseMode,
        wait: Option<Duration>,
        observed: &crate::observe::Acquire,
    ) -> Result<Option<LockGuard>> {
        let _acquiring = Acquiring::new(self);
        self.retire_if_tainted().await;
        let (owner, channel) = {
            let identity = self.identity();
            (identity.owner.clone(), identity.channel.clone())
        };
        let waiting = wait != Some(Duration::ZERO);
        // A queued waiter that stops waiting leaves the queue, even when dropped mid-wait.
        let queues = waiting && self.ops.queues();
        let mut queued = Queued {
            holder: self,
            armed: queues,
        };
        let max_nap = self.ops.max_nap();
        let lease_ms = self.lease_ms(mode);
        // Waiters of kinds that hand over line up locally, so a release of this client can
        // give them the lock directly.
        let register = || {
            (waiting && self.ops.hands_over()).then(|| {
                self.inner()
                    .local_waiters
                    .register(self.ops.name(), &owner, &self.holds, lease_ms)
            })
        };
        // The releasing owner made the lease (and told the client who holds the lock), for the
        // owner name this waiter lined up under.
        let handed = |hold: HandedHold| {
            let (holds, lease) = hold.accept();
            self.guard_on(holds, &owner, lease, mode)
        };
        let result = wait::acquire(
            self.inner(),
            &channel,
            wait,
            max_nap,
            |ask_server| async move {
                observed.attempt_started();
                let answer = self.attempt(mode, waiting, ask_server).await;
                observed.attempt_answered(&answer);
                answer
            },
            register,
            handed,
        )
        .await;
        queued.armed = false;
        if queues && !matches!(result, Ok(Some(_))) {
            self.leave_queue().await;
        }
        result
    }

    pub(super) async fn leave_queue(&self) {
        let Some(call) = self.ops.leave(&self.owner()) else {
            return;
        };
        if let Err(e) = self.inner().executor.run::<i64>(&call, self.name()).await {
            tracing::warn!(lock = %self.name(), error = %e, "could not leave the queue; the place expires with the queue timeout");
        }
    }

    pub(crate) async fn inspect(&self) -> Result<Inspection> {
        let owner = self.owner();
        inspect_field(self.inner(), self.name(), self.ops.field(&owner)).await
    }

    pub(crate) async fn force_unlock(&self) -> Result<bool> {
        let result = run_force_unlock(self.inner(), &self.ops.force_unlock(), self.name()).await;
        if self.ops.hands_over() {
            // Whether or not the reply came, the local holder's view may be wrong now.
            self.inner().local_waiters.forget(self.name());
        }
        result
    }

    /// Sets `owner`'s hold count on the server to `holds` (see [`LockOps::repair`]).
    pub(super) async fn repair_to(&self, owner: &str, holds: u32, lease_ms: u64) -> Result<()> {
        let call = self.ops.repair(owner, holds, lease_ms);
        let changed: i64 = self.inner().executor.run(&call, self.name()).await?;
        if changed == 1 {
            tracing::debug!(lock = %self.name(), holds, "hold count repaired");
        }
        Ok(())
    }

    fn lease_ms(&self, mode: LeaseMode) -> u64 {
        match mode {
            LeaseMode::Watchdog => self.inner().watchdog.lease().as_millis() as u64,
            LeaseMode::Fixed(ms) => ms,
        }
    }

    /// One acquire attempt. For a caller that waits, and unless `ask_server`, a lock another
    /// owner of this client holds is answered "busy" locally: the caller lines up and the holder
    /// hands the lock over or publishes. A caller that does not wait always asks Redis, which
    /// also knows of a lock freed behind the holder's back (forced open by another client,
    /// deleted).
    async fn attempt(
        self: &Arc<Self>,
        mode: LeaseMode,
        waiting: bool,
        ask_server: bool,
    ) -> Result<Attempt<LockGuard>> {
        let lease_ms = self.lease_ms(mode);
        // Taken before the acquire is sent: a grant recorded with it is trusted by this
        // client's other owners only while nothing was published on the channel since.
        let mut stamp = None;
        if self.ops.hands_over() {
            let identity = self.identity();
            stamp = self.inner().hub.stamp(&identity.channel);
            if waiting
                && !ask_server
                && let Some(left) =
                    self.inner()
                        .local_waiters
                        .held_by_other(self.name(), &identity.owner, stamp)
            {
                // Another owner of this client holds it: it hands the lock over or publishes.
                return Ok(Attempt::Busy { ttl: Some(left) });
            }
        }
        let holds = self.holds.clone().lock_owned().await;
        // Read under the holds' lock: the owner is only replaced under it.
        let owner = self.owner();
        // Without a live hold of its own the owner must get a fresh grant: whatever the server
        // still counts for it is a leftover the client lost track of.
        let mut stale = !holds.live();
        // From here on the script may run: if this future is dropped, the repair runs instead.
        let mut in_flight = InFlight {
            holder: self.clone(),
            holds: Some(holds),
            lease_ms,
        };
        let mut asked_again = false;
        loop {
            let sent_at = Instant::now();
            let call = self.ops.acquire(&owner, lease_ms, waiting, stale);
            match run_acquire(self.inner(), &call, self.name()).await {
                Ok(Acquired::Granted { fresh: false, .. })
                    if !in_flight.holds.as_ref().is_some_and(|h| h.live()) =>
                {
                    if stale {
                        in_flight.repair().await;
                        in_flight.disarm();
                        return Err(Error::unexpected(
                            "a reentrant grant answered an acquire that asked for a fresh one",
                        ));
                    }
                    // The lease ran out here while the grant was on its way: its token belongs
                    // to guards already told they lost the lock. Ask again for a fresh grant.
                    stale = true;
                }
                Ok(Acquired::Granted { token, fresh }) => {
                    let holds = in_flight.disarm();
                    let sent = Sent {
                        at: sent_at,
                        lease_ms,
                        stamp,
                    };
                    return Ok(Attempt::Granted(
                        self.grant(holds, &owner, token, fresh, sent, mode),
                    ));
                }
                Ok(Acquired::Busy { ttl }) => {
                    let mut holds = in_flight.disarm();
                    if holds.count > 0 {
                        // Somebody else holds what we thought we held: our hold is gone.
                        if let Some(old) = holds.lease.take() {
                            old.mark_lost();
                            self.inner().local_waiters.releasing(self.name(), &old);
                        }
                        holds.count = 0;
                    }
                    return Ok(Attempt::Busy { ttl });
                }
                Ok(Acquired::NotSynced { acked, wanted }) => {
                    // Undo the grant: back to the holds the client knows of.
                    in_flight.repair().await;
                    in_flight.disarm();
                    tracing::warn!(lock = %self.name(), acked, wanted, "a grant reached too few replicas; undone");
                    return Err(Error::ReplicasNotSynced { acked, wanted });
                }
                Err(e) if e.outcome_unknown() => {
                    let repaired = in_flight.repair().await;
                    if repaired && e.connection_dropped() && !asked_again {
                        // The connection went away under the acquire, and the repair, sent on a
                        // new one, put the server back to what the client knows: the outcome is
                        // settled, so the acquire is asked once more instead of failing the
                        // caller for a reconnect (a restarted Redis, a cut connection).
                        asked_again = true;
                        continue;
                    }
                    in_flight.disarm();
                    return Err(e);
                }
                Err(e) => {
                    in_flight.disarm();
                    return Err(e);
                }
            }
        }
    }

    /// The guard of a grant to `owner` (the holder's owner, read under `holds`).
    fn grant(
        self: &Arc<Self>,
        mut holds: OwnedMutexGuard<Holds>,
        owner: &Arc<str>,
        token: u64,
        fresh: bool,
        sent: Sent,
        mode: LeaseMode,
    ) -> LockGuard {
        let Sent {
            at: sent_at,
            lease_ms,
            stamp,
        } = sent;
        let reentered = match &holds.lease {
            Some(lease) if holds.count > 0 && !fresh && !lease.is_lost() => Some(lease.clone()),
            _ => None,
        };
        let lease = match reentered {
            Some(lease) => {
                lease.extended(sent_at, lease_ms);
                lease
            }
            None => {
                // A fresh grant while we thought we held it: the old hold had expired, and the
                // guards on it must not release the new one.
                if let Some(old) = holds.lease.take() {
                    old.mark_lost();
                }
                holds.count = 0;
                let lease = Arc::new(Lease::new(token, sent_at, lease_ms));
                if self.ops.hands_over() {
                    self.inner()
                        .local_waiters
                        .granted(self.ops.name(), owner, &lease, stamp);
                }
                lease
            }
        };
        self.guard_on(holds, owner, lease, mode)
    }

    /// The guard of one more hold on `lease` of `owner` (the holder's owner, read under
    /// `holds`), registered with the watchdog when renewed.
    fn guard_on(
        self: &Arc<Self>,
        mut holds: OwnedMutexGuard<Holds>,
        owner: &Arc<str>,
        lease: Arc<Lease>,
        mode: LeaseMode,
    ) -> LockGuard {
        holds.count += 1;
        holds.lease = Some(lease.clone());
        drop(holds);

        let renewed = matches!(mode, LeaseMode::Watchdog);
        let labels = self.labels();
        let mut guards = lease.guards();
        guards.live += 1;
        crate::observe::lock_hold_began(&labels, guards.live);
        if renewed {
            guards.renewed += 1;
            if guards.renewal.is_none() {
                guards.renewal = Some(self.inner().watchdog.register(Renewal {
                    target: self.ops.renewal(owner),
                    labels,
                    lease: lease.clone(),
                }));
            }
        }
        drop(guards);
        LockGuard::new(self.clone(), lease, renewed)
    }

    /// A guard of `lease` is gone (unlocked or dropped). The last watchdog-held one stops the
    /// renewal, before its release is sent: holds with a fixed lease are never renewed.
    pub(crate) fn guard_gone(&self, lease: &Lease, renewed: bool) {
        {
            let mut guards = lease.guards();
            guards.live = guards.live.saturating_sub(1);
            crate::observe::lock_hold_ended(&self.labels(), guards.live, lease.granted_at());
        }
        if renewed {
            self.renewing_guard_gone(lease);
        }
    }

    /// One guard of `lease` no longer wants it renewed; the last one stops the renewal.
    /// Returns whether other guards still want it.
    fn renewing_guard_gone(&self, lease: &Lease) -> bool {
        let mut guards = lease.guards();
        guards.renewed = guards.renewed.saturating_sub(1);
        if guards.renewed == 0
            && let Some(id) = guards.renewal.take()
        {
            self.inner().watchdog.deregister(id);
        }
        guards.renewed > 0
    }

    /// Turns a watchdog-renewed guard's hold into one with a fixed lease of `lease_ms` from now
    /// (unless other guards of the same hold still want it renewed: then it is only checked),
    /// and checks on the server that the owner still holds it. `Ok(false)`, with the lease
    /// marked lost, when it does not.
    pub(crate) async fn fix_lease(&self, lease: &Lease, lease_ms: u64) -> Result<bool> {
        let still_renewed = self.renewing_guard_gone(lease);
        let ttl_ms = if still_renewed {
            self.lease_ms(LeaseMode::Watchdog)
        } else {
            lease_ms
        };
        let sent_at = Instant::now();
        let call = self.ops.renewal(&self.owner()).call(ttl_ms);
        let held: Vec<i64> = self.inner().executor.run(&call, self.name()).await?;
        match held.first() {
            Some(1) => {}
            Some(2) => lease.mark_revoked(),
            _ => {
                lease.mark_lost();
                return Ok(false);
            }
        }
        if !still_renewed {
            lease.extended(sent_at, lease_ms);
        }
        Ok(true)
    }
}
