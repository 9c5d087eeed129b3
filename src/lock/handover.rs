//! A client's own waiters, per lock, so that a release can hand the lock straight to one of
//! them in the release's round trip instead of freeing it and letting the waiter ask again.
//!
//! Under contention inside one process this turns "release, publish, wake, acquire" (two round
//! trips and a pub/sub message per acquisition, with the releaser's next `lock()` usually
//! winning the race) into one round trip per acquisition, in FIFO order among the client's
//! waiters. The release script only hands over when no other client waits on the lock's
//! channel, so waiters elsewhere are never passed over by a chain of local handovers.
//!
//! The client also remembers which of its owners holds each such lock, from the grant until its
//! last release is sent. Another owner of the client that asks meanwhile is answered "busy"
//! without a round trip and lines up at once: the holder will hand it the lock, or publish the
//! unlock it waits for. Its nap is bounded by the holder's lease deadline, so a hold that runs
//! out without a release still ends the wait.
//!
//! A waiter can be offered the lock only while it naps (never with an attempt in flight, which
//! could otherwise race the handover), and the offer locks the waiter's hold count until it is
//! settled, so no other operation of that owner runs meanwhile. An offer whose outcome is
//! unknown (the release failed or was cancelled) takes the waiter's possible hold back off the
//! server before the waiter may try again.

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use std::time::Duration;

use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard, oneshot};
use tokio::time::Instant;

use crate::lease::Lease;
use crate::lock::holds::Holds;
use crate::lock::owner::Owner;
use crate::map::Map;

/// What a napping waiter learns from the release that picked it.
#[derive(Debug)]
pub(crate) enum Handed {
    /// The lock is the waiter's: one hold.
    Granted(HandedHold),
    /// Not handed over, and nothing published (the releaser's hold was gone, or it had
    /// several): try at once.
    Declined,
    /// Not handed over because waiters of other clients wait: the lock was freed (or handed
    /// to a starving waiter) and the unlock message published. The waiter goes on napping and
    /// hears the message as those waiters do, so the releasing client gets no head start.
    Freed,
}

/// Gives a handed-over hold back when dropped unaccepted.
pub(crate) type Undo = Box<dyn FnOnce(OwnedMutexGuard<Holds>) + Send>;

/// A hold the server gave a waiter by handover, on its way to the waiter. The waiter accepts it
/// (and makes a guard of it); dropped unaccepted, because the waiter stopped waiting after the
/// handover ran, it gives the hold back, so no hold is left that nobody would release.
pub(crate) struct HandedHold {
    holds: Option<OwnedMutexGuard<Holds>>,
    lease: Arc<Lease>,
    undo: Option<Undo>,
}

impl fmt::Debug for HandedHold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandedHold")
            .field("token", &self.lease.token())
            .finish_non_exhaustive()
    }
}

impl HandedHold {
    /// The waiter takes the hold: its hold count (locked) and the lease.
    pub(crate) fn accept(mut self) -> (OwnedMutexGuard<Holds>, Arc<Lease>) {
        self.undo = None;
        let holds = self.holds.take().expect("a handed hold is accepted once");
        (holds, self.lease.clone())
    }
}

impl Drop for HandedHold {
    fn drop(&mut self) {
        if let (Some(undo), Some(holds)) = (self.undo.take(), self.holds.take()) {
            undo(holds);
        }
    }
}

/// Where a waiter stands, as a release sees it.
#[derive(Debug)]
enum SlotState {
    /// Attempting, or between attempts but not napping yet: not eligible.
    Busy,
    /// Napping: a release may take the sender and offer the lock.
    Napping(oneshot::Sender<Handed>),
    /// A release took it; the waiter waits for the outcome.
    Offered,
}

#[derive(Debug)]
struct Slot {
    id: u64,
    owner: Arc<Owner>,
    holds: Arc<AsyncMutex<Holds>>,
    lease_ms: u64,
    state: Mutex<SlotState>,
    /// The waiter joined the lock's starving waiters on the server.
    starving: AtomicBool,
}

