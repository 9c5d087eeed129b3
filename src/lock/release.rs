//! Giving a hold back: the release, resent safely when its connection drops, and the handover
//! that grants the lock to a waiter of the same client in the release's own script call.

use std::sync::Arc;

use redis::Value;
use tokio::time::Instant;
use tracing::Instrument;

use crate::error::{Error, Result};
use crate::lease::Lease;
use crate::lock::handover::Offer;
use crate::lock::holder::Holder;
use crate::lock::holds::Holds;
use crate::lock::leftover::take_back_later;
use crate::lock::ops::{Handoff, ReleaseRequest};
use crate::lock::owner::Owner;
use crate::lock::replies::{HandedOver, Released, parse_handover, parse_release};
use crate::observe::Release;

impl Holder {
    /// Gives back one hold of `lease`, in a `ferrisson.release` span.
    pub(crate) async fn release(
        &self,
        holds: &mut Holds,
        lease: &Arc<Lease>,
        request_id: &str,
        resend: bool,
    ) -> Result<()> {
        let observed = Release::start(
            &self.inner().observe,
            self.ops().label(),
            self.name(),
            lease.token(),
        );
        let release = self.release_observed(holds, lease, request_id, resend);
        let result = release.instrument(observed.span()).await;
        observed.finish(result)
    }

    /// Gives back one hold of `lease`; `holds` is the owner's hold count on this side, locked
    /// by the caller.
    async fn release_observed(
        &self,
        holds: &mut Holds,
        lease: &Arc<Lease>,
        request_id: &str,
        resend: bool,
    ) -> Result<()> {
        let current = holds.lease.as_ref().is_some_and(|l| Arc::ptr_eq(l, lease));
        if !current || holds.count == 0 {
            return Err(self.lost());
        }
        if lease.is_lost() {
            // Known gone (a renewal or re-check found it gone, or its lease ran out with no
            // renewal confirmed): answered at once, with no wait on a server that may be what
            // took it. Should the server still count the hold (renewals that ran but whose
            // replies never came), it is removed in the background as a leftover, and the
            // owner tainted. The lease's other guards find it gone.
            holds.count = 0;
            holds.lease = None;
            if self.ops().hands_over() {
                self.local_waiters().releasing(self.name(), lease);
            }
            self.taint(holds, lease.lease_ms());
            return Err(self.lost());
        }
        let owner = &self.owner;
        // Whether the hold still stood, as far as we know, when the release went out: a resend
        // that finds nothing then means the release happened.
        let held_at_send = !lease.is_lost();
        // The only hold the client knows of: a release of it may hand over, and its first send
        // may take the kind's short form.
        let only_hold = holds.count == 1;
        // The client stops counting this hold as taken before its last release goes out.
        let last = only_hold && self.ops().hands_over();
        if last {
            self.local_waiters().releasing(self.name(), lease);
        }
        // The last hold goes straight to a waiter of this client when one naps. A resend never
        // hands over: its first send's handover, if any, is settled already.
        let offer = (last && held_at_send && !resend)
            .then(|| self.local_waiters().offer(self.name(), owner.id()))
            .flatten();
        let mut result = match offer {
            // Boxed: only a contended release hands over, and its future is the largest here.
            Some(offer) => Box::pin(self.hand_over(owner, lease, request_id, offer)).await,
            None => {
                self.send_release_resending(owner, lease, request_id, resend, only_hold)
                    .await
            }
        };
        if matches!(result, Ok(Released::Gone)) {
            result = Ok(if held_at_send {
                Released::Freed
            } else {
                Released::NotOwner
            });
        }
        let remaining = holds.count - 1;
        let outcome = match result {
            // SeveralHolds answers only a short send, which goes out only for the last hold we
            // know of. Met otherwise, the server keeps more holds than we count, which the last
            // release then finds and repairs.
            Ok(Released::StillHeld | Released::SeveralHolds) if remaining == 0 => {
                // The server counted holds we did not know of (an earlier repair failed). After
                // a short send (which changed nothing) the repair removes them all, as after a
                // full send (which took one away). The count drops only once the repair is
                // settled: an unlock cancelled during it leaves the hold counted, so its
                // background resend (guard.rs) gives it back in the full form and repairs.
                let repaired = Box::pin(self.repair_to(owner, 0, 0)).await;
                holds.count = 0;
                if let Err(e) = repaired {
                    tracing::warn!(lock = %self.name(), error = %e, "could not drop a stray hold; retrying in the background");
                    self.taint(holds, lease.lease_ms());
                }
                Ok(())
            }
            Ok(Released::Freed) if remaining > 0 => {
                // The server had fewer holds than we knew of: the others are gone.
                lease.mark_lost();
                holds.count = 0;
                Ok(())
            }
            Ok(Released::Freed | Released::StillHeld | Released::SeveralHolds) => {
                holds.count = remaining;
                Ok(())
            }
            Ok(Released::NotOwner | Released::Gone) => {
                lease.mark_lost();
                holds.count = 0;
                Err(self.lost())
            }
            Err(e) => {
                holds.count = remaining;
                if e.outcome_unknown() || remaining == 0 {
                    // The release may or may not have run, or may still run late; or it did
                    // not run and the client gave up its last hold: either way the server may
                    // still count the hold, which goes in the background as soon as Redis
                    // answers (a restarted server that kept its data, say).
                    self.taint(holds, lease.lease_ms());
                }
                Err(e)
            }
        };
        if holds.count == 0 {
            holds.lease = None;
            if !last && self.ops().hands_over() {
                // Holds the server no longer had: the client's view of them goes too.
                self.local_waiters().releasing(self.name(), lease);
            }
        }
        outcome
    }

