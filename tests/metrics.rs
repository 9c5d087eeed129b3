//! Metrics (feature `metrics`), read back from a real recorder: `metrics-util`'s
//! `DebuggingRecorder`, installed globally once for this test process. The tests run one at a
//! time (a lock serializes them) and each checks the change it made, so they do not see each
//! other's numbers; gauges are checked as absolute values, which every test leaves at zero.

#![cfg(feature = "metrics")]

mod support;

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use ferrisson::Error;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use support::{RedisServer, builder, client};

/// Every value recorded since the process started: the debugging recorder's snapshots hand
/// out what changed since the previous one (counters and gauges are reset by each), so they
/// are added up here.
#[derive(Default)]
struct Totals {
    counters: HashMap<String, u64>,
    gauges: HashMap<String, f64>,
    histograms: HashMap<String, Vec<f64>>,
    described: HashMap<String, String>,
}

struct Recorder {
    snapshotter: Snapshotter,
    totals: Mutex<Totals>,
}

fn recorder() -> &'static Recorder {
    static RECORDER: OnceLock<Recorder> = OnceLock::new();
    RECORDER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("the only recorder of this process");
        Recorder {
            snapshotter,
            totals: Mutex::new(Totals::default()),
        }
    })
}

/// One test at a time: they share the recorder.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

impl Recorder {
    /// Adds what changed since the last look and returns a copy of the totals.
    fn read(&self) -> Snapshot {
        let mut totals = self.totals.lock().unwrap();
        for (key, _unit, description, value) in self.snapshotter.snapshot().into_vec() {
            // `name{k=v,...}` with the labels sorted.
            let key = key.key();
            let mut labels: Vec<String> = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            labels.sort();
            let name = format!("{}{{{}}}", key.name(), labels.join(","));
            if let Some(d) = description {
                totals
                    .described
                    .insert(key.name().to_owned(), d.to_string());
            }
            match value {
                DebugValue::Counter(n) => *totals.counters.entry(name).or_default() += n,
                DebugValue::Gauge(d) => *totals.gauges.entry(name).or_default() += d.into_inner(),
                DebugValue::Histogram(v) => totals
                    .histograms
                    .entry(name)
                    .or_default()
                    .extend(v.into_iter().map(|x| x.into_inner())),
            }
        }
        Snapshot {
            counters: totals.counters.clone(),
            gauges: totals.gauges.clone(),
            histograms: totals.histograms.clone(),
            described: totals.described.clone(),
        }
    }
}

#[derive(Clone, Debug)]
struct Snapshot {
    counters: HashMap<String, u64>,
    gauges: HashMap<String, f64>,
    histograms: HashMap<String, Vec<f64>>,
    described: HashMap<String, String>,
}

impl Snapshot {
    fn counter(&self, key: &str) -> u64 {
        self.counters.get(key).copied().unwrap_or(0)
    }
    fn gauge(&self, key: &str) -> f64 {
        self.gauges.get(key).copied().unwrap_or(0.0)
    }
    fn samples(&self, key: &str) -> &[f64] {
        self.histograms.get(key).map_or(&[], Vec::as_slice)
    }

    /// What changed since `before`: counters and histogram samples (gauges stay absolute).
    fn since(&self, before: &Snapshot) -> Snapshot {
        let mut delta = self.clone();
        for (k, v) in &mut delta.counters {
            *v -= before.counter(k);
        }
        delta.counters.retain(|_, v| *v > 0);
        for (k, v) in &mut delta.histograms {
            v.drain(..before.samples(k).len());
        }
        delta.histograms.retain(|_, v| !v.is_empty());
        delta
    }

    /// Every gauge is back to zero.
    fn assert_gauges_zero(&self) {
        for (k, v) in &self.gauges {
            assert_eq!(*v, 0.0, "gauge {k} drifted: {:#?}", self.gauges);
        }
    }
}

