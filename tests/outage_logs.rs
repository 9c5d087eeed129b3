//! What an outage of Redis costs in log lines, and in connection attempts: one WARN per
//! connection when it is lost, at most one more per ~10 s while it stays down, one INFO when it
//! is back; and reconnections spaced by a capped exponential backoff. A layer installed as this
//! process's global subscriber records every event of the crate; the tests take turns, so each
//! counts only the lines of its own outage.

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use support::{Mode, Proxy, RedisServer};
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

/// One event: its level, target, message and other fields (values as text).
#[derive(Debug, Clone)]
struct Line {
    level: Level,
    target: String,
    message: String,
    fields: BTreeMap<String, String>,
}

impl Line {
    fn field(&self, name: &str) -> &str {
        self.fields.get(name).map_or("", String::as_str)
    }
}

impl std::fmt::Display for Line {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.level, self.target, self.message)?;
        for (name, value) in &self.fields {
            write!(f, " {name}={value}")?;
        }
        Ok(())
    }
}

struct Fields<'a>(&'a mut Line);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.record_str(field, &format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0.message = value.to_owned();
        } else {
            self.0
                .fields
                .insert(field.name().to_owned(), value.to_owned());
        }
    }
}

/// Records every event of the crate's targets.
struct Count(Arc<Mutex<Vec<Line>>>);

impl<S: Subscriber> Layer<S> for Count {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let meta = event.metadata();
        if !meta.target().starts_with("ferrisson") {
            return;
        }
        let mut line = Line {
            level: *meta.level(),
            target: meta.target().to_owned(),
            message: String::new(),
            fields: BTreeMap::new(),
        };
        event.record(&mut Fields(&mut line));
        self.0.lock().unwrap().push(line);
    }
}

fn recorded() -> &'static Arc<Mutex<Vec<Line>>> {
    static LINES: OnceLock<Arc<Mutex<Vec<Line>>>> = OnceLock::new();
    LINES.get_or_init(|| {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let subscriber = tracing_subscriber::registry().with(Count(lines.clone()));
        tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
        lines
    })
}

/// One test at a time: the lines of one outage are not mixed with another's.
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Where the lines recorded from now on start.
fn mark() -> usize {
    recorded().lock().unwrap().len()
}

/// The lines recorded since `mark`, printed for the test's output.
fn since(mark: usize) -> Vec<Line> {
    let lines = recorded().lock().unwrap()[mark..].to_vec();
    for line in lines.iter().filter(|l| l.level <= Level::INFO) {
        eprintln!("{line}");
    }
    lines
}

/// WARN lines by the connection they are about, or by their message when they name none.
/// Lines about one lock (a call's repair that failed too, say) come once per call that failed,
/// which the caller hears of anyway: they are not outage noise, and are left out.
fn warnings_by_connection(lines: &[Line]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for line in lines.iter().filter(|l| l.level == Level::WARN) {
        let about = match line.field("connection") {
            "" if !line.field("lock").is_empty() => continue,
            "" => line.message.clone(),
            c => format!("{c} connection of {}", line.field("client")),
        };
        *counts.entry(about).or_default() += 1;
    }
    counts
}

/// The INFO lines that say a connection is back, by connection kind.
fn back(lines: &[Line]) -> Vec<&Line> {
    lines
        .iter()
        .filter(|l| l.level == Level::INFO && l.message.contains("back"))
        .collect()
}

