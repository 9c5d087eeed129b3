//! The engine under every lock handle: one owner's holds on one lock (the third step of the
//! walk `lock()` → [owner](crate::lock::owner) → holder → script → hub → watchdog → guard).
//!
//! The holder keeps the hold count its owner has on the server, and serializes its round trips
//! through an async mutex so that count and server always move together. When an acquire's
//! outcome is unknown (timeout, dropped connection, cancelled caller) the holder repairs the
//! server to the count it knows, still holding that mutex, so no other operation of the owner
//! can slip in between. A release of the last hold may hand the lock to a waiter of the same
//! client in the same script call (see [`handover`](crate::lock::handover)).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::{Mutex, OwnedMutexGuard};
use tokio::time::Instant;

use crate::core::Core;
use crate::error::{Error, Result};
use crate::lease::Guards;
use crate::lease::Lease;
use crate::lock::guard::LockGuard;
use crate::lock::handle::Handle;
use crate::lock::handover::{HandedHold, LocalWaiters};
use crate::lock::in_flight::{InFlight, Queued};
use crate::lock::leftover::Leftovers;
pub(crate) use crate::lock::ops::LockOps;
use crate::lock::ops::Want;
use crate::lock::owner::{Owner, Side};
use crate::lock::replies::{Acquired, run_acquire};
use crate::lock::wait::{self, Attempt};
use crate::observe::Labels;
use crate::watchdog::{Renewal, Watch};

/// How long past its wait budget a fair waiter that gave up may take to leave the queue before
/// the call returns (the leave goes on in the background then).
const LEAVE_GRACE: Duration = Duration::from_millis(20);

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

/// One owner's holds on one lock, worked through one handle's kind: made for each acquire
/// and kept by its guard, so the release, renewal and repairs of a hold act for the owner that
/// took it, in whatever task they run. Cheap to clone: two pointers.
#[derive(Clone)]
pub(crate) struct Holder {
    pub(crate) handle: Arc<Handle>,
    pub(crate) owner: Arc<Owner>,
}

impl fmt::Debug for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Holder")
            .field("name", self.ops().name())
            .field("owner", self.owner.id())
            .finish_non_exhaustive()
    }
}

impl Holder {
    pub(crate) fn ops(&self) -> &dyn LockOps {
        &*self.handle.ops
    }

    /// The owner's hold count on this side of the lock.
    pub(super) fn holds(&self) -> &Arc<Mutex<Holds>> {
        self.owner.holds(self.ops().side())
    }

    /// The channel this holder's waits listen on.
    pub(super) fn channel(&self) -> Arc<str> {
        self.ops().channel(&self.owner)
    }

    pub(crate) fn inner(&self) -> &Core {
        &self.handle.core
    }

    pub(super) fn local_waiters(&self) -> &Arc<LocalWaiters> {
        &self.handle.locks.local_waiters
    }

    pub(crate) fn name(&self) -> &str {
        self.ops().name()
    }

