//! The instrumentation on its own, without a server: what it costs in heap allocations when
//! nothing records, and what a recorder installed after the client was built receives (a
//! thread-local one, which `tests/metrics.rs`, with its one global recorder, cannot show).

use std::pin::pin;
use std::task::{Poll, Waker};

use super::*;

// Counts allocations (the crate forbids the unsafe code of a counting allocator of its own).
#[global_allocator]
static ALLOCATOR: dhat::Alloc = dhat::Alloc;

fn context(_lock_names: bool) -> Context {
    Context {
        address: "127.0.0.1".into(),
        port: Some(6379),
        #[cfg(feature = "metrics")]
        lock_names: _lock_names,
    }
}

/// Polls a future that never waits.
fn ready<F: Future>(future: F) -> F::Output {
    let polled = pin!(future).poll(&mut std::task::Context::from_waker(Waker::noop()));
    match polled {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("the future waited"),
    }
}

/// What one lock's acquire (refused once, then granted), hold and release call in here, then
/// a cancelled acquire of it and a permit's hold.
fn cycle(context: &Context, name: &str) {
    let acquire = Acquire::start(context, "lock", name, None);
    assert!(!ready(acquire.attempt(async { Ok(false) })).unwrap());
    assert!(ready(acquire.attempt(async { Ok(true) })).unwrap());
    assert!(acquire.finish(Ok(true)).unwrap());
    let labels = context.labels("lock", name);
    lock_hold_began(&labels, 1);
    lock_hold_ended(&labels, 0, tokio::time::Instant::now());
    Release::start(context, "lock", name, 7)
        .finish(Ok(()))
        .unwrap();
    drop(Acquire::start(context, "lock", name, None));
    Held::began(&context.labels("permit", name)).end();
}

