//! Whether this client can still count on its presence: the moment by which, in doubt, its
//! holds must be counted lost because another client may take them over (see
//! [`presence`](super)). A leaf the watchdog reads: it imports nothing of the crate.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// What this client knows of its own presence.
#[derive(Debug)]
pub(crate) struct Doubt {
    base: Instant,
    /// Microseconds after `base` at which the last confirmation that found this client's
    /// subscription was sent (or the presence announced): no absence found before it counts.
    confirmed_us: AtomicU64,
    /// The client cannot tell that its subscription stands: the hub lost or re-made it since
    /// the last confirmation, or the last confirmation found none.
    in_doubt: AtomicBool,
    /// The grace, less the clocks' margin (1% and 2 ms, as for a lease), in µs.
    trusted_grace_us: u64,
}

impl Doubt {
    /// Presence announced, with `grace`, by a call sent at `announced`.
    pub(crate) fn new(grace: Duration, announced: Instant) -> Self {
        let grace_us = grace.as_micros().min(u64::MAX as u128) as u64;
        Doubt {
            base: announced,
            confirmed_us: AtomicU64::new(0),
            in_doubt: AtomicBool::new(false),
            trusted_grace_us: grace_us.saturating_sub(grace_us / 100 + 2_000),
        }
    }

    /// A confirmation sent at `sent` found the subscription: never moves backwards.
    pub(crate) fn confirmed(&self, sent: Instant) {
        let us = sent.saturating_duration_since(self.base).as_micros();
        self.confirmed_us
            .fetch_max(us.min(u64::MAX as u128) as u64, Ordering::AcqRel);
    }

    pub(crate) fn set_doubt(&self, doubt: bool) {
        self.in_doubt.store(doubt, Ordering::Release);
    }

    pub(crate) fn in_doubt(&self) -> bool {
        self.in_doubt.load(Ordering::Acquire)
    }

    /// Before this moment no hold of this client can have been taken over: the last
    /// confirmation's sending, plus the grace, less the clocks' margin.
    pub(crate) fn safe_until(&self) -> Instant {
        self.base
            + Duration::from_micros(
                self.confirmed_us
                    .load(Ordering::Acquire)
                    .saturating_add(self.trusted_grace_us),
            )
    }

    /// In doubt, and past [`safe_until`](Self::safe_until): every hold that may be taken over
    /// must be counted lost (and a hold taken now is born lost).
    pub(crate) fn past(&self) -> bool {
        self.in_doubt() && Instant::now() >= self.safe_until()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_doubt_holds_are_lost_a_grace_less_the_margin_after_the_last_confirmation() {
        let start = Instant::now();
        let doubt = Doubt::new(Duration::from_secs(2), start);
        assert_eq!(
            doubt.safe_until(),
            start + Duration::from_millis(2_000 - 20 - 2)
        );
        doubt.confirmed(start + Duration::from_secs(1));
        assert_eq!(
            doubt.safe_until(),
            start + Duration::from_millis(3_000 - 22)
        );
        doubt.confirmed(start);
        assert_eq!(
            doubt.safe_until(),
            start + Duration::from_millis(3_000 - 22),
            "never backwards"
        );
        assert!(!doubt.past(), "not in doubt");
        doubt.set_doubt(true);
        assert!(!doubt.past(), "not yet");
    }
}