    /// Acquires, waiting at most `wait` (`None`: for ever); `observed` counts the attempts.
    pub(crate) async fn acquire_observed(
        &self,
        mode: LeaseMode,
        wait: Option<Duration>,
        observed: &crate::observe::Acquire,
    ) -> Result<Option<LockGuard>> {
        let channel = self.channel();
        let waiting = wait != Some(Duration::ZERO);
        let deadline = wait
            .filter(|_| waiting)
            .and_then(|w| Instant::now().checked_add(w));
        // A queued waiter that stops waiting leaves the queue, even when dropped mid-wait; so
        // does one that joined the lock's starving waiters (armed when it does).
        let queues = waiting && self.ops().queues();
        let queued = Queued {
            holder: self,
            armed: AtomicBool::new(queues),
        };
        // Plain locks (the kinds that hand over) give other libraries' waiters the first go.
        let courtesy = waiting && self.ops().hands_over();
        let starving = waiting
            .then(|| self.ops().starves())
            .flatten()
            .map(|after| (after, self.owner.id().clone()));
        let max_nap = self.ops().max_nap();
        let lease_ms = self.lease_ms(mode);
        // Waiters of kinds that hand over line up locally, so a release of this client can
        // give them the lock directly.
        let register = || {
            (waiting && self.ops().hands_over()).then(|| {
                self.local_waiters().register(
                    self.ops().name(),
                    &self.owner,
                    self.holds(),
                    lease_ms,
                )
            })
        };
        // The releasing owner made the lease (and told the client who holds the lock), for the
        // owner name this waiter lined up under.
        let handed = |hold: HandedHold| {
            let (holds, lease) = hold.accept();
            self.guard_on(holds, lease, mode)
        };
        let armed = &queued.armed;
        let hinted = &AtomicBool::new(false);
        let result = wait::acquire(
            self.inner(),
            &channel,
            wait,
            wait::Rules {
                max_nap,
                starving,
                courtesy,
            },
            |ask_server, starving| async move {
                observed.attempt_started();
                let want = Want {
                    waiting,
                    stale: false,
                    starving,
                };
                if starving {
                    // Armed before it is sent: an attempt dropped or failed after Redis ran it
                    // may have put the owner in the starving set.
                    armed.store(true, Ordering::Relaxed);
                }
                let answer = self.attempt(mode, want, ask_server).await;
                observed.attempt_answered(&answer);
                if waiting
                    && matches!(answer, Ok(Attempt::Busy { .. }))
                    && !hinted.swap(true, Ordering::Relaxed)
                {
                    self.hint_if_own_hold();
                }
                answer
            },
            register,
            handed,
        )
        .await;
        let joined = queued.armed.swap(false, Ordering::Relaxed);
        let granted = matches!(result, Ok(Some(_)));
        if joined && !queues && !granted {
            // A starving waiter leaves in the background (see `leave_queue`); a grant took
            // its entry out already.
            let holder = self.clone();
            self.inner()
                .spawn(async move { holder.leave_queue().await });
        } else if joined && !granted {
            match deadline {
                // Within the budget (and a moment: a leave takes one round trip); past it, the
                // leave goes on in the background (`queued` spawns it when dropped armed).
                Some(d) => {
                    queued.armed.store(true, Ordering::Relaxed);
                    let until = d.max(Instant::now()) + LEAVE_GRACE;
                    if tokio::time::timeout_at(until, self.leave_queue())
                        .await
                        .is_ok()
                    {
                        queued.armed.store(false, Ordering::Relaxed);
                    }
                }
                None => self.leave_queue().await,
            }
        }
        result
    }

    /// Warns once per wait (and at most once per lock every 10 s) when the lock is held by an
    /// acquisition of the waiter's own task (else thread): code ported from Java often expects
    /// such a `lock()` to be reentrant. A hint only: a future polled beside the holder, or a
    /// dispatcher whose guards went to workers, may well mean to wait.
    fn hint_if_own_hold(&self) {
        if self
            .inner()
            .watchdog
            .held_in(self.name(), self.owner.asker())
            && self.handle.locks.hint_due(self.ops().name())
        {
            tracing::warn!(
                lock = %self.name(),
                "this acquisition waits for a hold taken in the same task or thread; every \
                 acquisition is an owner of its own, so a lock() nested in a hold's work outside \
                 its scope waits for it. To nest, run the work inside `with_lock` or \
                 `guard.scope(..)`, or take one more hold with `guard.reenter()`; a future \
                 polled beside the holder (join!, select!, buffer_unordered) waits as meant"
            );
        }
    }

