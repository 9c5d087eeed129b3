//! Whether this client can still count on its presence: the moment by which, in doubt, its
//! holds must be counted lost because another client may take them over (see
//! [`presence`](super)). A leaf the watchdog reads: it imports nothing of the crate.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

/// How soon this client hears that its presence connection was closed, at most: the server
/// closes it (a restart, a killed connection) a moment before the client reads the end.
pub(crate) const NOTICE: Duration = Duration::from_millis(100);

/// What this client knows of its own presence.
#[derive(Debug)]
pub(crate) struct Doubt {
    /// The grace, less the clocks' margin (1% and 2 ms, as for a lease).
    trusted_grace: Duration,
    /// The client cannot tell that its subscription stands: its connection is down or new and
    /// not yet confirmed, or the last confirmation found no subscriber or no master.
    in_doubt: AtomicBool,
    times: Mutex<Times>,
    /// Told when the doubt ends.
    settled: tokio::sync::Notify,
    /// The moment `lost_at` counts from.
    base: Instant,
    /// When the client last counted its holds lost for want of presence, in µs after `base`
    /// (0: never). An atomic, since every hold's registration reads it (see [`loses`]).
    ///
    /// [`loses`]: Self::loses
    lost_us: AtomicU64,
}

#[derive(Debug)]
struct Times {
    /// When the last confirmation that found the subscription was sent (or the presence
    /// announced): no absence found before it counts, since it cleared every mark.
    confirmed: Instant,
    /// When the presence connection was last seen closed.
    closed: Option<Instant>,
    /// That close, less [`NOTICE`], when it was the first since the last confirmation and
    /// nothing refuted the presence since: the server had the subscription until then.
    counted_close: Option<Instant>,
    /// A confirmation found no subscriber, or a server that is no master, since the last one
    /// that found the subscription.
    refuted: bool,
}

impl Doubt {
    /// Presence announced, with `grace`, by a call sent at `announced`.
    pub(crate) fn new(grace: Duration, announced: Instant) -> Self {
        Doubt {
            trusted_grace: grace.saturating_sub(grace / 100 + Duration::from_millis(2)),
            in_doubt: AtomicBool::new(false),
            times: Mutex::new(Times {
                confirmed: announced,
                closed: None,
                counted_close: None,
                refuted: false,
            }),
            settled: tokio::sync::Notify::new(),
            base: announced,
            lost_us: AtomicU64::new(0),
        }
    }

    fn times(&self) -> MutexGuard<'_, Times> {
        // A handful of assignments that cannot panic halfway.
        self.times.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A confirmation sent at `sent` found the subscription: never moves backwards. One sent
    /// before the connection's last close says nothing of the time the connection was down.
    pub(crate) fn confirmed(&self, sent: Instant) {
        let mut times = self.times();
        times.confirmed = times.confirmed.max(sent);
        if times.closed.is_none_or(|closed| sent > closed) {
            times.counted_close = None;
            times.refuted = false;
        }
    }

    /// The presence connection was seen closed at `at`. When it is the first close since the
    /// last confirmation and nothing refuted the presence since, the subscription stood until
    /// the server closed it, a moment before: no absence can have been found before `at` less
    /// [`NOTICE`], and the grace counts from then. For one server only: after a failover the
    /// absence on the new master began when it was promoted, which this client cannot see.
    pub(crate) fn closed(&self, at: Instant, count: bool) {
        let mut times = self.times();
        let first = times.closed.is_none_or(|closed| closed < times.confirmed);
        times.closed = Some(at);
        if count && first && !times.refuted {
            times.counted_close = Some(at.checked_sub(NOTICE).unwrap_or(at));
        }
    }

    /// A confirmation found no subscriber, or a server that is no master: the grace counts
    /// from the last confirmation that found the subscription.
    pub(crate) fn refuted(&self) {
        let mut times = self.times();
        times.refuted = true;
        times.counted_close = None;
    }