/// No recorder, no subscriber: the instrumentation allocates nothing. (With the `metrics`
/// feature it once built a label vector for every metric call, six a lock and unlock.)
#[test]
fn nothing_recording_costs_no_allocation() {
    let context = context(false);
    // The first cycle registers the span callsites and builds the metric keys.
    cycle(&context, "observe:quiet");
    let _profiler = dhat::Profiler::builder().testing().build();
    // dhat counts every thread's allocations, and other tests run beside this one: the least
    // of the runs is this cycle's own. Runs go on, a little apart, until one allocates nothing
    // or a few seconds pass, by when the other unit tests (about a second in all) have ended.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let mut fewest = u64::MAX;
    while fewest > 0 && std::time::Instant::now() < until {
        let before = dhat::HeapStats::get().total_blocks;
        cycle(&context, "observe:quiet");
        fewest = fewest.min(dhat::HeapStats::get().total_blocks - before);
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(
        fewest, 0,
        "every cycle allocated; the least: {fewest} block(s)"
    );
}

#[cfg(feature = "metrics")]
mod recorded {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    use super::super::metrics::{self as observed, KINDS, Keys, SERIES};
    use super::*;

    /// Runs `calls` with a fresh thread-local recorder; what it got, as `name{labels} = value`.
    fn recorded(calls: impl FnOnce()) -> BTreeMap<String, String> {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        ::metrics::with_local_recorder(&recorder, calls);
        snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .map(|(key, _, _, value)| {
                let key = key.key();
                let labels: Vec<String> = key
                    .labels()
                    .map(|l| format!("{}={}", l.key(), l.value()))
                    .collect();
                let value = match value {
                    DebugValue::Counter(n) => format!("counter {n}"),
                    DebugValue::Gauge(v) => format!("gauge {v}"),
                    DebugValue::Histogram(v) => format!("{} samples", v.len()),
                };
                (format!("{}{{{}}}", key.name(), labels.join(",")), value)
            })
            .collect()
    }

    /// The client (its context) was built before any recorder existed; a recorder set later,
    /// on this thread only, still gets every value, under the README's names and labels.
    #[test]
    fn a_recorder_installed_later_gets_every_value() {
        for lock_names in [false, true] {
            let context = context(lock_names);
            let got = recorded(|| cycle(&context, "observe:late"));
            let lock = if lock_names { ",lock=observe:late" } else { "" };
            let want: BTreeMap<String, String> = [
                (
                    "ferrisson_acquire_total{kind=lock,outcome=granted",
                    "counter 1",
                ),
                (
                    "ferrisson_acquire_total{kind=lock,outcome=cancelled",
                    "counter 1",
                ),
                (
                    "ferrisson_acquire_wait_seconds{kind=lock,outcome=granted",
                    "1 samples",
                ),
                (
                    "ferrisson_acquire_wait_seconds{kind=lock,outcome=cancelled",
                    "1 samples",
                ),
                ("ferrisson_waiters{kind=lock", "gauge 0"),
                ("ferrisson_leases_held{kind=lock", "gauge 0"),
                ("ferrisson_hold_seconds{kind=lock", "1 samples"),
                (
                    "ferrisson_release_total{kind=lock,outcome=released",
                    "counter 1",
                ),
                ("ferrisson_leases_held{kind=permit", "gauge 0"),
                ("ferrisson_hold_seconds{kind=permit", "1 samples"),
            ]
            .into_iter()
            .map(|(key, value)| (format!("{key}{lock}}}"), value.to_owned()))
            .collect();
            assert_eq!(got, want, "lock_names: {lock_names}");
        }
    }

    /// Every outcome and reason lands in the series its label names, for a listed kind (keys
    /// built once) and for one not listed (keys built at each call).
    #[test]
    fn every_outcome_and_reason_has_its_own_series() {
        let context = context(false);
        for kind in ["fair", "unlisted"] {
            let labels = context.labels(kind, "observe:outcomes");
            let outcomes = [
                Outcome::Granted,
                Outcome::TimedOut,
                Outcome::Error,
                Outcome::Cancelled,
            ];
            let releases = [
                ReleaseOutcome::Released,
                ReleaseOutcome::Lost,
                ReleaseOutcome::Error,
            ];
            let reasons = [Lost::NotHeld, Lost::Expired];
            let got = recorded(|| {
                for outcome in outcomes {
                    observed::acquired(&labels, outcome, Some(Duration::ZERO));
                }
                for outcome in releases {
                    observed::released(&labels, outcome);
                }
                for why in reasons {
                    observed::lease_lost(&labels, why);
                }
                observed::handover(&labels);
            });
            let mut want = BTreeMap::new();
            let mut expect = |key: String, value: &str| want.insert(key, value.to_owned());
            for outcome in outcomes.map(Outcome::as_str) {
                let labels = format!("{{kind={kind},outcome={outcome}}}");
                expect(format!("ferrisson_acquire_total{labels}"), "counter 1");
                expect(
                    format!("ferrisson_acquire_wait_seconds{labels}"),
                    "1 samples",
                );
            }
            for outcome in releases.map(ReleaseOutcome::as_str) {
                let key = format!("ferrisson_release_total{{kind={kind},outcome={outcome}}}");
                expect(key, "counter 1");
            }
            for reason in reasons.map(Lost::as_str) {
                let key = format!("ferrisson_leases_lost_total{{kind={kind},reason={reason}}}");
                expect(key, "counter 1");
            }
            expect(
                format!("ferrisson_handovers_total{{kind={kind}}}"),
                "counter 1",
            );
            assert_eq!(got, want, "kind {kind}");
        }
    }

    /// The keys built once per kind are the keys a call would build.
    #[test]
    fn every_kind_shares_the_keys_it_would_build() {
        for kind in KINDS {
            let Keys::Shared(keys) = Keys::new(kind, None) else {
                panic!("{kind} has no shared keys");
            };
            for (key, series) in keys.iter().zip(&SERIES) {
                assert_eq!(*key, observed::build(kind, None, series));
            }
        }
        assert!(matches!(
            Keys::new("lock", Some("a")),
            Keys::PerCall(Some(_))
        ));
    }
}
