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

use futures::FutureExt;
use futures::future::BoxFuture;
use tokio::sync::{Mutex, OwnedMutexGuard};
use tokio::time::Instant;

use crate::client::{Client, ClientInner};
use crate::error::{Error, Result};
use crate::lease::Lease;
use crate::lock::guard::LockGuard;
use crate::lock::handover::{HandedHold, Offer};
use crate::lock::wait::{self, Attempt};
use crate::watchdog::{RenewTarget, Renewal};

/// What an acquire script answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Acquired {
    /// Granted with `token`; `fresh` when the owner held nothing on the server before.
    Granted {
        token: u64,
        fresh: bool,
    },
    Busy {
        ttl: Option<Duration>,
    },
}

/// What a release script answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Released {
    /// The owner's last hold went (its waiters were told if that freed the lock).
    Freed,
    /// Holds of the owner remain.
    StillHeld,
    /// The owner held nothing.
    NotOwner,
    /// (Resends only) the owner holds nothing and no partial release of this request is
    /// recorded: the earlier send released the last hold, or the hold was gone before it.
    Gone,
}

/// What a release that tries to hand the lock to a local waiter answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HandedOver {
    /// The owner's last hold went and the waiter now holds the lock with `token`.
    Handed { token: u64 },
    /// Not handed over; the release did what a plain one would (or nothing).
    Released(Released),
    /// The owner has several holds on the server: nothing changed.
    SeveralHolds,
}

/// A lock's state as one owner sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Inspection {
    pub(crate) locked: bool,
    pub(crate) holds: u32,
    /// Remaining TTL in ms; -1 without TTL, -2 when free.
    pub(crate) pttl: i64,
}

/// One lock kind's server side. Each async method is one script call.
pub(crate) trait LockOps: Send + Sync + fmt::Debug + 'static {
    /// The lock's name (its main key).
    fn name(&self) -> &Arc<str>;
    /// Which kind of lock (part of the order in which MultiLock acquires).
    fn kind(&self) -> &'static str;
    /// The channel `owner` waits on.
    fn channel(&self, owner: &str) -> String;
    /// Where the owner's holds live, for the watchdog.
    fn renewal(&self, owner: &Arc<str>) -> RenewTarget;
    /// `waiting`: the caller waits when refused (a fair lock queues it; others ignore it).
    fn acquire<'a>(
        &'a self,
        client: &'a ClientInner,
        owner: &'a str,
        lease_ms: u64,
        waiting: bool,
    ) -> BoxFuture<'a, Result<Acquired>>;
    /// Gives back one hold. Must be idempotent per `request_id`: `resend` says an earlier send
    /// of the same request may have run.
    fn release<'a>(
        &'a self,
        client: &'a ClientInner,
        owner: &'a str,
        lease_ms: u64,
        request_id: &'a str,
        resend: bool,
    ) -> BoxFuture<'a, Result<Released>>;
    /// Sets the owner's hold count on the server to `holds` (0: remove it), never reviving a
    /// hold the server no longer has; remaining holds get a TTL of at least `lease_ms` back.
    fn repair<'a>(
        &'a self,
        client: &'a ClientInner,
        owner: &'a str,
        holds: u32,
        lease_ms: u64,
    ) -> BoxFuture<'a, Result<()>>;
    fn inspect<'a>(
        &'a self,
        client: &'a ClientInner,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<Inspection>>;
    /// Frees the lock whoever holds it; true when it was held.
    fn force_unlock<'a>(&'a self, client: &'a ClientInner) -> BoxFuture<'a, Result<bool>>;
    /// The longest a waiter may sleep between two attempts (a fair waiter must keep its place).
    fn max_nap(&self) -> Option<Duration> {
        None
    }
    /// Whether a release can hand the lock to a waiter of the same client
    /// ([`release_to`](Self::release_to)).
    fn hands_over(&self) -> bool {
        false
    }
    /// Gives back the owner's last hold and grants the lock to `to` with a lease of `to_lease_ms`
    /// in the same step, unless other clients wait. Idempotent as [`release`](Self::release)
    /// when `resend` is set. Only called when [`hands_over`](Self::hands_over) is true.
    fn release_to<'a>(
        &'a self,
        _client: &'a ClientInner,
        _owner: &'a str,
        _to: &'a str,
        _to_lease_ms: u64,
        _resend: bool,
    ) -> BoxFuture<'a, Result<HandedOver>> {
        futures::future::ready(Err(Error::unexpected("this lock kind does not hand over"))).boxed()
    }
    /// Whether waiters join a queue on the server (and so must leave it when they give up).
    fn queues(&self) -> bool {
        false
    }
    /// Takes a waiter that stops waiting out of the lock's queue; only called when
    /// [`queues`](Self::queues) is true.
    fn leave<'a>(&'a self, _client: &'a ClientInner, _owner: &'a str) -> BoxFuture<'a, Result<()>> {
        futures::future::ready(Ok(())).boxed()
    }
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
    count: u32,
    lease: Option<Arc<Lease>>,
}