    pub(super) async fn leave_queue(&self) {
        let Some(call) = self.ops().leave(&self.owner) else {
            return;
        };
        // A starving waiter's leave also gives back a hold handed to it meanwhile, which it
        // tells from a hold of its own by holding nothing: no other operation of the owner may
        // run until the leave is answered, and one whose outcome is unknown taints the owner
        // (a late leave must never meet a later grant of the name). It runs in the background
        // (see `acquire_observed`), so nothing cancels it half way.
        let mut holds = match self.ops().queues() {
            true => None,
            false => Some(self.holds().clone().lock_owned().await),
        };
        if holds.as_ref().is_some_and(|h| h.count() != 0) {
            return;
        }
        if let Err(e) = self.inner().executor.run::<i64>(&call, self.name()).await {
            tracing::warn!(lock = %self.name(), error = %e, "could not leave the queue; the place expires with the queue timeout");
            if let Some(holds) = holds.as_mut()
                && e.outcome_unknown()
            {
                let lease_ms = self.inner().config.starvation.handoff.as_millis() as u64;
                self.taint(holds, lease_ms);
            }
        }
        drop(holds);
    }

    /// Sets `owner`'s hold count on the server to `holds` (see [`LockOps::repair`]).
    pub(super) async fn repair_to(&self, owner: &Owner, holds: u32, lease_ms: u64) -> Result<()> {
        let call = self.ops().repair(owner, holds, lease_ms);
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
        &self,
        mode: LeaseMode,
        mut want: Want,
        ask_server: bool,
    ) -> Result<Attempt<LockGuard>> {
        let waiting = want.waiting;
        let lease_ms = self.lease_ms(mode);
        // Taken before the acquire is sent: a grant recorded with it is trusted by this
        // client's other owners only while nothing was published on the channel since.
        let mut stamp = None;
        if self.ops().hands_over() {
            stamp = self.inner().hub.stamp(&self.channel());
            if waiting
                && !ask_server
                && let Some(left) =
                    self.local_waiters()
                        .held_by_other(self.name(), self.owner.id(), stamp)
            {
                // Another owner of this client holds it: it hands the lock over or publishes.
                return Ok(Attempt::Busy { ttl: Some(left) });
            }
        }
        if self.ops().family() == "rw" {
            // A release of the owner's other side still under way (a dropped read guard's,
            // say) goes first: a write acquire must not find read holds being given back.
            let other = match self.ops().side() {
                Side::Main => Side::Write,
                Side::Write => Side::Main,
            };
            drop(self.owner.holds(other).lock().await);
        }
        let holds = self.holds().clone().lock_owned().await;
        let owner = &self.owner;
        // Without a live hold of its own the owner must get a fresh grant: whatever the server
        // still counts for it is a leftover the client lost track of.
        want.stale = !holds.live();
        // From here on the script may run: if this future is dropped, the repair runs instead.
        // Declared before the acquire's future, which is dropped first: a call of it given up
        // on inside a list is registered as unsettled before this guard spawns the repair, which
        // then waits for that list's reply (src/script/commit.rs).
        let mut in_flight = InFlight {
            holder: self.clone(),
            holds: Some(holds),
            lease_ms,
        };
        let mut asked_again = false;
        loop {
            let sent_at = Instant::now();
            let call = self.ops().acquire(owner, lease_ms, want);
            match run_acquire(self.inner(), &call, self.name()).await {
                Ok(Acquired::Granted { fresh: false, .. })
                    if !in_flight.holds.as_ref().is_some_and(|h| h.live()) =>
                {
                    if want.stale {
                        in_flight.repair().await;
                        in_flight.disarm();
                        return Err(Error::unexpected(
                            "a reentrant grant answered an acquire that asked for a fresh one",
                        ));
                    }
                    // The lease ran out here while the grant was on its way: its token belongs
                    // to guards already told they lost the lock. Ask again for a fresh grant.
                    want.stale = true;
                }
                Ok(Acquired::Granted { token, fresh }) => {
                    let holds = in_flight.disarm();
                    let sent = Sent {
                        at: sent_at,
                        lease_ms,
                        stamp,
                    };
                    return Ok(Attempt::Granted(
                        self.grant(holds, token, fresh, sent, mode),
                    ));
                }
                Ok(Acquired::Busy { ttl }) => {
                    let mut holds = in_flight.disarm();
                    if holds.count > 0 {
                        // Somebody else holds what we thought we held: our hold is gone.
                        if let Some(old) = holds.lease.take() {
                            old.mark_lost();
                            self.local_waiters().releasing(self.name(), &old);
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

    /// The guard of a grant to the holder's owner.
    fn grant(
        &self,
        mut holds: OwnedMutexGuard<Holds>,
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
                if self.ops().hands_over() {
                    self.local_waiters()
                        .granted(self.ops().name(), self.owner.id(), &lease, stamp);
                }
                lease
            }
        };
        self.guard_on(holds, lease, mode)
    }

    /// The guard of one more hold on `lease` of the holder's owner, registered with the
    /// watchdog when renewed.
    fn guard_on(
        &self,
        mut holds: OwnedMutexGuard<Holds>,
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
        }
        self.keep_watch(&lease, &mut guards, labels);
        drop(guards);
        LockGuard::new(self.clone(), lease, renewed)
    }

    /// Keeps `lease`'s watchdog registration in line with its guards: renewed while a guard
    /// wants it renewed, else re-checked after connection changes while any guard lives (a
    /// fixed lease), else none.
    fn keep_watch(&self, lease: &Arc<Lease>, guards: &mut Guards, labels: Labels) {
        let wanted = if guards.renewed > 0 {
            Some(Watch::Renew)
        } else if guards.live > 0 {
            Some(Watch::Check)
        } else {
            None
        };
        if guards.watch.map(|(_, how)| how) == wanted {
            return;
        }
        let watchdog = &self.inner().watchdog;
        if let Some((id, _)) = guards.watch.take() {
            watchdog.deregister(id);
        }
        if let Some(how) = wanted {
            let renewal = Renewal {
                target: self.ops().renewal(&self.owner),
                asker: Some(self.owner.asker()),
                labels,
                lease: lease.clone(),
            };
            guards.watch = Some((watchdog.watch(renewal, how), how));
        }
    }

    /// A guard of `lease` is gone (unlocked or dropped). The last watchdog-held one stops the
    /// renewal, before its release is sent: holds with a fixed lease are never renewed.
    pub(crate) fn guard_gone(&self, lease: &Arc<Lease>, renewed: bool) {
        let labels = self.labels();
        let mut guards = lease.guards();
        guards.live = guards.live.saturating_sub(1);
        crate::observe::lock_hold_ended(&labels, guards.live, lease.granted_at());
        if renewed {
            guards.renewed = guards.renewed.saturating_sub(1);
        }
        self.keep_watch(lease, &mut guards, labels);
    }

    /// Turns a watchdog-renewed guard's hold into one with a fixed lease of `lease_ms` from now
    /// (unless other guards of the same hold still want it renewed: then it is only checked),
    /// and checks on the server that the owner still holds it. `Ok(false)`, with the lease
    /// marked lost, when it does not.
    pub(crate) async fn fix_lease(&self, lease: &Arc<Lease>, lease_ms: u64) -> Result<bool> {
        // Renewals go over the client thread's own connection: one still on its way when the
        // fixed lease is set would set the watchdog's lease over it. So the renewal is
        // stopped, and any on its way awaited, before the fixed lease goes out.
        let (still_renewed, renewing) = {
            let mut guards = lease.guards();
            guards.renewed = guards.renewed.saturating_sub(1);
            let renewing = match guards.watch {
                Some((id, Watch::Renew)) if guards.renewed == 0 => {
                    guards.watch = None;
                    Some(id)
                }
                _ => None,
            };
            (guards.renewed > 0, renewing)
        };
        if let Some(id) = renewing {
            self.inner().watchdog.deregister_settled(id).await;
        }
        // Checked from now on, while a guard lives.
        self.keep_watch(lease, &mut lease.guards(), self.labels());
        let ttl_ms = if still_renewed {
            self.lease_ms(LeaseMode::Watchdog)
        } else {
            lease_ms
        };
        let sent_at = Instant::now();
        let target = self.ops().renewal(&self.owner);
        let held: Vec<i64> = self
            .inner()
            .executor
            .run(&target.call(ttl_ms), self.name())
            .await?;
        match held.first().and_then(|a| target.answer(*a, lease)) {
            Some(false) => {}
            Some(true) => lease.mark_revoked(),
            None => {
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