    /// Sends a release, resending it on a new connection when the first one dropped. The
    /// resend carries the same request id and says it is one: a partial release that ran is
    /// answered from its latch, never applied twice. `last`: we know of no other hold of the
    /// owner, so a first send may take the kind's short form.
    ///
    /// A short send writes no latch, so resends (here after a dropped connection, or a cancelled
    /// unlock's background resend, see guard.rs) always take the full form, which stays right
    /// whatever the short send did:
    /// - it released the last hold: the resend finds no hold and no latch and answers Gone,
    ///   read as freed since the hold stood at send (as after a full send that did the same);
    /// - it found several holds and changed nothing: the resend takes one away (with a latch)
    ///   and answers StillHeld, and the hold count being 0 here, the holder removes the others;
    /// - it never ran: the resend is an ordinary full release.
    async fn send_release_resending(
        &self,
        owner: &Owner,
        lease: &Lease,
        request_id: &str,
        resend: bool,
        last: bool,
    ) -> Result<Released> {
        with_resends(resend, |resend| {
            self.send_release(owner, lease, request_id, resend, last)
        })
        .await
    }

    /// Releases the owner's last hold by handing the lock to the waiter of `offer`, and tells
    /// the waiter how that went. Answers as the plain release would for this owner.
    async fn hand_over(
        &self,
        owner: &Owner,
        lease: &Lease,
        request_id: &str,
        offer: Offer,
    ) -> Result<Released> {
        let (to, to_lease_ms, to_starving) = (offer.owner.clone(), offer.lease_ms, offer.starving);
        // Dropped unsettled (an error, or this future cancelled), it takes the waiter's possible
        // hold back before the waiter may try again.
        let mut pending = PendingHandover {
            holder: self.clone(),
            offer: Some(offer),
        };
        let sent_at = Instant::now();
        let stamp = self.inner().hub.stamp(&self.channel());
        let to_ref: &Owner = &to;
        let result = with_resends(false, |resend| async move {
            // Counted at each send: the script subtracts this client's own subscriber.
            let to = Handoff {
                owner: to_ref,
                lease_ms: to_lease_ms,
                own_subscribers: u8::from(self.inner().hub.is_subscribed(&self.channel())),
                starving: to_starving,
            };
            let call = self
                .ops()
                .release_to(owner, to, resend)
                .ok_or_else(|| Error::unexpected("this lock kind does not hand over"))?;
            let reply: Value = self.inner().executor.run(&call, self.name()).await?;
            parse_handover(&reply)
        })
        .await;
        match result? {
            HandedOver::Handed { token } => {
                crate::observe::handed_over(&self.labels(), self.name(), to.id(), token);
                let offer = pending.take();
                let handed = Arc::new(Lease::new(token, sent_at, to_lease_ms));
                // Recorded before the waiter runs, so this owner's next lock() already knows
                // the lock is taken.
                self.local_waiters()
                    .granted(self.ops().name(), to.id(), &handed, stamp);
                let (holder, lease) = (self.clone(), handed.clone());
                offer.granted(
                    handed,
                    Box::new(move |holds| {
                        // The waiter gave up after the handover ran: nobody would use or
                        // release its hold.
                        holder.local_waiters().releasing(holder.name(), &lease);
                        let inner = holder.handle.core.clone();
                        inner.spawn(async move {
                            let mut holds = holds;
                            take_back(&holder, &to, &mut holds, to_lease_ms).await;
                        });
                    }),
                );
                Ok(Released::Freed)
            }
            HandedOver::Released(Released::Freed) => {
                pending.take().freed();
                Ok(Released::Freed)
            }
            HandedOver::Released(released) => {
                pending.take().declined();
                Ok(released)
            }
            HandedOver::SeveralHolds => {
                // The waiter is told after this release, so its attempt does not meet our hold.
                // The full form: a short one would only answer "several holds" again.
                let result = self
                    .send_release_resending(owner, lease, request_id, false, false)
                    .await;
                pending.take().declined();
                result
            }
        }
    }

    async fn send_release(
        &self,
        owner: &Owner,
        lease: &Lease,
        request_id: &str,
        resend: bool,
        last: bool,
    ) -> Result<Released> {
        let request = ReleaseRequest {
            id: request_id,
            resend,
            last,
            latch_ttl_ms: self.inner().config.unlock_latch_ttl().as_millis() as u64,
        };
        let call = self.ops().release(owner, lease.lease_ms(), request);
        let reply: Value = self.inner().executor.run(&call, self.name()).await?;
        parse_release(&reply)
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
    holder: Holder,
    offer: Option<Offer>,
}

impl PendingHandover {
    fn take(&mut self) -> Offer {
        self.offer.take().expect("a handover is settled once")
    }
}

impl Drop for PendingHandover {
    fn drop(&mut self) {
        let Some((to, holds, lease_ms)) = self.offer.take().map(Offer::abandon) else {
            return;
        };
        let holder = self.holder.clone();
        self.holder.inner().spawn(async move {
            let mut holds = holds;
            take_back(&holder, &to, &mut holds, lease_ms).await;
        });
    }
}

/// Removes whatever hold `owner`, a waiter of this client (whose hold count is `holds`), may
/// have been handed with a lease of `lease_ms`, freeing the lock (and publishing) if that was
/// the only one. When Redis does not answer, the waiter's owner is tainted and the hold is
/// taken back in the background.
async fn take_back(holder: &Holder, owner: &Arc<Owner>, holds: &mut Holds, lease_ms: u64) {
    if let Err(e) = holder.repair_to(owner, 0, 0).await {
        tracing::warn!(lock = %holder.name(), error = %e, "could not take back a handed-over hold; retrying in the background");
        holds.leftovers.taint();
        take_back_later(holder.clone(), owner.clone(), lease_ms);
    }
}