impl Slot {
    fn state(&self) -> MutexGuard<'_, SlotState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The client's waiters per lock name (only kinds whose release can hand over register).
#[derive(Debug, Default)]
pub(crate) struct LocalWaiters {
    queues: Mutex<Map<Arc<str>, VecDeque<Arc<Slot>>>>,
    /// Per lock name, the owner of this client holding it and its lease.
    held: Mutex<Map<Arc<str>, LocalHold>>,
    next_id: AtomicU64,
}

/// A hold of one of the client's owners.
#[derive(Debug)]
struct LocalHold {
    owner: Arc<str>,
    lease: Arc<Lease>,
    /// The hub's stamp of the lock's channel just before the grant was sent (`None`: not
    /// subscribed then). While the stamp is unchanged, nobody can have unlocked the lock
    /// behind the client's back without the client hearing of it.
    stamp: Option<u64>,
}

/// Below this much lease left, a local holder is not trusted to still hold the lock.
const HELD_MARGIN: Duration = Duration::from_millis(2);

impl LocalWaiters {
    fn queues(&self) -> MutexGuard<'_, Map<Arc<str>, VecDeque<Arc<Slot>>>> {
        // Every change under this lock is a single push, removal or state swap.
        self.queues.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn held(&self) -> MutexGuard<'_, Map<Arc<str>, LocalHold>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `owner` was granted `name` anew, under `lease`, by a script sent when the hub's stamp of
    /// the lock's channel was `stamp`.
    pub(crate) fn granted(
        &self,
        name: &Arc<str>,
        owner: &Arc<str>,
        lease: &Arc<Lease>,
        stamp: Option<u64>,
    ) {
        let hold = LocalHold {
            owner: owner.clone(),
            lease: lease.clone(),
            stamp,
        };
        self.held().insert(name.clone(), hold);
    }

    /// The hold under `lease` is about to be given back (or is gone): from now on nobody
    /// relies on it.
    pub(crate) fn releasing(&self, name: &str, lease: &Lease) {
        let mut held = self.held();
        if held
            .get(name)
            .is_some_and(|h| std::ptr::eq(Arc::as_ptr(&h.lease), lease))
        {
            held.remove(name);
        }
    }

    /// The lock was forced open: whoever of this client held it holds it no more.
    pub(crate) fn forget(&self, name: &str) {
        self.held().remove(name);
    }

    /// When another owner of this client holds `name` with a live lease, how long that lease
    /// has left: asking Redis would only hear "busy". Only trusted while the hub has been
    /// subscribed to the lock's channel since before that hold was granted and heard nothing
    /// there (`stamp`, the channel's stamp now, equals the one taken then): otherwise another
    /// client may have forced the lock open or deleted it, and only Redis knows.
    pub(crate) fn held_by_other(
        &self,
        name: &str,
        owner: &str,
        stamp: Option<u64>,
    ) -> Option<Duration> {
        let held = self.held();
        let hold = held.get(name)?;
        if &*hold.owner == owner || hold.lease.is_lost() || stamp.is_none() || hold.stamp != stamp {
            return None;
        }
        let left = hold
            .lease
            .deadline()
            .saturating_duration_since(Instant::now());
        (left > HELD_MARGIN).then_some(left)
    }

    /// Puts a waiter at the back of `name`'s queue; it stays there (keeping its place across
    /// attempts) until the registration is dropped.
    pub(crate) fn register(
        self: &Arc<Self>,
        name: &Arc<str>,
        owner: &Arc<Owner>,
        holds: &Arc<AsyncMutex<Holds>>,
        lease_ms: u64,
    ) -> Registration {
        let slot = Arc::new(Slot {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            owner: owner.clone(),
            holds: holds.clone(),
            lease_ms,
            state: Mutex::new(SlotState::Busy),
            starving: AtomicBool::new(false),
        });
        self.queues()
            .entry(name.clone())
            .or_default()
            .push_back(slot.clone());
        Registration {
            waiters: self.clone(),
            name: name.clone(),
            slot,
        }
    }