/// Polls the recorder until `check` holds (generous: a loaded machine).
async fn eventually(what: &str, check: impl Fn(&Snapshot) -> bool) -> Snapshot {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let now = recorder().read();
        if check(&now) {
            return now;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never: {what}; last {now:#?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The scenario of issue 13: three grants, one timeout, one lease lost (forced open by another
/// client, found by the watchdog), checked counter by counter, sample by sample, gauge by gauge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_grants_one_timeout_one_lost_lease() {
    let _serial = SERIAL.lock().await;
    let server = RedisServer::start();
    let before = recorder().read();
    // Renewals every 100 ms, so the watchdog finds the forced-open lock soon.
    let client = builder(&server)
        .watchdog_timeout(Duration::from_millis(300))
        .build()
        .await
        .unwrap();
    let other = support::client(&server).await;

    // Grant 1, held at least 50 ms.
    let lock = client.get_lock("metrics:one");
    let guard = lock.lock().await.unwrap();
    let held = eventually("one lease held", |s| {
        s.gauge("ferrisson_leases_held{kind=lock}") == 1.0
    })
    .await;
    assert_eq!(held.gauge("ferrisson_waiters{kind=lock}"), 0.0);
    tokio::time::sleep(Duration::from_millis(50)).await;
    guard.unlock().await.unwrap();

    // Grant 2, and a contender that waits 200 ms for nothing: one timeout, one waiter meanwhile.
    let guard = lock.lock().await.unwrap();
    let contender = client.get_lock("metrics:one");
    let waiting = tokio::spawn(async move {
        contender
            .try_lock_for(Duration::from_millis(200), None)
            .await
    });
    eventually("one waiter", |s| {
        s.gauge("ferrisson_waiters{kind=lock}") == 1.0
    })
    .await;
    assert!(waiting.await.unwrap().unwrap().is_none(), "timed out");
    let after_wait = recorder().read();
    assert_eq!(after_wait.gauge("ferrisson_waiters{kind=lock}"), 0.0);
    guard.unlock().await.unwrap();

    // Grant 3, forced open by another client: the watchdog finds it lost.
    let doomed = client.get_lock("metrics:two");
    let guard = doomed.lock().await.unwrap();
    assert!(other.get_lock("metrics:two").force_unlock().await.unwrap());
    tokio::time::timeout(Duration::from_secs(10), guard.lost())
        .await
        .expect("the watchdog finds the lease lost");
    assert!(matches!(guard.unlock().await, Err(Error::LockLost { .. })));

    let now = recorder().read();
    let delta = now.since(&before);
    let expected_counters: HashMap<String, u64> = [
        ("ferrisson_acquire_total{kind=lock,outcome=granted}", 3),
        ("ferrisson_acquire_total{kind=lock,outcome=timed_out}", 1),
        ("ferrisson_release_total{kind=lock,outcome=released}", 2),
        ("ferrisson_release_total{kind=lock,outcome=lost}", 1),
        ("ferrisson_leases_lost_total{kind=lock,reason=not_held}", 1),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    assert_eq!(delta.counters, expected_counters, "{delta:#?}");

    let granted_waits = delta.samples("ferrisson_acquire_wait_seconds{kind=lock,outcome=granted}");
    assert_eq!(granted_waits.len(), 3, "{delta:#?}");
    let timed_out = delta.samples("ferrisson_acquire_wait_seconds{kind=lock,outcome=timed_out}");
    assert_eq!(timed_out.len(), 1);
    assert!(
        (0.2..5.0).contains(&timed_out[0]),
        "waited its 200 ms budget: {timed_out:?}"
    );
    let holds = delta.samples("ferrisson_hold_seconds{kind=lock}");
    assert_eq!(holds.len(), 3, "{delta:#?}");
    assert!(holds[0] >= 0.05, "the first hold lasted 50 ms: {holds:?}");
    assert_eq!(
        delta.histograms.len(),
        3,
        "no other histogram: {:#?}",
        delta.histograms
    );
    // No lock-name label by default, anywhere.
    for key in delta.counters.keys().chain(delta.histograms.keys()) {
        assert!(!key.contains("lock=metrics"), "{key}");
    }
    now.assert_gauges_zero();
    assert!(now.described["ferrisson_acquire_total"].contains("outcome"));
    assert!(now.described.contains_key("ferrisson_hold_seconds"));
}

/// Acquires dropped mid-wait (a `tokio::time::timeout` around them) give their waiter back: the
/// gauge returns to zero, and each counts as one cancelled acquire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_waits_leave_no_waiter_behind() {
    let _serial = SERIAL.lock().await;
    let server = RedisServer::start();
    let before = recorder().read();
    let client = client(&server).await;
    let holder = client.get_lock("metrics:busy");
    let guard = holder.lock().await.unwrap();
    let semaphore = client.get_semaphore("metrics:empty");
    let latch = client.get_count_down_latch("metrics:closed");
    assert!(latch.try_set_count(1).await.unwrap());

    let mut waits = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let lock = client.get_lock("metrics:busy");
        waits
            .spawn(async move { tokio::time::timeout(Duration::from_secs(30), lock.lock()).await });
    }
    let fair = client.get_fair_lock("metrics:busy-fair");
    let fair_guard = fair.lock().await.unwrap();
    let fair_waiter = client.get_fair_lock("metrics:busy-fair");
    let sem = semaphore.clone();
    let late = latch.clone();
    let others = tokio::spawn(async move {
        let cancelled = Duration::from_millis(300);
        let a = tokio::time::timeout(cancelled, fair_waiter.lock()).await;
        let b = tokio::time::timeout(cancelled, sem.acquire(1)).await;
        let c = tokio::time::timeout(cancelled, late.await_zero()).await;
        (a.is_err(), b.is_err(), c.is_err())
    });
    eventually("four lock waiters", |s| {
        s.gauge("ferrisson_waiters{kind=lock}") == 4.0
    })
    .await;
    waits.abort_all();
    while waits.join_next().await.is_some() {}
    assert_eq!(others.await.unwrap(), (true, true, true), "all cancelled");

    let now = eventually("no waiter left", |s| {
        s.gauge("ferrisson_waiters{kind=lock}") == 0.0
    })
    .await;
    let delta = now.since(&before);
    assert_eq!(
        delta.counter("ferrisson_acquire_total{kind=lock,outcome=cancelled}"),
        4
    );
    for kind in ["fair", "semaphore", "latch"] {
        assert_eq!(
            delta.counter(&format!(
                "ferrisson_acquire_total{{kind={kind},outcome=cancelled}}"
            )),
            1,
            "{kind}: {delta:#?}"
        );
    }
    guard.unlock().await.unwrap();
    fair_guard.unlock().await.unwrap();
    recorder().read().assert_gauges_zero();
}

/// Every acquiring object reports under its own kind; permits count as held leases while their
/// guard lives; a client that opts in labels its metrics with the lock name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_reports_and_lock_names_are_opt_in() {
    let _serial = SERIAL.lock().await;
    let server = RedisServer::start();
    let before = recorder().read();
    let client = builder(&server)
        .metrics_lock_names(true)
        .build()
        .await
        .unwrap();

    client
        .get_lock("k:lock")
        .lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    let fair = client.get_fair_lock("k:fair").lock().await.unwrap();
    fair.unlock().await.unwrap();
    let rw = client.get_read_write_lock("k:rw");
    rw.read_lock().lock().await.unwrap().unlock().await.unwrap();
    rw.write_lock()
        .lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    let (_, fenced) = client
        .get_fenced_lock("k:fenced")
        .lock_and_get_token()
        .await
        .unwrap();
    fenced.unlock().await.unwrap();
    client
        .get_mutex("k:mutex")
        .lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    let semaphore = client.get_semaphore("k:semaphore");
    semaphore.try_set_permits(1).await.unwrap();
    semaphore.acquire(1).await.unwrap();
    semaphore.release(1).await.unwrap();
    let permits = client.get_permit_expirable_semaphore("k:permit");
    permits.try_set_permits(1).await.unwrap();
    let permit = permits.acquire().await.unwrap();
    let holding = recorder().read();
    assert_eq!(
        holding.gauge("ferrisson_leases_held{kind=permit,lock=k:permit}"),
        1.0
    );
    permit.release().await.unwrap();
    let latch = client.get_count_down_latch("k:latch");
    latch.await_zero().await.unwrap(); // not set: open

    let now = recorder().read();
    let delta = now.since(&before);
    for (kind, name) in [
        ("lock", "k:lock"),
        ("fair", "k:fair"),
        ("read", "k:rw"),
        ("write", "k:rw"),
        ("fenced", "k:fenced"),
        ("mutex", "k:mutex"),
        ("semaphore", "k:semaphore"),
        ("permit", "k:permit"),
        ("latch", "k:latch"),
    ] {
        let key = format!("ferrisson_acquire_total{{kind={kind},lock={name},outcome=granted}}");
        assert_eq!(delta.counter(&key), 1, "{key}: {delta:#?}");
    }
    for kind in ["lock", "fair", "read", "write", "fenced", "mutex", "permit"] {
        let holds = delta
            .histograms
            .iter()
            .filter(|(k, _)| k.starts_with(&format!("ferrisson_hold_seconds{{kind={kind},")))
            .map(|(_, v)| v.len())
            .sum::<usize>();
        assert_eq!(holds, 1, "one hold of kind {kind}: {delta:#?}");
    }
    assert_eq!(
        delta.counter("ferrisson_release_total{kind=permit,lock=k:permit,outcome=released}"),
        1
    );
    now.assert_gauges_zero();
}

