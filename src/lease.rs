//! The lease behind one or more guards: the fencing token, the deadline by which Redis lets the
//! hold expire unless renewed, and whether the hold is known to be lost.
//!
//! Reentrant guards of one owner share one lease. Lost is sticky: once a holder has been told to
//! stop touching the resource, a late renewal does not take that back. The deadline and the
//! lost flag are atomics so that the watchdog reads them without taking the lease's lock.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::presence::doubt::Doubt;

/// The longest lease accepted: about 34 years. Redis refuses a TTL that would overflow its
/// clock, and such a refusal in the middle of a script would leave a lock without TTL.
pub(crate) const MAX_LEASE: Duration = Duration::from_millis(1 << 40);

/// How much of a lease the holder gives up to clocks: it counts the lease lost this much sooner
/// than its own clock says Redis expires it. Two machines' clocks may run at rates up to 500
/// ppm apart while NTP slews them (Redlock subtracts a drift of 1% + 2 ms from a validity for
/// the same reason), so a holder told at the very deadline could learn of its loss after
/// another client was granted the lock. 1% of the lease and 2 ms, in µs.
fn drift_us(lease_us: u64) -> u64 {
    lease_us / 100 + 2_000
}

/// A lease of `lease_us` as the holder may count on it: less the clocks' margin.
fn trusted_us(lease_us: u64) -> u64 {
    lease_us.saturating_sub(drift_us(lease_us))
}

#[derive(Debug)]
pub(crate) struct Lease {
    token: u64,
    /// When Redis granted the hold, in server µs: the token, except for a read hold nested in
    /// its owner's write hold, which carries the write hold's (older) token. Revocation
    /// requests made before it never reach it.
    stamp: u64,
    /// The instant the deadline is counted from.
    base: Instant,
    /// Microseconds after `base` past which Redis may have expired the hold.
    deadline_us: AtomicU64,
    /// The TTL the lock gets back from a partial release.
    lease_ms: AtomicU64,
    /// Microseconds after `base` at which the last reentrant grant was sent: a renewal sent
    /// before it ran before it on the server, so its TTL was overwritten.
    extended_us: AtomicU64,
    lost: AtomicBool,
    lost_signal: Notify,
    /// Somebody asked this hold to let go (a revocation request); sticky, like lost.
    revoked: AtomicBool,
    revoked_signal: Notify,
    guards: Mutex<Guards>,
    /// The client's presence, for a hold another client may take over when the presence is
    /// found gone: in doubt past its deadline, the hold is lost, whether or not the presence
    /// task has run yet (see `presence`).
    presence: std::sync::OnceLock<std::sync::Arc<Doubt>>,
}

/// Which guards live on a lease, and who renews it.
#[derive(Debug, Default)]
pub(crate) struct Guards {
    pub(crate) live: usize,
    /// Live guards whose grant asked for watchdog renewal.
    pub(crate) renewed: usize,
    /// The watchdog registration keeping this lease, and how: renewed while a live guard wants
    /// it renewed, else only re-checked after connection changes while any guard lives.
    pub(crate) watch: Option<(u64, crate::watchdog::Watch)>,
    /// The lease's id in the client's [live holds](crate::live) while a guard of it lives.
    pub(crate) listed: Option<u64>,
}

impl Lease {
    pub(crate) fn new(token: u64, sent_at: Instant, lease_ms: u64) -> Self {
        Lease {
            token,
            stamp: token,
            base: sent_at,
            deadline_us: AtomicU64::new(trusted_us(lease_ms.saturating_mul(1000))),
            lease_ms: AtomicU64::new(lease_ms),
            extended_us: AtomicU64::new(0),
            lost: AtomicBool::new(false),
            lost_signal: Notify::new(),
            revoked: AtomicBool::new(false),
            revoked_signal: Notify::new(),
            guards: Mutex::new(Guards::default()),
            presence: std::sync::OnceLock::new(),
        }
    }

    pub(crate) fn token(&self) -> u64 {
        self.token
    }