    /// Picks the first napping waiter of `name`, other than `releaser`, whose owner holds
    /// nothing and has no operation under way, and takes it out of the running until the
    /// returned offer is settled.
    pub(crate) fn offer(&self, name: &str, releaser: &str) -> Option<Offer> {
        let queues = self.queues();
        let queue = queues.get(name)?;
        for slot in queue {
            if **slot.owner.id() == *releaser {
                continue;
            }
            let mut state = slot.state();
            if !matches!(*state, SlotState::Napping(_)) {
                continue;
            }
            let Ok(holds) = slot.holds.clone().try_lock_owned() else {
                continue;
            };
            if holds.count() != 0 {
                continue;
            }
            let SlotState::Napping(reply) = std::mem::replace(&mut *state, SlotState::Offered)
            else {
                unreachable!("checked above");
            };
            return Some(Offer {
                owner: slot.owner.clone(),
                lease_ms: slot.lease_ms,
                starving: slot.starving.load(Ordering::Relaxed),
                holds,
                reply,
            });
        }
        None
    }
}

/// A waiter's place in its lock's local queue. Dropping it leaves the queue.
#[derive(Debug)]
pub(crate) struct Registration {
    waiters: Arc<LocalWaiters>,
    name: Arc<str>,
    slot: Arc<Slot>,
}

/// What the waiter does next.
#[derive(Debug)]
pub(crate) enum Turn {
    /// Nobody offered it the lock: attempt.
    Attempt,
    /// A release is handing it the lock: wait for the outcome on this receiver.
    Offered(oneshot::Receiver<Handed>),
}

impl Registration {
    /// The waiter naps: from now a release may offer it the lock, answering on the receiver.
    pub(crate) fn nap(&self) -> oneshot::Receiver<Handed> {
        let (tx, rx) = oneshot::channel();
        *self.slot.state() = SlotState::Napping(tx);
        rx
    }

    /// The nap is over (woken or timed out): unless a release already took this waiter,
    /// it becomes ineligible and attempts. `rx` is the nap's receiver.
    pub(crate) fn wake(&self, rx: oneshot::Receiver<Handed>) -> Turn {
        let mut state = self.slot.state();
        match *state {
            SlotState::Offered => Turn::Offered(rx),
            _ => {
                *state = SlotState::Busy;
                Turn::Attempt
            }
        }
    }

    /// The waiter joined the lock's starving waiters: a handover to it takes it out of them.
    pub(crate) fn starving(&self) {
        self.slot.starving.store(true, Ordering::Relaxed);
    }

    /// The offer this waiter received was settled (granted, declined or abandoned).
    pub(crate) fn settled(&self) {
        *self.slot.state() = SlotState::Busy;
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut queues = self.waiters.queues();
        if let Some(queue) = queues.get_mut(&self.name) {
            queue.retain(|s| s.id != self.slot.id);
            if queue.is_empty() {
                queues.remove(&self.name);
            }
        }
    }
}

/// A waiter picked by a release. Settle it with [`granted`](Self::granted) or
/// [`declined`](Self::declined); dropped unsettled (the release failed or was cancelled), it
/// must be [`abandon`](Self::abandon)ed by its owner, which knows how to take the waiter's
/// possible hold back.
#[derive(Debug)]
pub(crate) struct Offer {
    pub(crate) owner: Arc<Owner>,
    pub(crate) lease_ms: u64,
    /// The waiter joined the lock's starving waiters.
    pub(crate) starving: bool,
    holds: OwnedMutexGuard<Holds>,
    reply: oneshot::Sender<Handed>,
}

impl Offer {
    /// The handover ran: the waiter holds the lock under `lease`. If the waiter is gone, or
    /// goes before it takes the hold, `undo` gives the hold back.
    pub(crate) fn granted(self, lease: Arc<Lease>, undo: Undo) {
        let hold = HandedHold {
            holds: Some(self.holds),
            lease,
            undo: Some(undo),
        };
        // A failed send drops the hold, which undoes it.
        let _ = self.reply.send(Handed::Granted(hold));
    }

    /// The handover did not run and nothing was published: the waiter tries on its own at
    /// once.
    pub(crate) fn declined(self) {
        drop(self.holds);
        let _ = self.reply.send(Handed::Declined);
    }

    /// The handover did not run because others wait: the release freed the lock (or handed
    /// it to a starving waiter) and published. The waiter hears the message as they do.
    pub(crate) fn freed(self) {
        drop(self.holds);
        let _ = self.reply.send(Handed::Freed);
    }

