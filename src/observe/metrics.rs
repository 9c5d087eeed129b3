//! The metrics, through the `metrics` facade (feature `metrics`). With no recorder installed
//! each call costs the facade's check for one (an atomic load) and the building of a key.

use std::time::Duration;

use ::metrics::{Label, Unit, counter, describe_counter, describe_gauge, describe_histogram};
use ::metrics::{gauge, histogram};

use super::{Labels, Outcome};

const ACQUIRE_TOTAL: &str = "ferrisson_acquire_total";
const ACQUIRE_WAIT: &str = "ferrisson_acquire_wait_seconds";
const HOLD: &str = "ferrisson_hold_seconds";
const LEASES_HELD: &str = "ferrisson_leases_held";
const WAITERS: &str = "ferrisson_waiters";
const RELEASE_TOTAL: &str = "ferrisson_release_total";
const LEASES_LOST: &str = "ferrisson_leases_lost_total";
const RENEWAL_FAILURES: &str = "ferrisson_renewal_failures_total";
const HANDOVERS: &str = "ferrisson_handovers_total";

/// Tells the recorder installed now what each metric means.
pub(super) fn describe() {
    describe_counter!(
        ACQUIRE_TOTAL,
        Unit::Count,
        "Acquires ended, by kind and outcome (granted, timed_out, error, cancelled)."
    );
    describe_histogram!(
        ACQUIRE_WAIT,
        Unit::Seconds,
        "Time from the start of an acquire to its end, by kind and outcome."
    );
    describe_histogram!(
        HOLD,
        Unit::Seconds,
        "Time a lease was held: from its grant to the release (or drop) of its last guard."
    );
    describe_gauge!(
        LEASES_HELD,
        Unit::Count,
        "Leases held by this process now (a lost lease counts until its guard is gone)."
    );
    describe_gauge!(
        WAITERS,
        Unit::Count,
        "Acquires of this process waiting now (refused at least once, not ended yet)."
    );
    describe_counter!(
        RELEASE_TOTAL,
        Unit::Count,
        "Releases ended, by kind and outcome (released, lost, error)."
    );
    describe_counter!(
        LEASES_LOST,
        Unit::Count,
        "Leases the watchdog found lost, by kind and reason (not_held, expired)."
    );
    describe_counter!(
        RENEWAL_FAILURES,
        Unit::Count,
        "Lease renewals that failed (Redis unreachable or erroring); retried until the deadline."
    );
    describe_counter!(
        HANDOVERS,
        Unit::Count,
        "Releases that handed the lock straight to a waiter of the same client."
    );
}

/// The labels of `labels` plus `extra`.
fn with(labels: &Labels, extra: Option<(&'static str, &'static str)>) -> Vec<Label> {
    let mut all = Vec::with_capacity(3);
    all.push(Label::from_static_parts("kind", labels.kind));
    if let Some((key, value)) = extra {
        all.push(Label::from_static_parts(key, value));
    }
    if let Some(lock) = &labels.lock {
        all.push(Label::new("lock", lock.to_string()));
    }
    all
}

pub(super) fn acquired(labels: &Labels, outcome: Outcome, waited: Duration) {
    let outcome = Some(("outcome", outcome.as_str()));
    counter!(ACQUIRE_TOTAL, with(labels, outcome)).increment(1);
    histogram!(ACQUIRE_WAIT, with(labels, outcome)).record(waited.as_secs_f64());
}

pub(super) fn waiters(labels: &Labels, delta: f64) {
    gauge!(WAITERS, with(labels, None)).increment(delta);
}

pub(super) fn held(labels: &Labels, delta: f64) {
    gauge!(LEASES_HELD, with(labels, None)).increment(delta);
}

pub(super) fn hold_ended(labels: &Labels, held: Duration) {
    gauge!(LEASES_HELD, with(labels, None)).decrement(1.0);
    histogram!(HOLD, with(labels, None)).record(held.as_secs_f64());
}

pub(super) fn released(labels: &Labels, outcome: &'static str) {
    counter!(RELEASE_TOTAL, with(labels, Some(("outcome", outcome)))).increment(1);
}

pub(super) fn lease_lost(labels: &Labels, reason: &'static str) {
    counter!(LEASES_LOST, with(labels, Some(("reason", reason)))).increment(1);
}

pub(super) fn renewals_failed(leases: usize) {
    counter!(RENEWAL_FAILURES).increment(leases as u64);
}

pub(super) fn handover(labels: &Labels) {
    counter!(HANDOVERS, with(labels, None)).increment(1);
}
