//! The acquisition: one attempt after another until the lock is granted, the wait runs out or
//! the caller gives up (the step after `lock()` in the walk `lock()` → acquisition → script →
//! hub → watchdog → guard). An attempt runs the kind's acquire script for the holder's owner;
//! an answer "busy" waits ([`wait`](crate::lock::wait)) for the hub's wake-up, a handover or
//! the holder's TTL; a grant is registered with the watchdog and becomes the guard. An attempt
//! whose outcome is unknown, or that the caller dropped, repairs the server to the count the
//! client knows ([`in_flight`](crate::lock::in_flight)).

use std::panic::Location;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::OwnedMutexGuard;
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::lease::Lease;
use crate::lock::guard::LockGuard;
use crate::lock::handover::HandedHold;
use crate::lock::holder::{Holder, LeaseMode};
use crate::lock::holds::Holds;
use crate::lock::in_flight::{InFlight, Queued};
use crate::lock::ops::{Nested, Want};
use crate::lock::owner::Side;
use crate::lock::replies::{Acquired, run_acquire};
use crate::lock::scope::Nesting;
use crate::lock::self_wait;
use crate::lock::wait::{self, Attempt};

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
    /// When the server granted it (µs), when that is not its token: a read nested in the
    /// owner's write hold.
    granted_us: Option<u64>,
}

