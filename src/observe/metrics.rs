//! The metrics, through the `metrics` facade (feature `metrics`).
//!
//! Every call asks the facade for the recorder of the moment (the thread's local one, else the
//! global one, else its no-op), so a recorder installed after the client was built gets every
//! later value. The facade offers no way to ask whether a recorder is installed, so the call is
//! made every time; what keeps it cheap is its key. The keys of every kind's series are built
//! once per process, so a call without the `lock` label allocates nothing, recorder or not.
//! With the `lock` label (`metrics_lock_names(true)`), each call builds its key.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use ::metrics::{Counter, Gauge, Histogram, Key, Label, Level, Metadata, Unit, with_recorder};
use ::metrics::{describe_counter, describe_gauge, describe_histogram};

use super::{Labels, Lost, Outcome, ReleaseOutcome};

const ACQUIRE_TOTAL: &str = "ferrisson_acquire_total";
const ACQUIRE_WAIT: &str = "ferrisson_acquire_wait_seconds";
const HOLD: &str = "ferrisson_hold_seconds";
const LEASES_HELD: &str = "ferrisson_leases_held";
const WAITERS: &str = "ferrisson_waiters";
const RELEASE_TOTAL: &str = "ferrisson_release_total";
const LEASES_LOST: &str = "ferrisson_leases_lost_total";
const RENEWAL_FAILURES: &str = "ferrisson_renewal_failures_total";
const HANDOVERS: &str = "ferrisson_handovers_total";

/// Every kind the crate labels its objects with (the README's "Observing locks"). A kind
/// missing here still gets its metrics, through keys built at each call.
pub(super) const KINDS: [&str; 9] = [
    "lock",
    "fair",
    "read",
    "write",
    "fenced",
    "mutex",
    "semaphore",
    "permit",
    "latch",
];

/// A metric and the label it carries beside `kind` (and `lock`), if any.
pub(super) type Series = (&'static str, Option<(&'static str, &'static str)>);

// Where each metric's series start in `SERIES`; an outcome or reason adds its offset.
const ACQUIRE_TOTAL_AT: usize = 0;
const ACQUIRE_WAIT_AT: usize = 4;
const HOLD_AT: usize = 8;
const LEASES_HELD_AT: usize = 9;
const WAITERS_AT: usize = 10;
const RELEASE_TOTAL_AT: usize = 11;
const LEASES_LOST_AT: usize = 14;
const HANDOVERS_AT: usize = 16;

/// Every series of one kind. The offsets follow the order of [`Outcome`], [`ReleaseOutcome`] and
/// [`Lost`]; a unit test holds the strings here to theirs.
pub(super) const SERIES: [Series; 17] = [
    (ACQUIRE_TOTAL, Some(("outcome", "granted"))),
    (ACQUIRE_TOTAL, Some(("outcome", "timed_out"))),
    (ACQUIRE_TOTAL, Some(("outcome", "error"))),
    (ACQUIRE_TOTAL, Some(("outcome", "cancelled"))),
    (ACQUIRE_WAIT, Some(("outcome", "granted"))),
    (ACQUIRE_WAIT, Some(("outcome", "timed_out"))),
    (ACQUIRE_WAIT, Some(("outcome", "error"))),
    (ACQUIRE_WAIT, Some(("outcome", "cancelled"))),
    (HOLD, None),
    (LEASES_HELD, None),
    (WAITERS, None),
    (RELEASE_TOTAL, Some(("outcome", "released"))),
    (RELEASE_TOTAL, Some(("outcome", "lost"))),
    (RELEASE_TOTAL, Some(("outcome", "error"))),
    (LEASES_LOST, Some(("reason", "not_held"))),
    (LEASES_LOST, Some(("reason", "expired"))),
    (HANDOVERS, None),
];

const fn acquire_offset(outcome: Outcome) -> usize {
    match outcome {
        Outcome::Granted => 0,
        Outcome::TimedOut => 1,
        Outcome::Error => 2,
        Outcome::Cancelled => 3,
    }
}

const fn release_offset(outcome: ReleaseOutcome) -> usize {
    match outcome {
        ReleaseOutcome::Released => 0,
        ReleaseOutcome::Lost => 1,
        ReleaseOutcome::Error => 2,
    }
}

const fn lost_offset(why: Lost) -> usize {
    match why {
        Lost::NotHeld => 0,
        Lost::Expired => 1,
    }
}

/// Where one object's metric calls find their keys.
#[derive(Clone)]
pub(super) enum Keys {
    /// Its kind's keys, built once for the process (indexed like [`SERIES`]).
    Shared(&'static [Key]),
    /// Built at each call: with this `lock` label, or for a kind not in [`KINDS`].
    PerCall(Option<Arc<str>>),
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Keys::Shared(_) => f.write_str("Shared"),
            Keys::PerCall(lock) => f.debug_tuple("PerCall").field(lock).finish(),
        }
    }
}