/// A waiter that retries on errors (as a service would) until it has had the lock once.
fn waiter(lock: ferrisson::RLock) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            match lock.lock().await {
                Ok(guard) => {
                    let _ = guard.unlock().await;
                    return;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_three_second_outage_logs_once_per_connection_and_says_when_it_is_back() {
    let _turn = TURN.lock().await;
    recorded();
    let mut server = RedisServer::start();
    let holder = support::client(&server).await;
    let other = support::client(&server).await;
    let guard = holder.get_lock("outage").lock().await.unwrap();
    let waiters: Vec<_> = (0..2).map(|_| waiter(other.get_lock("outage"))).collect();
    tokio::time::sleep(Duration::from_millis(300)).await;

    let mark = mark();
    server.kill();
    tokio::time::sleep(Duration::from_secs(3)).await;
    server.restart(); // empty: the hold is gone, a waiter takes the lock
    let back_at = Instant::now();
    support::within(
        Duration::from_secs(5),
        "the lost hold noticed",
        guard.lost(),
    )
    .await;
    let noticed = back_at.elapsed();
    eprintln!("the lost hold was noticed {noticed:?} after the server was back");
    // The backoff's cap (1 s) and the heartbeat's retry (0.2 s), with room for a loaded machine.
    assert!(
        noticed < Duration::from_millis(2500),
        "noticed after {noticed:?}"
    );
    support::join_within(Duration::from_secs(15), waiters, "a waiter").await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let lines = since(mark);

    let warnings = warnings_by_connection(&lines);
    let total: usize = warnings.values().sum();
    eprintln!("WARN lines by connection: {warnings:?}; {total} in all");
    for (connection, count) in &warnings {
        assert!(
            *count <= 2,
            "{count} WARN lines about {connection} in a 3 s outage"
        );
    }
    // Each client has five connections (command, background, pub/sub, two of presence), and the
    // holder counts its hold lost once.
    assert!(
        total <= 10,
        "{total} WARN lines in a 3 s outage: {warnings:?}"
    );
    let back = back(&lines);
    for kind in ["pub/sub", "background"] {
        assert!(
            back.iter().any(|l| l.field("connection") == kind),
            "no INFO line says the {kind} connection is back"
        );
    }
    for line in back {
        assert!(
            !line.field("down_for").is_empty(),
            "the INFO line does not say how long it was down: {line}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_outage_reminds_at_most_every_ten_seconds_with_its_duration_and_attempts() {
    let _turn = TURN.lock().await;
    recorded();
    let mut server = RedisServer::start();
    let holder = support::client(&server).await;
    let other = support::client(&server).await;
    let guard = holder.get_lock("long-outage").lock().await.unwrap();
    let waiting = waiter(other.get_lock("long-outage"));
    tokio::time::sleep(Duration::from_millis(300)).await;

    let mark = mark();
    server.kill();
    tokio::time::sleep(Duration::from_secs(12)).await;
    server.restart();
    support::within(
        Duration::from_secs(5),
        "the lost hold noticed",
        guard.lost(),
    )
    .await;
    support::join_within(Duration::from_secs(15), [waiting], "the waiter").await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let lines = since(mark);

    let warnings = warnings_by_connection(&lines);
    eprintln!("WARN lines by connection: {warnings:?}");
    for (connection, count) in &warnings {
        // Lost at 0 s, still down at ~10 s.
        assert!(
            *count <= 2,
            "{count} WARN lines about {connection} in a 12 s outage"
        );
    }
    let reminders: Vec<&Line> = lines
        .iter()
        .filter(|l| l.level == Level::WARN && l.message.contains("still"))
        .collect();
    assert!(
        !reminders.is_empty(),
        "no WARN line says a connection is still down"
    );
    for line in reminders {
        assert!(
            !line.field("down_for").is_empty() && !line.field("attempts").is_empty(),
            "a reminder without its duration and attempts: {line}"
        );
    }
    assert!(
        back(&lines)
            .iter()
            .any(|l| l.field("connection") == "background"),
        "no INFO line says the background connection is back"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_server_logs_once_per_connection_and_says_when_it_is_back() {
    let _turn = TURN.lock().await;
    recorded();
    let server = RedisServer::start();
    let holder = support::client(&server).await;
    let other = support::client(&server).await;
    let guard = holder.get_lock("frozen").lock().await.unwrap();
    let waiting = waiter(other.get_lock("frozen"));
    tokio::time::sleep(Duration::from_millis(300)).await;

    let mark = mark();
    server.pause();
    tokio::time::sleep(Duration::from_secs(3)).await;
    server.resume();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let lines = since(mark);
    assert!(!guard.is_lost(), "the server kept the hold");
    guard.unlock().await.unwrap();
    support::join_within(Duration::from_secs(15), [waiting], "the waiter").await;

    let warnings = warnings_by_connection(&lines);
    let total: usize = warnings.values().sum();
    eprintln!("WARN lines by connection: {warnings:?}; {total} in all");
    for (connection, count) in &warnings {
        assert!(
            *count <= 2,
            "{count} WARN lines about {connection} in a 3 s freeze"
        );
    }
    // Each client has five connections (command, background, pub/sub, two of presence), and the
    // holder counts its hold lost once.
    assert!(
        total <= 10,
        "{total} WARN lines in a 3 s freeze: {warnings:?}"
    );
    assert!(
        back(&lines)
            .iter()
            .any(|l| l.field("connection") == "background"),
        "no INFO line says the background connection is back"
    );
}

/// The most connection attempts one connection may make in `window` of an outage: one at once
/// when it is lost, then one after each pause, a pause being at least half of 100 ms doubled
/// per failed attempt, capped at 1 s (see the backoff in docs/faults.md).
fn attempts_allowed(window: Duration) -> usize {
    let mut attempts = 1;
    let mut at = Duration::ZERO;
    let mut full = Duration::from_millis(100);
    loop {
        at += full / 2;
        if at > window {
            return attempts;
        }
        attempts += 1;
        full = (full * 2).min(Duration::from_secs(1));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnections_back_off_while_the_server_refuses() {
    let _turn = TURN.lock().await;
    recorded();
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port()).await;
    // Renewed holds (the heartbeat and the renewals use the background connection) and a
    // waiter (the pub/sub connection) through the proxy; the waiter's lock is held by a client
    // that does not go through it, and it re-checks only every 30 s, so its command connection
    // stays idle.
    // Without takeover: cut off for longer than its grace, a holder counts its holds lost
    // (tests/takeover.rs), and this one must keep its hold through the 6 s.
    let through = support::builder_for(&proxy.url())
        .recheck_interval(Duration::from_secs(30))
        .lock_starvation_threshold(None)
        .takeover_grace(None)
        .build()
        .await
        .unwrap();
    let direct = support::client(&server).await;
    let kept = through.get_lock("kept").lock().await.unwrap();
    let taken = direct.get_lock("taken").lock().await.unwrap();
    let waiting = tokio::spawn({
        let lock = through.get_lock("taken");
        async move { lock.lock().await.map(drop) }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;

    let window = Duration::from_secs(6);
    let before = proxy.accepted();
    proxy.set(Mode::Reset);
    tokio::time::sleep(window).await;
    let attempts = proxy.accepted() - before;
    proxy.set(Mode::Pass);
    // The background and pub/sub connections.
    let allowed = 2 * attempts_allowed(window);
    eprintln!("{attempts} connection attempts in {window:?}; the backoff allows {allowed}");
    assert!(
        attempts <= allowed,
        "{attempts} connection attempts in {window:?} (at most {allowed} with the backoff)"
    );

    // Back within about a second (the cap) of the server being reachable again.
    let passed = Instant::now();
    let reconnected = support::eventually(Duration::from_secs(3), || async {
        proxy.accepted() >= before + attempts + 2
    })
    .await;
    eprintln!(
        "reconnected {:?} after the proxy let connections through",
        passed.elapsed()
    );
    assert!(
        reconnected,
        "the client did not reconnect through the proxy"
    );
    assert!(!kept.is_lost(), "the server kept the hold");
    taken.unlock().await.unwrap();
    let woke = support::within(Duration::from_secs(10), "the waiter", waiting).await;
    assert!(woke.unwrap().is_ok(), "the waiter got the lock");
    kept.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_master_killed_and_replaced_logs_a_few_lines_per_connection() {
    let _turn = TURN.lock().await;
    recorded();
    let mut cluster = support::cluster::RedisCluster::start().await;
    let client = || {
        ferrisson::Client::builder()
            .cluster(cluster.seed_urls())
            .connection_timeout(Duration::from_millis(500))
            .response_timeout(Duration::from_millis(500))
            .build()
    };
    let holder = client().await.unwrap();
    let other = client().await.unwrap();
    let guard = holder.get_lock("node-outage").lock().await.unwrap();
    let waiting = waiter(other.get_lock("node-outage"));
    tokio::time::sleep(Duration::from_millis(300)).await;

    let mark = mark();
    let killed = cluster.kill_master_of("node-outage").await;
    let (promoted, took) = cluster.wait_promoted(killed).await;
    eprintln!("master {killed} killed; {promoted} promoted after {took:?}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    drop(guard);
    support::join_within(Duration::from_secs(15), [waiting], "the waiter").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let lines = since(mark);

    let warnings = warnings_by_connection(&lines);
    let total: usize = warnings.values().sum();
    eprintln!("WARN lines by connection: {warnings:?}; {total} in all");
    for (about, count) in &warnings {
        assert!(
            *count <= 2,
            "{count} WARN lines about {about} while a master was replaced"
        );
    }
}