/// A release that hands the lock to a waiter of the same client counts as a handover.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handovers_are_counted() {
    let _serial = SERIAL.lock().await;
    let server = RedisServer::start();
    let before = recorder().read();
    let client = client(&server).await;
    let first = client.get_lock("metrics:handed");
    let guard = first.lock().await.unwrap();
    let second = client.get_lock("metrics:handed");
    let asked = server.calls("evalsha").await;
    let waiter = tokio::spawn(async move { second.lock().await });
    eventually("a waiter", |s| {
        s.gauge("ferrisson_waiters{kind=lock}") == 1.0
    })
    .await;
    // Only a waiter that asked Redis, subscribed and napped may be handed the lock (see
    // tests/handover.rs): its first attempt reaches Redis, and a pause lets the rest come back.
    assert!(
        server.calls_reach("evalsha", asked + 1).await,
        "the waiter never asked Redis"
    );
    tokio::time::sleep(Duration::from_millis(250)).await;
    guard.unlock().await.unwrap();
    let handed = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    handed.unlock().await.unwrap();
    let now = recorder().read();
    let delta = now.since(&before);
    assert_eq!(
        delta.counter("ferrisson_handovers_total{kind=lock}"),
        1,
        "{delta:#?}"
    );
    assert_eq!(
        delta.counter("ferrisson_acquire_total{kind=lock,outcome=granted}"),
        2
    );
    now.assert_gauges_zero();
}