impl Holds {
    /// The holds the owner has on the server, as far as the client knows.
    pub(crate) fn count(&self) -> u32 {
        self.count
    }
}

pub(crate) struct Holder {
    pub(crate) client: Client,
    pub(crate) owner: Arc<str>,
    pub(crate) ops: Box<dyn LockOps>,
    channel: String,
    holds: Arc<Mutex<Holds>>,
}

impl fmt::Debug for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Holder")
            .field("name", self.ops.name())
            .field("owner", &self.owner)
            .finish_non_exhaustive()
    }
}

impl Holder {
    /// A holder with a fresh owner.
    pub(crate) fn new(client: Client, ops: Box<dyn LockOps>) -> Self {
        let owner = client.inner.owners.next_owner();
        Self::with_owner(client, ops, owner)
    }

    /// A holder for an owner that already has one on another part of the same lock (the read
    /// and write sides of a read-write lock are one owner).
    pub(crate) fn with_owner(client: Client, ops: Box<dyn LockOps>, owner: Arc<str>) -> Self {
        Holder {
            channel: ops.channel(&owner),
            client,
            owner,
            ops,
            holds: Arc::default(),
        }
    }

    pub(crate) fn inner(&self) -> &ClientInner {
        &self.client.inner
    }

    pub(crate) fn name(&self) -> &str {
        self.ops.name()
    }

