//! The plain RLock's scripts (the fenced lock's too).

use std::sync::Arc;
use std::time::Duration;

use crate::config::Starvation;
use crate::lock::ops::LockOps;
use crate::lock::ops::{Handoff, ReleaseRequest, TAKEOVER_POLL_MS, Want, flag};
use crate::lock::owner::Owner;
use crate::script::{
    LOCK_ACQUIRE, LOCK_FORCE_UNLOCK, LOCK_HANDOVER, LOCK_RELEASE, LOCK_REPAIR, LOCK_STARVING_LEAVE,
    ScriptCall,
};
use crate::watchdog::RenewTarget;
use crate::{names, slots};

/// The message that wakes one waiter (Redisson's unlock message). lock_release.lua and
/// lock_handover.lua, run on every release, write it as a literal, since each argument costs
/// Redis a little on every call. lock_repair.lua (run only after a lost reply) and
/// lock_force_unlock.lua (which the read/write lock calls with its own message) take it as an
/// argument.
pub(crate) const UNLOCK_MESSAGE: &str = "0";

#[derive(Debug)]
pub(crate) struct PlainOps {
    name: Arc<str>,
    channel: Arc<str>,
    /// The fencing counter of the lock's cluster slot.
    counter: String,
    /// A fenced lock's second counter: Redisson's per-name one, shared with Java's RFencedLock.
    name_counter: Option<String>,
    /// The lock's starving waiters (ferrisson only), `ferrisson_lock_starving:{name}`.
    starving: String,
    starvation: Starvation,
    /// The kind spans and metrics name: `lock`, `fenced` or `mutex`.
    label: &'static str,
}

impl PlainOps {
    pub(crate) fn new(name: &str, starvation: Starvation) -> Self {
        PlainOps {
            name: Arc::from(name),
            channel: names::lock_channel(name).into(),
            counter: slots::token_counter(name),
            name_counter: None,
            starving: names::derived("ferrisson_lock_starving", name),
            starvation,
            label: "lock",
        }
    }

    /// A fenced lock's: its tokens also go through the name's own counter.
    pub(crate) fn fenced(name: &str, starvation: Starvation) -> Self {
        PlainOps {
            name_counter: Some(names::token_key(name)),
            label: "fenced",
            ..Self::new(name, starvation)
        }
    }

    /// An RMutex's: a plain lock that spans and metrics call `mutex`.
    pub(crate) fn mutex(name: &str, starvation: Starvation) -> Self {
        PlainOps {
            label: "mutex",
            ..Self::new(name, starvation)
        }
    }

    fn handoff_ms(&self) -> u64 {
        self.starvation.handoff.as_millis() as u64
    }
}

impl LockOps for PlainOps {
    fn family(&self) -> &'static str {
        "lock"
    }

    fn kind(&self) -> &'static str {
        "lock"
    }

    fn label(&self) -> &'static str {
        self.label
    }

    fn name(&self) -> &Arc<str> {
        &self.name
    }

    fn channel(&self, _owner: &Owner) -> Arc<str> {
        self.channel.clone()
    }

    fn renewal(&self, owner: &Owner) -> RenewTarget {
        RenewTarget::HashField {
            key: self.name.clone(),
            field: owner.id().clone(),
        }
    }

    fn acquire(&self, owner: &Owner, lease_ms: u64, want: Want) -> ScriptCall {
        let call = ScriptCall::new(&LOCK_ACQUIRE)
            .key(&*self.name)
            .key(&self.counter);
        // The starving set is a key only when the script may touch it (a fenced lock always
        // passes it, to keep its name counter fourth).
        let call = if want.starving || self.name_counter.is_some() {
            call.key(&self.starving).key(&self.name_counter)
        } else {
            call
        };
        let call = call.arg(&**owner.id()).arg(lease_ms).arg(want.hold_flag());
        let keep = self.starvation.keep.as_millis() as u64;
        match (want.starving, want.takeover) {
            (false, false) => call,
            (true, false) => call.arg("1").arg(keep),
            (starving, true) => call.arg(flag(starving)).arg(keep).arg(TAKEOVER_POLL_MS),
        }
    }

    fn release(&self, owner: &Owner, lease_ms: u64, request: ReleaseRequest<'_>) -> ScriptCall {
        let owner: &str = owner.id();
        if request.short() {
            // Neither latch nor lease: on the common path the script needs neither, and each
            // key or argument costs Redis on every call.
            return ScriptCall::new(&LOCK_RELEASE)
                .key(&*self.name)
                .key(&*self.channel)
                .key(&self.starving)
                .arg(owner)
                .arg(self.handoff_ms());
        }
        ScriptCall::new(&LOCK_RELEASE)
            .key(&*self.name)
            .key(&*self.channel)
            .key(&self.starving)
            .key_concat(&names::unlock_latch_pieces(&self.name, request.id))
            .arg(owner)
            .arg(lease_ms)
            .arg(request.latch_ttl_ms)
            .arg(request.resend_flag())
            .arg(self.handoff_ms())
    }

    fn starves(&self) -> Option<Duration> {
        self.starvation.threshold
    }

    fn leave(&self, owner: &Owner) -> Option<ScriptCall> {
        Some(
            ScriptCall::new(&LOCK_STARVING_LEAVE)
                .key(&*self.name)
                .key(&*self.channel)
                .key(&self.starving)
                .arg(&**owner.id())
                .arg(self.handoff_ms()),
        )
    }

    fn hands_over(&self) -> bool {
        true
    }

    fn release_to(&self, owner: &Owner, to: Handoff<'_>, resend: bool) -> Option<ScriptCall> {
        Some(
            ScriptCall::new(&LOCK_HANDOVER)
                .key(&*self.name)
                .key(&*self.channel)
                .key(&self.counter)
                .key(&self.starving)
                .key(&self.name_counter)
                .arg(&**owner.id())
                .arg(&**to.owner.id())
                .arg(to.lease_ms)
                .arg(to.own_subscribers)
                .arg(flag(resend))
                .arg(self.handoff_ms())
                .arg(flag(to.starving)),
        )
    }

    fn repair(&self, owner: &Owner, holds: u32, lease_ms: u64) -> ScriptCall {
        ScriptCall::new(&LOCK_REPAIR)
            .key(&*self.name)
            .key(&*self.channel)
            .arg(&**owner.id())
            .arg(holds)
            .arg(UNLOCK_MESSAGE)
            .arg(lease_ms)
    }

    fn force_unlock(&self) -> ScriptCall {
        ScriptCall::new(&LOCK_FORCE_UNLOCK)
            .key(&*self.name)
            .key(&*self.channel)
            .arg(UNLOCK_MESSAGE)
    }
}
