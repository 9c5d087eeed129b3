//! What one lock kind sends: the script call of each operation, for one owner. The holder runs
//! the calls and reads their replies, which every kind shapes alike.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::lock::owner::{Owner, Side};
use crate::script::ScriptCall;
use crate::watchdog::RenewTarget;

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

/// What an acquire asks for, besides a hold.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Want {
    /// The caller waits when refused (a fair lock queues it; others ignore it).
    pub(crate) waiting: bool,
    /// The client knows of no live hold of the owner on this side, so a hold the server still
    /// has for it is a leftover (a release or repair whose outcome never reached the client, or
    /// a lock handed to it as a starving waiter) and must be replaced by a fresh grant with a
    /// new token, never answered as reentrant.
    pub(crate) stale: bool,
    /// The caller has waited past the starvation threshold: refused, it joins the lock's
    /// starving waiters (kinds with [`starves`](LockOps::starves) only).
    pub(crate) starving: bool,
    /// The acquisition is nested in a hold of its owner: the script grants one more hold only
    /// while the server still has that hold, and answers "lost" otherwise, so a hold forced
    /// open or deleted behind the client's back is never granted afresh under the old owner.
    pub(crate) nested: Nested,
    /// The caller has waited long enough to ask whether the holder's process is gone: the
    /// script takes a hold of a client found gone for its grace over, and answers a refusal
    /// with when to look again (see [`presence`](crate::presence)).
    pub(crate) takeover: bool,
}

/// Which hold of its owner an acquisition is nested in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Nested {
    /// None: an acquisition of its own.
    #[default]
    No,
    /// The owner's hold of the side acquired.
    Same,
    /// The owner's hold of the read-write lock's other side: a read in its write hold (which
    /// carries the write hold's token), or a write in its read hold (an upgrade, refused).
    Other,
}

impl Want {
    /// The scripts' hold flag: `0` a hold as the client knows it, `1` stale (see
    /// [`stale`](Self::stale)); nested, `2` in the owner's hold of this side, `3` (stale) or `4`
    /// in its hold of the other side (read-write locks only).
    pub(crate) fn hold_flag(&self) -> &'static str {
        match (self.nested, self.stale) {
            (Nested::No, stale) => flag(stale),
            (Nested::Same, _) => "2",
            (Nested::Other, true) => "3",
            (Nested::Other, false) => "4",
        }
    }
}

/// The scripts' takeover argument: how often a waiter looks again while the holder's presence
/// channel has a subscriber, in ms.
pub(crate) const TAKEOVER_POLL_MS: u64 = crate::presence::POLL.as_millis() as u64;

/// The waiter a release hands the lock to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Handoff<'a> {
    pub(crate) owner: &'a Owner,
    pub(crate) lease_ms: u64,
    /// How many of the lock channel's subscribers are the releasing client's own (0 or 1).
    pub(crate) own_subscribers: u8,
    /// The waiter joined the lock's starving waiters (it leaves them when handed the lock).
    pub(crate) starving: bool,
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
    /// The kinds that share owners: within one family, an acquisition nested in a hold's scope
    /// works for that hold's owner (a plain
    /// and a fenced lock are one `lock` family; the read and write sides are one `rw`). Kinds of
    /// different families on one name are different owners, so they contend instead of mixing
    /// their hold counts.
    fn family(&self) -> &'static str;
    /// Which of the owner's hold counts this kind moves.
    fn side(&self) -> Side {
        Side::Main
    }
    /// The channel `owner` waits on.
    fn channel(&self, owner: &Owner) -> Arc<str>;
    /// Where the owner's holds live, for the watchdog.
    fn renewal(&self, owner: &Owner) -> RenewTarget;
    /// Takes a hold; replies as [`run_acquire`] reads (one integer, or `{status, value}`).
    fn acquire(&self, owner: &Owner, lease_ms: u64, want: Want) -> ScriptCall;
    /// Gives back one hold; must be idempotent per request id when `request.resend` is set.
    /// Replies as [`parse_release`] reads.
    fn release(&self, owner: &Owner, lease_ms: u64, request: ReleaseRequest<'_>) -> ScriptCall;
    /// Sets the owner's hold count on the server to `holds` (0: remove it), never reviving a
    /// hold the server no longer has; remaining holds get a TTL of at least `lease_ms` back.
    /// Replies 1 when it changed something.
    fn repair(&self, owner: &Owner, holds: u32, lease_ms: u64) -> ScriptCall;
    /// The hash field holding `owner`'s hold count on this side of the lock.
    fn field<'a>(&self, owner: &'a Owner) -> &'a str {
        owner.id()
    }
    /// Frees the lock whoever holds it; replies 1 when it was held.
    fn force_unlock(&self) -> ScriptCall;
    /// The longest a waiter may sleep between two attempts (a fair waiter must keep its place).
    fn max_nap(&self) -> Option<Duration> {
        None
    }
    /// Whether waiters join a queue on the server (and so must leave it when they give up).
    fn queues(&self) -> bool {
        false
    }
    /// Takes a waiter that stops waiting out of the lock's queue; asked for when
    /// [`queues`](Self::queues) is true, or when the waiter said it starves.
    fn leave(&self, _owner: &Owner) -> Option<ScriptCall> {
        None
    }
    /// How long a waiter waits before it counts as starving (`None`: the kind has no
    /// starvation mode, or it is off). A starving waiter's attempts carry
    /// [`Want::starving`], it listens on its own channel (the lock's channel, `:`, its owner
    /// name) for a release that hands it the lock, and it [`leave`](Self::leave)s when it stops
    /// waiting unserved.
    fn starves(&self) -> Option<Duration> {
        None
    }
    /// Whether a release can hand the lock to a waiter of the same client
    /// ([`release_to`](Self::release_to)).
    fn hands_over(&self) -> bool {
        false
    }
    /// Gives back the owner's last hold and grants the lock to `to` in the same step, unless
    /// clients other than this one wait. Idempotent when `resend` is set. Replies as
    /// [`parse_handover`] reads; `None` for kinds that do not hand over.
    fn release_to(&self, _owner: &Owner, _to: Handoff<'_>, _resend: bool) -> Option<ScriptCall> {
        None
    }
}