impl Keys {
    /// The keys of an object of `kind`, labelled with its name `lock` if that is given.
    pub(super) fn new(kind: &'static str, lock: Option<&str>) -> Self {
        match lock {
            None => shared(kind).map_or(Keys::PerCall(None), Keys::Shared),
            Some(lock) => Keys::PerCall(Some(Arc::from(lock))),
        }
    }
}

/// The keys of `kind`'s series without the `lock` label, if it is a listed kind.
fn shared(kind: &str) -> Option<&'static [Key]> {
    static TABLE: OnceLock<Vec<Box<[Key]>>> = OnceLock::new();
    let at = KINDS.iter().position(|k| *k == kind)?;
    let table = TABLE.get_or_init(|| {
        KINDS
            .iter()
            .map(|kind| {
                // Retained: a recorder clones a key it has not seen, and this makes that cheap.
                SERIES
                    .iter()
                    .map(|series| build(kind, None, series).to_retained())
                    .collect()
            })
            .collect()
    });
    Some(&table[at])
}

/// The key of `series` for an object of `kind`, labelled `kind`, the series' own label, then
/// `lock`.
pub(super) fn build(kind: &'static str, lock: Option<&Arc<str>>, series: &Series) -> Key {
    let (name, extra) = *series;
    let mut labels = Vec::with_capacity(3);
    labels.push(Label::from_static_parts("kind", kind));
    if let Some((key, value)) = extra {
        labels.push(Label::from_static_parts(key, value));
    }
    if let Some(lock) = lock {
        labels.push(Label::new("lock", Arc::clone(lock)));
    }
    Key::from_parts(name, labels)
}

/// What the facade's macros would pass from this module.
static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

/// Runs `on` with the recorder of the moment with the key of series `at` of `labels`.
fn register<T>(
    labels: &Labels,
    at: usize,
    on: impl FnOnce(&dyn ::metrics::Recorder, &Key) -> T,
) -> T {
    let call = |key: &Key| with_recorder(|recorder| on(recorder, key));
    match &labels.keys {
        Keys::Shared(keys) => call(&keys[at]),
        Keys::PerCall(lock) => call(&build(labels.kind, lock.as_ref(), &SERIES[at])),
    }
}

fn counter(labels: &Labels, at: usize) -> Counter {
    register(labels, at, |recorder, key| {
        recorder.register_counter(key, &METADATA)
    })
}

fn gauge(labels: &Labels, at: usize) -> Gauge {
    register(labels, at, |recorder, key| {
        recorder.register_gauge(key, &METADATA)
    })
}

fn histogram(labels: &Labels, at: usize) -> Histogram {
    register(labels, at, |recorder, key| {
        recorder.register_histogram(key, &METADATA)
    })
}

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

/// `waited`: how long the acquire took, if it was timed.
pub(super) fn acquired(labels: &Labels, outcome: Outcome, waited: Option<Duration>) {
    let offset = acquire_offset(outcome);
    counter(labels, ACQUIRE_TOTAL_AT + offset).increment(1);
    if let Some(waited) = waited {
        histogram(labels, ACQUIRE_WAIT_AT + offset).record(waited.as_secs_f64());
    }
}

pub(super) fn waiters(labels: &Labels, delta: f64) {
    gauge(labels, WAITERS_AT).increment(delta);
}

pub(super) fn held(labels: &Labels, delta: f64) {
    gauge(labels, LEASES_HELD_AT).increment(delta);
}

pub(super) fn hold_ended(labels: &Labels, held: Duration) {
    gauge(labels, LEASES_HELD_AT).decrement(1.0);
    histogram(labels, HOLD_AT).record(held.as_secs_f64());
}

pub(super) fn released(labels: &Labels, outcome: ReleaseOutcome) {
    counter(labels, RELEASE_TOTAL_AT + release_offset(outcome)).increment(1);
}

pub(super) fn lease_lost(labels: &Labels, why: Lost) {
    counter(labels, LEASES_LOST_AT + lost_offset(why)).increment(1);
}

pub(super) fn renewals_failed(leases: usize) {
    static KEY: Key = Key::from_static_name(RENEWAL_FAILURES);
    with_recorder(|recorder| recorder.register_counter(&KEY, &METADATA)).increment(leases as u64);
}

pub(super) fn handover(labels: &Labels) {
    counter(labels, HANDOVERS_AT).increment(1);
}
