//! A wait for your own hold is never silent. Written the Java way, a second `lock()` of a lock
//! the task holds (in a helper, or a read holder asking for the write side) waits for itself
//! for ever: after `self_wait_warning` it logs a WARN naming the lock and both places
//! (`file:line:col` of the hold's acquisition and of the waiting call), again every ten times
//! as long; correct code whose holder gives back in time logs nothing; `fail_on_self_wait`
//! refuses such an acquisition at once with `Error::SelfWait` (async and blocking), nested
//! acquisitions and other tasks' waits unaffected; operators see the places in the client's
//! identity and in snapshots. A layer installed as this process's global subscriber records
//! every event of the crate; each test looks at the events of its own lock names.

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use ferrisson::{Error, LockGuard, RLock};
use futures::future::join_all;
use support::{RedisServer, builder, eventually, within};
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

/// The threshold of these tests' clients.
const AFTER: Duration = Duration::from_millis(300);

/// One event: when, its level, message and other fields (values as text).
#[derive(Debug, Clone)]
struct Line {
    at: Instant,
    level: Level,
    message: String,
    fields: BTreeMap<String, String>,
}

impl Line {
    fn field(&self, name: &str) -> &str {
        self.fields.get(name).map_or("", String::as_str)
    }
}

impl Visit for Line {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.record_str(field, &format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "message" => self.message = value.to_owned(),
            name => {
                self.fields.insert(name.to_owned(), value.to_owned());
            }
        }
    }
}

struct Record(Arc<Mutex<Vec<Line>>>);

impl<S: Subscriber> Layer<S> for Record {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        if !event.metadata().target().starts_with("ferrisson") {
            return;
        }
        let mut line = Line {
            at: Instant::now(),
            level: *event.metadata().level(),
            message: String::new(),
            fields: BTreeMap::new(),
        };
        event.record(&mut line);
        self.0.lock().unwrap().push(line);
    }
}

fn recorded() -> &'static Arc<Mutex<Vec<Line>>> {
    static LINES: OnceLock<Arc<Mutex<Vec<Line>>>> = OnceLock::new();
    LINES.get_or_init(|| {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let subscriber = tracing_subscriber::registry().with(Record(lines.clone()));
        tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
        lines
    })
}

/// The WARN lines about lock `name` so far.
fn warnings(name: &str) -> Vec<Line> {
    recorded()
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.level == Level::WARN && l.field("lock") == name)
        .cloned()
        .collect()
}

/// `file:line:` of a line of this file: a place's beginning (its column follows).
fn place(line: u32) -> String {
    format!("{}:{line}:", file!())
}

/// A client whose waits for their own holds warn after [`AFTER`].
async fn warning_client(server: &RedisServer) -> ferrisson::Client {
    recorded();
    builder(server)
        .self_wait_warning(AFTER)
        .build()
        .await
        .expect("a client of the test server")
}

/// A client that refuses such waits.
async fn failing_client(server: &RedisServer) -> ferrisson::Client {
    builder(server)
        .fail_on_self_wait(true)
        .build()
        .await
        .expect("a client of the test server")
}

/// Code ported from Java: a helper that takes the lock its caller holds.
async fn helper(lock: &RLock) -> ferrisson::Result<LockGuard> {
    lock.lock().await
}
const HELPER_LINE: u32 = line!() - 2;