impl Holder {
    /// Acquires, waiting at most `wait` (`None`: for ever); `observed` counts the attempts.
    /// `called_at`: where the caller called the public method, for the warning a wait for a
    /// hold of its own task gets (see [`self_wait`](crate::lock::self_wait)).
    pub(crate) async fn acquire_observed(
        &self,
        mode: LeaseMode,
        wait: Option<Duration>,
        nested: Option<&Nesting>,
        observed: &crate::observe::Acquire,
        called_at: &'static Location<'static>,
    ) -> Result<Option<LockGuard>> {
        // A nested acquisition never waits: its script grants one more hold of the hold it
        // nests in, or answers that hold lost. (Waiting, it would line up behind, or be handed
        // the lock by, another owner of this client, which never answers whether its own hold
        // still stands.)
        let wait = match nested {
            Some(_) => Some(Duration::ZERO),
            None => wait,
        };
        // A client whose presence is in doubt past its grace may have its holds taken over at
        // any moment (see `presence`): a hold taken now would be lost at once. Its presence
        // connections are coming back: wait for them, within the budget (or the reconnect wait).
        let inner = self.inner();
        let settling = inner
            .watchdog
            .presence_settled(wait.unwrap_or(inner.config.reconnect_wait))
            .await;
        let wait = match settling {
            Some(waited) => wait.map(|w| w.saturating_sub(waited)),
            None => wait,
        };
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
        // Set by the first refusal of a wait: the watch of a wait for the waiter's own hold
        // starts then.
        let busy = &AtomicBool::new(false);
        // Pinned where they are made: moved into a combinator, the wait's future (kilobytes)
        // would take its room twice in this one's; and in a block of their own, so that it is
        // gone before the queue is left below.
        let result = {
            let waits = pin!(wait::acquire(
                self.inner(),
                &channel,
                wait,
                wait::Rules {
                    max_nap,
                    starving,
                    courtesy,
                },
                |ask_server, starving, takeover| async move {
                    observed.attempt_started();
                    let want = Want {
                        waiting,
                        stale: false,
                        starving,
                        nested: Nested::No,
                        takeover,
                    };
                    if starving {
                        // Armed before it is sent: an attempt dropped or failed after Redis ran
                        // it may have put the owner in the starving set.
                        armed.store(true, Ordering::Relaxed);
                    }
                    let answer = self.attempt(mode, want, ask_server, nested).await;
                    observed.attempt_answered(&answer);
                    if waiting && matches!(answer, Ok(Attempt::Busy { .. })) {
                        busy.store(true, Ordering::Relaxed);
                    }
                    answer
                },
                register,
                handed,
            ));
            // A nested acquisition works for its hold's owner: it waits for no hold of its own.
            let watched =
                pin!((waiting && nested.is_none()).then(|| self.watch_self_wait(busy, called_at)));
            self_wait::race(waits, watched).await
        };
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
        nested: Option<&Nesting>,
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
        let side = self.ops().side();
        if self.ops().family() == "rw" {
            // A release of the owner's other side still under way (a dropped read guard's,
            // say) goes first: a write acquire must not find read holds being given back.
            let other = match side {
                Side::Main => Side::Write,
                Side::Write => Side::Main,
            };
            let holds = self.owner.holds(other).lock().await;
            // A read nested in a write hold: the write hold must still stand. (Should it go
            // between here and the script, the script finds it gone and answers lost.)
            if nested.is_some_and(|n| n.side == other && !n.held_in(&holds)) {
                return Err(self.lost());
            }
        }
        let holds = self.holds().clone().lock_owned().await;
        // A nested acquisition is one more hold of a hold that stands, checked under the holds'
        // lock that every change of them takes: given back or lost meanwhile, it finds the hold
        // gone instead of asking for a fresh grant under the old owner (which another nested
        // acquisition could then share).
        if nested.is_some_and(|n| n.side == side && !n.held_in(&holds)) {
            return Err(self.lost());
        }
        let owner = &self.owner;
        // Without a live hold of its own the owner must get a fresh grant: whatever the server
        // still counts for it is a leftover the client lost track of.
        want.stale = !holds.live();
        // Nested, the script checks on the server that the hold still stands, in the same call:
        // the client's view lags a force-unlock or a DEL by up to a heartbeat.
        want.nested = match nested {
            None => Nested::No,
            Some(n) if n.side == side => Nested::Same,
            Some(_) => Nested::Other,
        };
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
            let mut granted_us = None;
            let reply = match run_acquire(self.inner(), &call, self.name()).await {
                // A read nested in the owner's write hold: the write hold's token.
                Ok(Acquired::Under { stamp: at }) => match nested {
                    Some(n) => {
                        granted_us = Some(at);
                        Ok(Acquired::Granted {
                            token: n.lease.token(),
                            fresh: true,
                        })
                    }
                    None => Ok(Acquired::Under { stamp: at }),
                },
                other => other,
            };
            match reply {
                Ok(Acquired::Granted { fresh: false, .. })
                    if !in_flight.holds.as_ref().is_some_and(|h| h.live()) =>
                {
                    if want.nested == Nested::Same {
                        // The hold nested in ran out here while the grant was on its way: it
                        // is lost, and so is what would have nested in it.
                        in_flight.repair().await;
                        in_flight.disarm();
                        return Err(self.lost());
                    }
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
                        granted_us,
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
                Ok(Acquired::Under { .. }) => {
                    // Only an acquisition nested in a write hold asks for this: set right.
                    in_flight.repair().await;
                    in_flight.disarm();
                    return Err(Error::unexpected(
                        "a grant under a write hold answered an acquisition nested in none",
                    ));
                }
                Ok(Acquired::Lost) => {
                    // The server has no hold of the owner: the hold this acquisition nests in
                    // was forced open, deleted or ran out. Its guards hear it now rather than
                    // at the next heartbeat. Nested in the owner's hold of the other side (a
                    // read in its write hold), this side's holds may well stand: untouched.
                    let mut holds = in_flight.disarm();
                    if want.nested == Nested::Same {
                        if let Some(old) = holds.lease.take() {
                            old.mark_lost();
                            self.local_waiters().releasing(self.name(), &old);
                        }
                        holds.count = 0;
                    }
                    drop(holds);
                    if let Some(n) = nested {
                        n.lease.mark_lost();
                    }
                    return Err(self.lost());
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
            granted_us,
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
                let lease = Lease::new(token, sent_at, lease_ms);
                let lease = Arc::new(match granted_us {
                    Some(at) => lease.stamped(at),
                    None => lease,
                });
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
}