    /// This lease, granted at server time `stamp` (µs) rather than at its token's.
    pub(crate) fn stamped(mut self, stamp: u64) -> Self {
        self.stamp = stamp;
        self
    }

    /// When Redis granted the hold (server µs; see the field).
    pub(crate) fn stamp(&self) -> u64 {
        self.stamp
    }

    /// When the grant of this lease was sent.
    pub(crate) fn granted_at(&self) -> Instant {
        self.base
    }

    pub(crate) fn lease_ms(&self) -> u64 {
        self.lease_ms.load(Ordering::Relaxed)
    }

    pub(crate) fn guards(&self) -> MutexGuard<'_, Guards> {
        self.guards.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn offset_us(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.base)
            .as_micros()
            .min(u64::MAX as u128) as u64
    }

    /// A reentrant grant sent at `sent_at`, answered just now, set the TTL to `lease_ms`,
    /// possibly shorter.
    pub(crate) fn extended(&self, sent_at: Instant, lease_ms: u64) {
        let sent = self.offset_us(sent_at);
        // Renewals go over another connection than grants: only one sent after this answer
        // surely ran after the grant (see `renewed`).
        let answered = self.offset_us(Instant::now()).max(sent);
        self.extended_us.fetch_max(answered, Ordering::AcqRel);
        let until = sent.saturating_add(trusted_us(lease_ms.saturating_mul(1000)));
        self.deadline_us.store(until, Ordering::Release);
        self.lease_ms.store(lease_ms, Ordering::Relaxed);
    }

    /// A renewal sent at `sent_at` confirmed the hold; never moves the deadline backwards. One
    /// sent before the last reentrant grant was answered is ignored: it may have run after
    /// that grant set a shorter TTL, or before it.
    pub(crate) fn renewed(&self, sent_at: Instant, lease: Duration) {
        if self.offset_us(sent_at) < self.extended_us.load(Ordering::Acquire) {
            return;
        }
        let lease_us = lease.as_micros().min(u64::MAX as u128) as u64;
        let until = self.offset_us(sent_at).saturating_add(trusted_us(lease_us));
        self.deadline_us.fetch_max(until, Ordering::AcqRel);
    }

    pub(crate) fn deadline(&self) -> Instant {
        self.base + Duration::from_micros(self.deadline_us.load(Ordering::Acquire))
    }

    pub(crate) fn is_lost(&self) -> bool {
        if self.lost.load(Ordering::Acquire) {
            return true;
        }
        if Instant::now() >= self.deadline() || self.presence.get().is_some_and(|d| d.past()) {
            self.mark_lost();
            return true;
        }
        false
    }

    /// From now on the hold is lost also when the client's presence is in doubt past its
    /// deadline (see [`Doubt::past`]).
    pub(crate) fn watch_presence(&self, doubt: std::sync::Arc<Doubt>) {
        let _ = self.presence.set(doubt);
    }

    pub(crate) fn mark_lost(&self) {
        if !self.lost.swap(true, Ordering::AcqRel) {
            self.lost_signal.notify_waiters();
        }
    }

    pub(crate) fn is_revoked(&self) -> bool {
        self.revoked.load(Ordering::Acquire)
    }

    pub(crate) fn mark_revoked(&self) {
        if !self.revoked.swap(true, Ordering::AcqRel) {
            tracing::info!(
                token = self.token,
                "a revocation of this hold was requested"
            );
            self.revoked_signal.notify_waiters();
        }
    }

    /// Resolves once a revocation of the hold was requested (and learnt of).
    pub(crate) async fn revoked(&self) {
        loop {
            let signal = self.revoked_signal.notified();
            tokio::pin!(signal);
            signal.as_mut().enable();
            if self.is_revoked() {
                return;
            }
            signal.await;
        }
    }

    /// Resolves once the lease is lost.
    pub(crate) async fn lost(&self) {
        loop {
            let signal = self.lost_signal.notified();
            tokio::pin!(signal);
            signal.as_mut().enable();
            if self.is_lost() {
                return;
            }
            let deadline = self.deadline();
            tokio::select! {
                () = signal => {}
                () = tokio::time::sleep_until(deadline) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_lease_is_lost_at_its_deadline_and_stays_lost() {
        let lease = Lease::new(7, Instant::now(), 30);
        assert!(!lease.is_lost());
        assert_eq!(lease.token(), 7);
        tokio::time::timeout(Duration::from_secs(2), lease.lost())
            .await
            .unwrap();
        assert!(lease.is_lost());
        lease.renewed(Instant::now(), Duration::from_secs(10));
        assert!(lease.is_lost(), "lost is sticky");
    }

    #[test]
    fn the_holder_counts_a_lease_lost_1_percent_and_2_ms_early() {
        let sent = Instant::now();
        let lease = Lease::new(1, sent, 30_000);
        assert_eq!(
            lease.deadline(),
            sent + Duration::from_millis(30_000 - 300 - 2)
        );
        lease.renewed(sent, Duration::from_secs(60));
        assert_eq!(
            lease.deadline(),
            sent + Duration::from_millis(60_000 - 600 - 2)
        );
        lease.extended(sent, 1_000);
        assert_eq!(
            lease.deadline(),
            sent + Duration::from_millis(1_000 - 10 - 2)
        );
        // A lease shorter than the margin is lost at once.
        let tiny = Lease::new(1, sent, 1);
        assert_eq!(tiny.deadline(), sent);
    }

    #[tokio::test]
    async fn renewal_moves_the_deadline_forward_only() {
        let lease = Lease::new(1, Instant::now(), 10_000);
        let before = lease.deadline();
        lease.renewed(Instant::now(), Duration::from_millis(1));
        assert_eq!(lease.deadline(), before);
        lease.renewed(Instant::now(), Duration::from_secs(60));
        assert!(lease.deadline() > before);
    }

    #[tokio::test]
    async fn a_reentrant_grant_may_shorten_the_deadline() {
        let lease = Lease::new(1, Instant::now(), 60_000);
        lease.extended(Instant::now(), 5);
        assert!(lease.deadline() < Instant::now() + Duration::from_secs(1));
        assert_eq!(lease.lease_ms(), 5);
    }

    #[tokio::test]
    async fn a_renewal_sent_before_a_reentrant_grant_does_not_count() {
        let start = Instant::now();
        let lease = Lease::new(1, start, 60_000);
        let renewal_sent = start + Duration::from_millis(1);
        lease.extended(start + Duration::from_millis(2), 50);
        lease.renewed(renewal_sent, Duration::from_secs(60));
        assert!(
            lease.deadline() < start + Duration::from_secs(1),
            "the short TTL stands"
        );
        lease.renewed(start + Duration::from_millis(3), Duration::from_secs(60));
        assert!(lease.deadline() > start + Duration::from_secs(59));
    }

    /// Renewals and grants go over two connections: a renewal sent after a reentrant grant was
    /// sent but before it was answered may have run first, so it does not count either.
    #[tokio::test]
    async fn a_renewal_sent_before_a_reentrant_grant_was_answered_does_not_count() {
        let start = Instant::now();
        let lease = Lease::new(1, start, 60_000);
        let grant_sent = Instant::now();
        let renewal_sent = Instant::now();
        tokio::time::sleep(Duration::from_millis(5)).await; // the grant's round trip
        lease.extended(grant_sent, 50);
        lease.renewed(renewal_sent, Duration::from_secs(60));
        assert!(
            lease.deadline() < start + Duration::from_secs(1),
            "the short TTL stands"
        );
        lease.renewed(Instant::now(), Duration::from_secs(60));
        assert!(lease.deadline() > start + Duration::from_secs(59));
    }

    #[tokio::test]
    async fn mark_lost_wakes_lost_waiters() {
        let lease = std::sync::Arc::new(Lease::new(1, Instant::now(), 60_000));
        let waiter = tokio::spawn({
            let lease = lease.clone();
            async move { lease.lost().await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        lease.mark_lost();
        tokio::time::timeout(Duration::from_secs(2), waiter)
            .await
            .unwrap()
            .unwrap();
    }
}