    /// Acquires, waiting at most `wait` (`None`: for ever).
    pub(crate) async fn acquire(
        self: &Arc<Self>,
        mode: LeaseMode,
        wait: Option<Duration>,
    ) -> Result<Option<LockGuard>> {
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
                self.inner().local_waiters.register(
                    self.ops.name(),
                    &self.owner,
                    &self.holds,
                    lease_ms,
                )
            })
        };
        // The releasing owner made the lease (and told the client who holds the lock).
        let handed = |hold: HandedHold| {
            let (holds, lease) = hold.accept();
            self.guard_on(holds, lease, mode)
        };
        let result = wait::acquire(
            self.inner(),
            &self.channel,
            wait,
            max_nap,
            |ask_server| self.attempt(mode, waiting, ask_server),
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

    async fn leave_queue(&self) {
        if let Err(e) = self.ops.leave(self.inner(), &self.owner).await {
            tracing::warn!(lock = %self.name(), error = %e, "could not leave the queue; the place expires with the queue timeout");
        }
    }

    pub(crate) async fn inspect(&self) -> Result<Inspection> {
        self.ops.inspect(self.inner(), &self.owner).await
    }

    pub(crate) async fn force_unlock(&self) -> Result<bool> {
        let result = self.ops.force_unlock(self.inner()).await;
        if self.ops.hands_over() {
            // Whether or not the reply came, the local holder's view may be wrong now.
            self.inner().local_waiters.forget(self.name());
        }
        result
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
        if self.ops.hands_over()
            && waiting
            && !ask_server
            && let Some(left) = self
                .inner()
                .local_waiters
                .held_by_other(self.name(), &self.owner)
        {
            // Another owner of this client holds it: it hands the lock over or publishes.
            return Ok(Attempt::Busy { ttl: Some(left) });
        }
        let holds = self.holds.clone().lock_owned().await;
        // From here on the script may run: if this future is dropped, the repair runs instead.
        let mut in_flight = InFlight {
            holder: self.clone(),
            holds: Some(holds),
        };
        let sent_at = Instant::now();
        let reply = self
            .ops
            .acquire(self.inner(), &self.owner, lease_ms, waiting)
            .await;
        match reply {
            Ok(Acquired::Granted { token, fresh }) => {
                let holds = in_flight.disarm();
                Ok(Attempt::Granted(
                    self.grant(holds, token, fresh, sent_at, lease_ms, mode),
                ))
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
                Ok(Attempt::Busy { ttl })
            }
            Err(e) if e.outcome_unknown() => {
                in_flight.repair().await;
                in_flight.disarm();
                Err(e)
            }
            Err(e) => {
                in_flight.disarm();
                Err(e)
            }
        }
    }

    fn grant(
        self: &Arc<Self>,
        mut holds: OwnedMutexGuard<Holds>,
        token: u64,
        fresh: bool,
        sent_at: Instant,
        lease_ms: u64,
        mode: LeaseMode,
    ) -> LockGuard {
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
                        .granted(self.ops.name(), &self.owner, &lease);
                }
                lease
            }
        };
        self.guard_on(holds, lease, mode)
    }

    /// The guard of one more hold on `lease`, registered with the watchdog when renewed.
    fn guard_on(
        self: &Arc<Self>,
        mut holds: OwnedMutexGuard<Holds>,
        lease: Arc<Lease>,
        mode: LeaseMode,
    ) -> LockGuard {
        holds.count += 1;
        holds.lease = Some(lease.clone());
        drop(holds);

        let renewed = matches!(mode, LeaseMode::Watchdog);
        let mut guards = lease.guards();
        guards.live += 1;
        if renewed {
            guards.renewed += 1;
            if guards.renewal.is_none() {
                guards.renewal = Some(self.inner().watchdog.register(Renewal {
                    target: self.ops.renewal(&self.owner),
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
        let mut guards = lease.guards();
        guards.live = guards.live.saturating_sub(1);
        if renewed {
            guards.renewed = guards.renewed.saturating_sub(1);
        }
        if guards.renewed == 0
            && let Some(id) = guards.renewal.take()
        {
            self.inner().watchdog.deregister(id);
        }
    }

    /// Gives back one hold of `lease`.
    pub(crate) async fn release(
        self: &Arc<Self>,
        lease: &Arc<Lease>,
        request_id: &str,
        resend: bool,
    ) -> Result<()> {
        let mut holds = self.holds.clone().lock_owned().await;
        let current = holds.lease.as_ref().is_some_and(|l| Arc::ptr_eq(l, lease));
        if !current || holds.count == 0 {
            return Err(self.lost());
        }
        // Whether the hold still stood, as far as we know, when the release went out: a resend
        // that finds nothing then means the release happened.
        let held_at_send = !lease.is_lost();
        if holds.count == 1 && self.ops.hands_over() {
            self.inner().local_waiters.releasing(self.name(), lease);
        }
        // The last hold goes straight to a waiter of this client when one naps. A resend never
        // hands over: its first send's handover, if any, is settled already.
        let offer = (holds.count == 1 && held_at_send && !resend && self.ops.hands_over())
            .then(|| self.inner().local_waiters.offer(self.name(), &self.owner))
            .flatten();
        let mut result = match offer {
            Some(offer) => self.hand_over(lease, request_id, offer).await,
            None => self.send_release_resending(lease, request_id, resend).await,
        };
        if matches!(result, Ok(Released::Gone)) {
            result = Ok(if held_at_send {
                Released::Freed
            } else {
                Released::NotOwner
            });
        }
        holds.count -= 1;
        let outcome = match result {
            Ok(Released::StillHeld) if holds.count == 0 => {
                // The server counted holds we did not know of (an earlier repair failed).
                if let Err(e) = self.ops.repair(self.inner(), &self.owner, 0, 0).await {
                    tracing::warn!(lock = %self.name(), error = %e, "could not drop a stray hold; it expires with its lease");
                }
                Ok(())
            }
            Ok(Released::Freed) if holds.count > 0 => {
                // The server had fewer holds than we knew of: the others are gone.
                lease.mark_lost();
                holds.count = 0;
                Ok(())
            }
            Ok(Released::Freed | Released::StillHeld) => Ok(()),
            Ok(Released::NotOwner | Released::Gone) => {
                lease.mark_lost();
                holds.count = 0;
                Err(self.lost())
            }
            Err(e) => Err(e),
        };
        if holds.count == 0 {
            holds.lease = None;
            self.inner().local_waiters.releasing(self.name(), lease);
        }
        outcome
    }

    /// Sends a release, resending it on a new connection when the first one dropped. The
    /// resend carries the same request id and says it is one: a partial release that ran is
    /// answered from its latch, never applied twice.
    async fn send_release_resending(
        &self,
        lease: &Lease,
        request_id: &str,
        resend: bool,
    ) -> Result<Released> {
        with_resends(resend, |resend| {
            self.send_release(lease, request_id, resend)
        })
        .await
    }

    /// Releases the owner's last hold by handing the lock to the waiter of `offer`, and tells
    /// the waiter how that went. Answers as the plain release would for this owner.
    async fn hand_over(
        self: &Arc<Self>,
        lease: &Lease,
        request_id: &str,
        offer: Offer,
    ) -> Result<Released> {
        let (to, to_lease_ms) = (offer.owner.clone(), offer.lease_ms);
        // Dropped unsettled (an error, or this future cancelled), it takes the waiter's possible
        // hold back before the waiter may try again.
        let mut pending = PendingHandover {
            holder: self.clone(),
            offer: Some(offer),
        };
        let sent_at = Instant::now();
        let result = with_resends(false, |resend| {
            self.ops
                .release_to(self.inner(), &self.owner, &to, to_lease_ms, resend)
        })
        .await;
        match result? {
            HandedOver::Handed { token } => {
                let offer = pending.take();
                let handed = Arc::new(Lease::new(token, sent_at, to_lease_ms));
                // Recorded before the waiter runs, so this owner's next lock() already knows
                // the lock is taken.
                self.inner()
                    .local_waiters
                    .granted(self.ops.name(), &to, &handed);
                let (holder, lease) = (self.clone(), handed.clone());
                offer.granted(
                    handed,
                    Box::new(move |holds| {
                        // The waiter gave up after the handover ran: nobody would use or
                        // release its hold.
                        holder
                            .inner()
                            .local_waiters
                            .releasing(holder.name(), &lease);
                        let runtime = holder.inner().runtime.clone();
                        runtime.spawn(async move {
                            take_back(&holder, &to).await;
                            drop(holds);
                        });
                    }),
                );
                Ok(Released::Freed)
            }
            HandedOver::Released(released) => {
                pending.take().declined();
                Ok(released)
            }
            HandedOver::SeveralHolds => {
                // The waiter is told after this release, so its attempt does not meet our hold.
                let result = self.send_release_resending(lease, request_id, false).await;
                pending.take().declined();
                result
            }
        }
    }

    async fn send_release(
        &self,
        lease: &Lease,
        request_id: &str,
        resend: bool,
    ) -> Result<Released> {
        self.ops
            .release(
                self.inner(),
                &self.owner,
                lease.lease_ms(),
                request_id,
                resend,
            )
            .await
    }

    fn lost(&self) -> Error {
        Error::LockLost {
            name: self.name().to_owned(),
        }
    }
}

/// Sends with `send(resend)`, and again (as a resend) up to twice when the connection dropped
/// under a send, whose outcome is then unknown. Only idempotent requests go through here.
async fn with_resends<T, F, Fut>(resend: bool, mut send: F) -> Result<T>
where
    F: FnMut(bool) -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let mut result = send(resend).await;
    for _ in 0..2 {
        match &result {
            Err(e) if e.connection_dropped() => result = send(true).await,
            _ => break,
        }
    }
    result
}

/// A handover under way; dropped unsettled, it takes the waiter's possible hold back in the
/// background, keeping the waiter's hold count locked until that is done.
struct PendingHandover {
    holder: Arc<Holder>,
    offer: Option<Offer>,
}

impl PendingHandover {
    fn take(&mut self) -> Offer {
        self.offer.take().expect("a handover is settled once")
    }
}

impl Drop for PendingHandover {
    fn drop(&mut self) {
        let Some((to, holds)) = self.offer.take().map(Offer::abandon) else {
            return;
        };
        let holder = self.holder.clone();
        self.holder.inner().runtime.spawn(async move {
            take_back(&holder, &to).await;
            drop(holds);
        });
    }
}

/// Removes whatever hold `owner`, a waiter of this client, may have been handed, freeing the
/// lock (and publishing) if that was the only one.
async fn take_back(holder: &Holder, owner: &str) {
    if let Err(e) = holder.ops.repair(holder.inner(), owner, 0, 0).await {
        tracing::warn!(lock = %holder.name(), error = %e, "could not take back a handed-over hold; it expires with its lease");
    }
}

/// A wait that may have put the owner in a lock's queue; dropped while armed (the caller gave
/// up mid-wait), it takes the owner out in the background.
struct Queued<'a> {
    holder: &'a Arc<Holder>,
    armed: bool,
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        if self.armed {
            let holder = self.holder.clone();
            self.holder
                .inner()
                .runtime
                .spawn(async move { holder.leave_queue().await });
        }
    }
}

/// An acquire that may have run on the server. Dropped while armed, it spawns the repair that
/// sets the server back to the hold count the owner knows, keeping the owner's mutex until the
/// repair is done.
struct InFlight {
    holder: Arc<Holder>,
    holds: Option<OwnedMutexGuard<Holds>>,
}

impl InFlight {
    fn disarm(&mut self) -> OwnedMutexGuard<Holds> {
        self.holds
            .take()
            .expect("an in-flight acquire is disarmed once")
    }

    async fn repair(&mut self) {
        if let Some(holds) = &self.holds {
            repair(&self.holder, holds).await;
        }
    }
}

async fn repair(holder: &Holder, holds: &Holds) {
    let lease_ms = holds.lease.as_ref().map_or(0, |l| l.lease_ms());
    if let Err(e) = holder
        .ops
        .repair(holder.inner(), &holder.owner, holds.count, lease_ms)
        .await
    {
        tracing::warn!(lock = %holder.name(), error = %e, "repair after an unknown acquire outcome failed; a stray hold expires with its lease");
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some(holds) = self.holds.take() {
            let holder = self.holder.clone();
            self.holder.inner().runtime.spawn(async move {
                repair(&holder, &holds).await;
                drop(holds);
            });
        }
    }
}