/// Checks the warnings of a wait that began at `began` and lasted until it was dropped ~4 s
/// later: the first within 0.3–1 s, naming both places; a second ~3 s after the first.
fn check_two_warnings(name: &str, began: Instant, held: u32, called: u32) {
    let found = warnings(name);
    for line in &found {
        eprintln!(
            "{:?} after: {} {:?}",
            line.at - began,
            line.message,
            line.fields
        );
    }
    assert_eq!(found.len(), 2, "{found:#?}");
    let first = found[0].at - began;
    assert!(
        (AFTER..Duration::from_secs(1)).contains(&first),
        "first warning after {first:?}"
    );
    let again = found[1].at - found[0].at;
    assert!(
        (Duration::from_millis(2700)..Duration::from_millis(3600)).contains(&again),
        "again after {again:?}"
    );
    for line in &found {
        assert!(line.field("held_at").starts_with(&place(held)), "{line:?}");
        assert!(
            line.field("called_at").starts_with(&place(called)),
            "{line:?}"
        );
        assert!(line.message.contains(line.field("held_at")), "{line:?}");
        assert!(line.message.contains(line.field("called_at")), "{line:?}");
        for cure in ["with_lock", "guard.scope(..)", "guard.reenter()"] {
            assert!(line.message.contains(cure), "{cure} in {line:?}");
        }
    }
    let waited: u64 = found[1].field("waited_ms").parse().unwrap();
    assert!(waited >= 3000, "{waited}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_helper_that_locks_again_is_warned_of_with_both_places_and_again_later() {
    let server = RedisServer::start();
    let client = warning_client(&server).await;
    let lock = client.get_lock("self:helper");
    let task = tokio::spawn(async move {
        let (guard, held) = (lock.lock().await.unwrap(), line!());
        let began = Instant::now();
        let waited = tokio::time::timeout(Duration::from_millis(4200), helper(&lock)).await;
        assert!(waited.is_err(), "it waits for itself");
        guard.unlock().await.unwrap();
        (began, held)
    });
    let (began, held) = task.await.unwrap();
    check_two_warnings("self:helper", began, held, HELPER_LINE);
    let message = &warnings("self:helper")[0].message;
    assert!(message.contains("its own task keeps"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_asking_for_the_write_side_outside_a_scope_is_warned_of_too() {
    let server = RedisServer::start();
    let client = warning_client(&server).await;
    let rw = client.get_read_write_lock("self:upgrade");
    let (read, write) = (rw.read_lock(), rw.write_lock());
    let (reading, held) = (read.lock().await.unwrap(), line!());
    let began = Instant::now();
    let upgrade = write.try_lock_for(Duration::from_millis(4200), None);
    let called = line!() - 1;
    assert!(upgrade.await.unwrap().is_none(), "it waits for itself");
    reading.unlock().await.unwrap();
    check_two_warnings("self:upgrade", began, held, called);
    let message = &warnings("self:upgrade")[0].message;
    // The test's body runs in no task: its thread keeps the hold.
    assert!(message.contains("its own thread keeps"), "{message}");
    assert!(
        message.contains("releases its read hold first"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn correct_code_whose_holders_give_back_in_time_logs_nothing() {
    let server = RedisServer::start();
    let client = warning_client(&server).await;
    let work = |lock: RLock| async move {
        let guard = lock.lock().await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        guard.unlock().await.unwrap();
    };
    // Futures of one task, one lock: each waits for a hold of its own task, given back soon.
    let joined = client.get_lock("self:joined");
    let all = tokio::spawn(async move { join_all((0..3).map(|_| work(joined.clone()))).await });
    within(Duration::from_secs(5), "join_all", all)
        .await
        .unwrap();

    // A dispatcher: its guards go to workers, and its next lock() waits for a worker.
    let lock = client.get_lock("self:dispatched");
    let dispatcher = tokio::spawn(async move {
        let mut workers = Vec::new();
        for _ in 0..4 {
            let guard = lock.lock().await.unwrap();
            workers.push(tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                guard.unlock().await.unwrap();
            }));
        }
        for worker in workers {
            worker.await.unwrap();
        }
    });
    within(Duration::from_secs(5), "dispatcher", dispatcher)
        .await
        .unwrap();

    // A wait for another task's hold, longer than the threshold.
    let lock = client.get_lock("self:other");
    let (held_tx, held_rx) = tokio::sync::oneshot::channel();
    let holder = {
        let lock = lock.clone();
        tokio::spawn(async move {
            let guard = lock.lock().await.unwrap();
            held_tx.send(()).unwrap();
            tokio::time::sleep(AFTER * 3).await;
            guard.unlock().await.unwrap();
        })
    };
    held_rx.await.unwrap();
    let waited = within(Duration::from_secs(5), "other's hold", lock.lock()).await;
    waited.unwrap().unlock().await.unwrap();
    holder.await.unwrap();

    tokio::time::sleep(AFTER + Duration::from_millis(100)).await;
    for name in ["self:joined", "self:dispatched", "self:other"] {
        assert!(warnings(name).is_empty(), "{name}: {:#?}", warnings(name));
    }
}

/// `result` is `Error::SelfWait` for `name`, held at line `held` and called at `called`.
fn self_wait<T: std::fmt::Debug>(result: ferrisson::Result<T>, name: &str, held: u32, called: u32) {
    match result {
        Err(Error::SelfWait {
            name: n,
            held_at,
            called_at,
        }) => {
            assert_eq!(n, name);
            assert!(held_at.starts_with(&place(held)), "{held_at}");
            assert!(called_at.starts_with(&place(called)), "{called_at}");
        }
        other => panic!("{name}: SelfWait expected, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_fast_refuses_every_wait_for_its_own_hold_at_once() {
    let server = RedisServer::start();
    let client = failing_client(&server).await;
    const N: &str = "fast:lock";
    let lock = client.get_lock(N);
    let (guard, held) = (lock.lock().await.unwrap(), line!());
    let started = Instant::now();
    self_wait(lock.lock().await, N, held, line!());
    self_wait(lock.try_lock().await, N, held, line!());
    let wait = Duration::from_secs(5);
    self_wait(lock.try_lock_for(wait, None).await, N, held, line!());
    let lease = Duration::from_secs(5);
    self_wait(lock.lock_with_lease(lease).await, N, held, line!());
    // A fenced handle of the name is the same lock.
    let fenced = client.get_fenced_lock(N);
    let token = fenced.lock_and_get_token().await;
    self_wait(token, N, held, line!() - 1);
    assert!(started.elapsed() < Duration::from_secs(1), "at once");

    // Nested acquisitions are not refused: in `with_lock`'s work, a guard's scope, `reenter`.
    let nested = guard.scope(lock.lock()).await.unwrap();
    let again = guard.reenter().await.unwrap();
    assert_eq!(guard.hold_count().await.unwrap(), 3);
    nested.unlock().await.unwrap();
    again.unlock().await.unwrap();
    guard.unlock().await.unwrap();
    let other = client.get_lock("fast:nested");
    let inner = other
        .with_lock(|_| async { other.lock().await?.unlock().await })
        .await;
    inner.unwrap().unwrap();

    // Nor is a wait for another task's hold.
    let guard = lock.lock().await.unwrap();
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.lock().await.map(|g| g.fencing_token()) })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiter.is_finished(), "another task waits");
    guard.unlock().await.unwrap();
    within(Duration::from_secs(5), "the other task", waiter)
        .await
        .unwrap()
        .expect("granted once given back");

    // A read holder asking for the write side, outside a scope.
    let rw = client.get_read_write_lock("fast:rw");
    let (reading, held) = (rw.read_lock().lock().await.unwrap(), line!());
    self_wait(rw.write_lock().lock().await, "fast:rw", held, line!());
    reading.unlock().await.unwrap();

    // An RMutex: never reentrant, so even inside its own scope.
    let mutex = client.get_mutex("fast:mutex");
    let (holding, held) = (mutex.lock().await.unwrap(), line!());
    self_wait(mutex.try_lock().await, "fast:mutex", held, line!());
    let refused = holding.scope(mutex.lock()).await;
    self_wait(refused, "fast:mutex", held, line!() - 1);
    holding.unlock().await.unwrap();

    // A MultiLock names the part refused.
    let multi = ferrisson::MultiLock::new([client.get_lock("fast:a"), client.get_lock("fast:b")]);
    let (b, held) = (client.get_lock("fast:b").lock().await.unwrap(), line!());
    match multi.lock().await {
        Err(Error::Part { name, error, .. }) => {
            assert_eq!(name, "fast:b");
            self_wait::<()>(Err(*error), "fast:b", held, line!() - 3);
        }
        other => panic!("{other:?}"),
    }
    b.unlock().await.unwrap();
    assert!(!client.get_lock("fast:a").is_locked().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_fast_refuses_a_thread_s_wait_for_its_own_hold_in_the_blocking_api() {
    let server = RedisServer::start();
    let url = server.url();
    let checked = tokio::task::spawn_blocking(move || {
        let client = ferrisson::blocking::Client::builder()
            .url(url)
            .fail_on_self_wait(true)
            .build()
            .unwrap();
        const B: &str = "fast:blocking";
        let lock = client.get_lock(B);
        let (guard, held) = (lock.lock().unwrap(), line!());
        self_wait(lock.lock(), B, held, line!());
        self_wait(lock.try_lock(), B, held, line!());
        let wait = Duration::from_secs(5);
        self_wait(lock.try_lock_for(wait, None), B, held, line!());
        let fenced = client.get_fenced_lock(B);
        self_wait(fenced.lock_and_get_token(), B, held, line!());
        let mutex = client.get_mutex("fast:blocking-mutex");
        let (holding, mutex_held) = (mutex.lock().unwrap(), line!());
        self_wait(mutex.lock(), "fast:blocking-mutex", mutex_held, line!());
        holding.unlock().unwrap();
        // Nested on the thread: granted.
        let nested = guard.scope(|| lock.lock()).unwrap();
        nested.unlock().unwrap();
        guard.unlock().unwrap();
        let other = client.get_lock("fast:blocking-with");
        other
            .with_lock(|_| other.lock()?.unlock())
            .unwrap()
            .unwrap();
        // Another thread waits as ever.
        let guard = lock.lock().unwrap();
        let waiter = {
            let lock = lock.clone();
            std::thread::spawn(move || lock.lock().map(drop))
        };
        std::thread::sleep(Duration::from_millis(200));
        assert!(!waiter.is_finished(), "another thread waits");
        guard.unlock().unwrap();
        waiter.join().unwrap().unwrap();
    });
    within(Duration::from_secs(20), "the blocking checks", checked)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operators_see_where_holds_were_taken_and_who_waits_for_itself() {
    let server = RedisServer::start();
    let client = warning_client(&server).await;
    let lock = client.get_lock("ops:held");
    let (guard, held) = (lock.lock().await.unwrap(), line!());
    // The client's own holder says where, at once and without a round trip more.
    let snapshot = lock.snapshot().await.unwrap();
    let acquired = snapshot.holders[0].acquired_at.clone().unwrap();
    assert!(acquired.starts_with(&place(held)), "{acquired}");
    let owner = snapshot.holders[0].owner.clone();
    // Another client's snapshot does not know: the identity says.
    let other = support::client(&server).await;
    let seen = other.get_lock("ops:held").snapshot().await.unwrap();
    assert_eq!(seen.holders[0].acquired_at, None);

    // A task that waits for itself.
    let waiting = client.get_read_write_lock("ops:rw");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (places_tx, places) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let (reading, held) = (waiting.read_lock().lock().await.unwrap(), line!());
        let (upgrade, called) = (waiting.write_lock(), line!() + 1);
        let wait = upgrade.lock();
        places_tx.send((held, called)).unwrap();
        tokio::select! {
            _ = wait => panic!("granted"),
            _ = stopped => {}
        }
        reading.unlock().await.unwrap();
    });
    let (rw_held, rw_called) = places.await.unwrap();
    let identity = || async { other.identity_of(client.id()).await.unwrap().unwrap() };
    let shown = eventually(Duration::from_secs(6), || async {
        let me = identity().await;
        let read_hold = me.hold_sites.iter().any(|h| h.lock == "ops:rw");
        me.acquired_at("ops:held", &owner).is_some() && !me.self_waits.is_empty() && read_hold
    });
    assert!(shown.await, "{:#?}", identity().await);
    let me = identity().await;
    let at = me.acquired_at("ops:held", &owner).unwrap();
    assert!(at.starts_with(&place(held)), "{at}");
    assert_eq!(me.hold_sites_total, me.hold_sites.len());
    let wait = &me.self_waits[0];
    assert_eq!(wait.lock, "ops:rw");
    assert!(wait.held_at.starts_with(&place(rw_held)), "{wait:?}");
    assert!(wait.called_at.starts_with(&place(rw_called)), "{wait:?}");
    assert!(!wait.thread, "a task waits: {wait:?}");
    assert!(
        wait.waited >= AFTER && wait.waited < Duration::from_secs(10),
        "{wait:?}"
    );
    assert!(wait.since_ms >= me.started_ms, "{wait:?} {me:?}");

    // Gone from the identity once the wait and the holds are.
    stop.send(()).unwrap();
    task.await.unwrap();
    guard.unlock().await.unwrap();
    let cleared = eventually(Duration::from_secs(4), || async {
        let me = identity().await;
        me.self_waits.is_empty() && me.hold_sites.is_empty()
    });
    assert!(cleared.await, "{:#?}", identity().await);
}

/// A hold taken by `with_lock`, `try_with_lock_for` and a combinator's `with_lock` is said to be
/// taken where the caller called them, not inside the library (async and blocking).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_taken_by_with_lock_are_placed_at_the_callers_line() {
    let server = RedisServer::start();
    let client = warning_client(&server).await;
    let lock = client.get_lock("placed:with_lock");
    let probe = &lock;
    let snap = || async move {
        probe.snapshot().await.unwrap().holders[0]
            .acquired_at
            .clone()
    };
    let (at, line) = (lock.with_lock(|_| snap()).await.unwrap(), line!());
    assert!(at.unwrap().starts_with(&place(line)));
    let wait = Duration::from_secs(1);
    let bounded = lock.try_with_lock_for(wait, |_| snap());
    let line = line!() - 1;
    let at = bounded.await.unwrap();
    assert!(at.unwrap().unwrap().starts_with(&place(line)));
    let mutex = client.get_mutex("placed:mutex");
    let probe = &mutex;
    let work = |_| async move {
        probe.snapshot().await.unwrap().holders[0]
            .acquired_at
            .clone()
    };
    let (at, line) = (mutex.with_lock(work).await.unwrap(), line!());
    assert!(at.unwrap().starts_with(&place(line)));
    let multi =
        ferrisson::MultiLock::new([client.get_lock("placed:a"), client.get_lock("placed:b")]);
    let part = client.get_lock("placed:b");
    let part = &part;
    let work = |_| async move {
        part.snapshot().await.unwrap().holders[0]
            .acquired_at
            .clone()
    };
    let (at, line) = (multi.with_lock(work).await.unwrap(), line!());
    assert!(at.unwrap().starts_with(&place(line)));

    // Blocking, on a thread of its own.
    let url = server.url();
    let (at, line) = tokio::task::spawn_blocking(move || {
        let client = ferrisson::blocking::Client::builder()
            .url(url)
            .build()
            .unwrap();
        let lock = client.get_lock("placed:blocking");
        let probe = client.get_lock("placed:blocking");
        let work = |_| probe.snapshot().unwrap().holders[0].acquired_at.clone();
        (lock.with_lock(work).unwrap(), line!())
    })
    .await
    .unwrap();
    assert!(at.unwrap().starts_with(&place(line)), "blocking");
}

/// Under `fail_on_self_wait`, a second read of the task's own read-locked lock is no self-wait
/// (readers share): granted at once. A write beside the task's own read is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_fast_lets_a_task_read_twice() {
    let server = RedisServer::start();
    let client = failing_client(&server).await;
    let rw = client.get_read_write_lock("fast:reads");
    let first = rw.read_lock().lock().await.unwrap();
    let second = rw.read_lock().lock().await.unwrap();
    assert!(matches!(
        rw.write_lock().try_lock().await,
        Err(Error::SelfWait { .. })
    ));
    second.unlock().await.unwrap();
    first.unlock().await.unwrap();
}

/// A RedLock's rounds (one try per instance each) are watched too: a second `lock()` of a
/// RedLock its own task holds is warned of, naming both places.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redlock_waiting_for_its_own_task_s_hold_is_warned_of() {
    let server = RedisServer::start();
    let client = warning_client(&server).await;
    const N: &str = "warned:redlock";
    let redlock = ferrisson::RedLock::new([client.get_lock(N)]);
    let (guard, held) = (redlock.lock().await.unwrap(), line!());
    let waiting = redlock.lock();
    let called = line!() - 1;
    let waited = tokio::time::timeout(Duration::from_millis(1200), waiting).await;
    assert!(waited.is_err(), "it waits for its own hold");
    let found = warnings(N);
    assert!(!found.is_empty(), "warned of");
    assert!(
        found[0].field("held_at").starts_with(&place(held)),
        "{found:?}"
    );
    assert!(
        found[0].field("called_at").starts_with(&place(called)),
        "{found:?}"
    );
    guard.unlock().await.unwrap();
}