    /// The client counts its holds lost now (past its deadline, in doubt).
    pub(crate) fn lost_now(&self) {
        let us = self.base.elapsed().as_micros().min(u64::MAX as u128) as u64;
        self.lost_us.store(us.max(1), Ordering::Release);
    }

    /// Whether a hold whose grant was sent at `sent` must be counted lost: the client was past
    /// its deadline, or counted its holds lost after the grant was sent (the grant was on its
    /// way then, and the hold may have been taken over before it was registered).
    pub(crate) fn loses(&self, sent: Instant) -> bool {
        let lost = self.lost_us.load(Ordering::Acquire);
        let sent = sent.saturating_duration_since(self.base).as_micros();
        self.past() || (lost != 0 && u128::from(lost) >= sent)
    }

    pub(crate) fn set_doubt(&self, doubt: bool) {
        if self.in_doubt.swap(doubt, Ordering::AcqRel) && !doubt {
            self.settled.notify_waiters();
        }
    }

    /// Resolves once the client is not [`past`](Self::past) its deadline.
    pub(crate) async fn settled(&self) {
        loop {
            let settled = self.settled.notified();
            tokio::pin!(settled);
            settled.as_mut().enable();
            if !self.past() {
                return;
            }
            settled.await;
        }
    }

    pub(crate) fn in_doubt(&self) -> bool {
        self.in_doubt.load(Ordering::Acquire)
    }

    /// Before this moment no hold of this client can have been taken over: the last
    /// confirmation's sending (or the counted close, see [`closed`](Self::closed)), plus the
    /// grace, less the clocks' margin.
    pub(crate) fn safe_until(&self) -> Instant {
        let times = self.times();
        let from = match times.counted_close {
            Some(close) => close.max(times.confirmed),
            None => times.confirmed,
        };
        from + self.trusted_grace
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

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn in_doubt_holds_are_lost_a_grace_less_the_margin_after_the_last_confirmation() {
        let start = Instant::now();
        let doubt = Doubt::new(ms(2_000), start);
        assert_eq!(doubt.safe_until(), start + ms(2_000 - 20 - 2));
        doubt.confirmed(start + ms(1_000));
        assert_eq!(doubt.safe_until(), start + ms(3_000 - 22));
        doubt.confirmed(start);
        assert_eq!(
            doubt.safe_until(),
            start + ms(3_000 - 22),
            "never backwards"
        );
        assert!(!doubt.past(), "not in doubt");
        doubt.set_doubt(true);
        assert!(!doubt.past(), "not yet");
    }

    #[test]
    fn the_first_close_after_a_confirmation_counts_unless_refuted() {
        let start = Instant::now();
        let doubt = Doubt::new(ms(2_000), start);
        // Counted from the close, less the notice.
        doubt.closed(start + ms(1_500), true);
        assert_eq!(doubt.safe_until(), start + ms(3_400 - 22));
        // A second close before a confirmation does not move it: the connection between the
        // two was never confirmed.
        doubt.closed(start + ms(2_500), true);
        assert_eq!(doubt.safe_until(), start + ms(3_400 - 22));
        // A confirmation sent before the last close counts from its sending, but says nothing
        // of the time after the close: the second close still does not count.
        doubt.confirmed(start + ms(2_000));
        assert_eq!(doubt.safe_until(), start + ms(4_000 - 22));
        doubt.confirmed(start + ms(2_600));
        assert_eq!(doubt.safe_until(), start + ms(4_600 - 22));
        // Refuted: from the last confirmation, and a close after it does not count.
        doubt.refuted();
        doubt.closed(start + ms(3_000), true);
        assert_eq!(doubt.safe_until(), start + ms(4_600 - 22));
        // A grant sent before the holds were last counted lost is lost; one sent after is not.
        assert!(!doubt.loses(start));
        doubt.lost_now();
        assert!(doubt.loses(start));
        assert!(!doubt.loses(Instant::now() + ms(1)));
        // Not counted at all where the server may have changed (a sentinel's master).
        let other = Doubt::new(ms(2_000), start);
        other.closed(start + ms(1_500), false);
        assert_eq!(other.safe_until(), start + ms(2_000 - 22));
    }
}