/// Renewals that fail (Redis paused) are counted, and a lease whose renewals failed until its
/// deadline is counted lost as `expired`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_renewals_and_an_expired_lease() {
    let _serial = SERIAL.lock().await;
    let server = RedisServer::start();
    let before = recorder().read();
    let client = support::builder(&server)
        .watchdog_timeout(Duration::from_millis(600))
        .response_timeout(Duration::from_millis(100))
        .build()
        .await
        .unwrap();
    let guard = client.get_lock("metrics:paused").lock().await.unwrap();
    server.pause();
    let lost = tokio::time::timeout(Duration::from_secs(10), guard.lost()).await;
    // Leave the watchdog time to give the lease up (its next round after the deadline).
    let now = eventually("the lease counted lost", |s| {
        s.since(&before)
            .counter("ferrisson_leases_lost_total{kind=lock,reason=expired}")
            == 1
    })
    .await;
    server.resume();
    assert!(lost.is_ok(), "the lease ran out");
    let delta = now.since(&before);
    assert!(
        delta.counter("ferrisson_renewal_failures_total{}") >= 1,
        "{delta:#?}"
    );
    assert!(matches!(
        guard.unlock().await,
        Err(Error::LockLost { .. }) | Err(Error::Redis(_))
    ));
    recorder().read().assert_gauges_zero();
}
