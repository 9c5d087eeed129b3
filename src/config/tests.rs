//! The builder's checks.

use super::*;

fn builder() -> ClientBuilder {
    ClientBuilder::default().url("redis://127.0.0.1:1")
}

#[test]
fn defaults_match_redisson() {
    let c = builder().check().unwrap();
    assert_eq!(c.watchdog_timeout, Duration::from_secs(30));
    assert_eq!(c.response_timeout, Duration::from_secs(3));
    assert_eq!(
        c.fair_queue.thread_wait,
        Duration::from_secs(300),
        "Redisson's threadWaitTime"
    );
}

#[test]
fn the_thread_wait_time_outlasts_the_queue_timeout() {
    let c = builder()
        .fair_lock_queue_timeout(Duration::from_secs(2))
        .fair_lock_thread_wait_time(Duration::from_secs(2))
        .check()
        .unwrap();
    assert_eq!(
        c.fair_queue,
        FairQueue {
            timeout: Duration::from_secs(2),
            thread_wait: Duration::from_secs(2)
        }
    );
    for b in [
        builder().fair_lock_thread_wait_time(Duration::from_secs(4)),
        builder()
            .fair_lock_queue_timeout(Duration::from_secs(600))
            .fair_lock_thread_wait_time(Duration::from_secs(599)),
    ] {
        assert!(
            matches!(b.check(), Err(Error::Config(m)) if m.contains("at least fair_lock_queue_timeout"))
        );
    }
    assert!(matches!(
        builder()
            .fair_lock_queue_timeout(Duration::from_millis(30))
            .fair_lock_thread_wait_time(Duration::from_millis(29))
            .check(),
        Err(Error::Config(m)) if m.contains("between")
    ));
}

#[test]
fn missing_url_is_a_config_error() {
    let err = ClientBuilder::default().check().unwrap_err();
    assert!(matches!(err, Error::Config(m) if m.contains("no server given")));
}

#[test]
fn topologies_are_checked() {
    let config = |b: ClientBuilder| b.check().map(|c| c.topology);
    let seeds = ["redis://127.0.0.1:7000", "redis://127.0.0.1:7001"];
    assert!(matches!(
        config(ClientBuilder::default().cluster(seeds)),
        Ok(Topology::Cluster(s)) if s.len() == 2
    ));
    assert!(matches!(
        config(ClientBuilder::default().sentinel("m", ["redis://127.0.0.1:26379"])),
        Ok(Topology::Sentinel { master, .. }) if master == "m"
    ));
    let refused = |b: ClientBuilder, what: &str| matches!(b.check(), Err(Error::Config(m)) if m.contains(what));
    let none: [&str; 0] = [];
    assert!(refused(ClientBuilder::default().cluster(none), "no URL"));
    assert!(refused(
        ClientBuilder::default().cluster(["redis://a:1", "rediss://b:2"]),
        "mix"
    ));
    assert!(refused(
        ClientBuilder::default().cluster(["http://a:1"]),
        "is not a Redis URL"
    ));
    assert!(refused(
        ClientBuilder::default().sentinel("", ["redis://a:1"]),
        "empty"
    ));
    assert!(refused(
        ClientBuilder::default().url("redis://a:1").cluster(seeds),
        "not several"
    ));
}

#[test]
fn zero_and_tiny_durations_are_refused() {
    assert!(matches!(
        builder().watchdog_timeout(Duration::ZERO).check(),
        Err(Error::Config(_))
    ));
    assert!(matches!(
        builder().watchdog_timeout(Duration::from_millis(5)).check(),
        Err(Error::Config(_))
    ));
    assert!(matches!(
        builder().response_timeout(Duration::ZERO).check(),
        Err(Error::Config(_))
    ));
    assert!(matches!(
        builder().connection_timeout(Duration::ZERO).check(),
        Err(Error::Config(_))
    ));
    assert!(matches!(
        builder().recheck_interval(Duration::ZERO).check(),
        Err(Error::Config(_))
    ));
}

#[test]
fn huge_durations_are_refused_not_overflowed() {
    for b in [
        builder().watchdog_timeout(Duration::MAX),
        builder().response_timeout(Duration::MAX),
        builder().connection_timeout(Duration::MAX),
        builder().recheck_interval(Duration::MAX),
        builder().fair_lock_queue_timeout(Duration::MAX),
        builder().fair_lock_thread_wait_time(Duration::MAX),
    ] {
        assert!(matches!(b.check(), Err(Error::Config(m)) if m.contains("between")));
    }
}

#[test]
fn latch_outlives_every_resend() {
    let c = builder().check().unwrap();
    assert!(c.unlock_latch_ttl() > c.round_trip_cap() * 2);
}

#[test]
fn self_waits_warn_after_3_s_by_default_and_a_zero_threshold_is_refused() {
    let c = builder().check().unwrap();
    assert_eq!(c.self_wait.warning, Duration::from_secs(3));
    assert!(!c.self_wait.fail);
    let c = builder()
        .self_wait_warning(Duration::from_millis(300))
        .fail_on_self_wait(true)
        .check()
        .unwrap();
    assert_eq!(c.self_wait.warning, Duration::from_millis(300));
    assert!(c.self_wait.fail);
    for refused in [Duration::ZERO, Duration::MAX] {
        assert!(matches!(
            builder().self_wait_warning(refused).check(),
            Err(Error::Config(m)) if m.contains("self_wait_warning") && m.contains("between")
        ));
    }
}

#[test]
fn drain_grace_defaults_below_kubernetes_and_may_be_zero() {
    let c = builder().check().unwrap();
    assert_eq!(c.drain_grace, Duration::from_secs(25));
    let zero = builder().drain_grace(Duration::ZERO).check().unwrap();
    assert_eq!(zero.drain_grace, Duration::ZERO);
    assert!(matches!(
        builder().drain_grace(Duration::MAX).check(),
        Err(Error::Config(m)) if m.contains("drain_grace")
    ));
}

#[test]
fn takeover_is_on_by_default_and_off_with_synced_grants_a_cluster_or_no_identity() {
    let grace = |b: ClientBuilder| b.check().unwrap().takeover_grace;
    assert_eq!(grace(builder()), Some(Duration::from_secs(2)));
    assert_eq!(grace(builder().takeover_grace(None)), None);
    let synced = || builder().sync_replicas(1, Duration::from_millis(100));
    assert_eq!(grace(synced()), None, "synced grants survive failovers");
    assert_eq!(
        grace(synced().takeover_grace(Some(Duration::from_secs(5)))),
        Some(Duration::from_secs(5))
    );
    assert_eq!(grace(builder().identity(false)), None);
    let cluster = ClientBuilder::default().cluster(["redis://127.0.0.1:1"]);
    assert_eq!(grace(cluster), None);
    for bad in [
        Duration::ZERO,
        Duration::from_millis(999),
        Duration::from_secs(86_401),
    ] {
        assert!(matches!(
            builder().takeover_grace(Some(bad)).check(),
            Err(Error::Config(m)) if m.contains("takeover_grace")
        ));
    }
}