    /// The handover's outcome is unknown. Returns the waiter's owner and hold count guard, to
    /// be kept while its possible hold is taken back. The waiter is told at once that it was
    /// not handed the lock; its own next attempt waits for that guard, so it runs after the
    /// take-back.
    pub(crate) fn abandon(self) -> (Arc<Owner>, OwnedMutexGuard<Holds>, u64) {
        drop(self.reply);
        (self.owner, self.holds, self.lease_ms)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use super::*;

    /// A napping waiter; "client:1" is another owner, a releaser.
    fn waiting(waiters: &Arc<LocalWaiters>) -> (Registration, oneshot::Receiver<Handed>) {
        let owners = crate::owner::Owners::new(uuid::Uuid::new_v4());
        let waiter = Owner::single(&owners, &Arc::from("lock"));
        let registration = waiters.register(&Arc::from("lock"), &waiter, &Arc::default(), 30_000);
        let rx = registration.nap();
        (registration, rx)
    }

    fn undo_flag() -> (Arc<AtomicBool>, Undo) {
        let flag = Arc::new(AtomicBool::new(false));
        let set = flag.clone();
        (flag, Box::new(move |_| set.store(true, Ordering::SeqCst)))
    }

    /// A napping waiter, picked by a release that then hands it a hold.
    fn handed(
        waiters: &Arc<LocalWaiters>,
    ) -> (Registration, oneshot::Receiver<Handed>, Arc<AtomicBool>) {
        let (registration, rx) = waiting(waiters);
        let offer = waiters.offer("lock", "client:1").expect("a napping waiter");
        let (undone, undo) = undo_flag();
        offer.granted(Arc::new(Lease::new(7, Instant::now(), 30_000)), undo);
        (registration, rx, undone)
    }

    #[tokio::test]
    async fn a_hold_handed_to_a_waiter_that_never_takes_it_is_undone() {
        let waiters = Arc::new(LocalWaiters::default());

        // Gone before the grant was sent.
        let (registration, rx) = waiting(&waiters);
        let offer = waiters.offer("lock", "client:1").expect("a napping waiter");
        drop(rx);
        let (undone, undo) = undo_flag();
        offer.granted(Arc::new(Lease::new(7, Instant::now(), 30_000)), undo);
        assert!(undone.load(Ordering::SeqCst));
        drop(registration);

        // Gone after it was sent, before reading it.
        let (registration, rx, undone) = handed(&waiters);
        assert!(!undone.load(Ordering::SeqCst));
        drop(rx);
        assert!(undone.load(Ordering::SeqCst));
        drop(registration);

        // Read but not accepted.
        let (registration, mut rx, undone) = handed(&waiters);
        let hold = rx.try_recv().unwrap();
        assert!(!undone.load(Ordering::SeqCst));
        drop(hold);
        assert!(undone.load(Ordering::SeqCst));
        drop(registration);

        // Accepted: the waiter owns it now.
        let (registration, mut rx, undone) = handed(&waiters);
        let Ok(Handed::Granted(hold)) = rx.try_recv() else {
            panic!("granted");
        };
        let (_holds, lease) = hold.accept();
        assert_eq!(lease.token(), 7);
        assert!(!undone.load(Ordering::SeqCst));
        drop(registration);
    }

    #[tokio::test]
    async fn only_napping_waiters_of_other_owners_are_offered_the_lock() {
        let waiters = Arc::new(LocalWaiters::default());
        let (registration, rx) = waiting(&waiters);
        assert!(
            waiters
                .offer("lock", registration.slot.owner.id())
                .is_none(),
            "not to the releasing owner itself"
        );
        assert!(matches!(registration.wake(rx), Turn::Attempt));
        assert!(
            waiters.offer("lock", "client:1").is_none(),
            "not while it attempts"
        );
        let rx = registration.nap();
        let offer = waiters.offer("lock", "client:1").expect("napping");
        assert!(
            waiters.offer("lock", "client:1").is_none(),
            "offered once at a time"
        );
        assert!(matches!(registration.wake(rx), Turn::Offered(_)));
        offer.declined();
        drop(registration);
        assert!(
            waiters.queues().is_empty(),
            "the queue is gone with its last waiter"
        );
    }
}
