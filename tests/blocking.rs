//! `ferrisson::blocking` from plain threads: every acquisition is an owner, contenders exclude each
//! other (checked by fencing tokens), a thread locks again only nested in its hold's scope, leases are renewed while the holding thread sleeps, dropped
//! guards and killed processes free their locks, and calls made from async code fail with
//! `Error::InsideRuntime` instead of blocking a runtime's thread.

mod support;

use std::collections::{HashMap, VecDeque};
use std::io::BufRead;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferrisson::Error;
use ferrisson::blocking::Client;
use support::{Checker, RedisServer};

/// A blocking client of `server` with the harness's test-sized timeouts.
fn client(server: &RedisServer) -> Client {
    builder(server).build().expect("a blocking client connects")
}

fn builder(server: &RedisServer) -> ferrisson::blocking::ClientBuilder {
    Client::builder()
        .url(server.url())
        .response_timeout(Duration::from_millis(800))
        .connection_timeout(Duration::from_millis(800))
}

/// Joins every thread, re-raising a thread's panic.
fn join_all<T>(threads: Vec<std::thread::JoinHandle<T>>) -> Vec<T> {
    threads
        .into_iter()
        .map(|t| t.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
        .collect()
}

/// `rounds` lock-hold-unlock rounds of `lock` on this thread, recorded by `checker`.
fn contend(lock: &ferrisson::blocking::RLock, checker: &Checker, rounds: usize) {
    for _ in 0..rounds {
        let guard = lock.lock().expect("lock");
        let start = checker.enter();
        std::thread::sleep(Duration::from_millis(2));
        checker.exit(guard.fencing_token(), start);
        guard.unlock().expect("unlock");
    }
}

#[test]
fn threads_of_one_client_exclude_each_other_and_lock_again_only_nested() {
    let server = RedisServer::start();
    let client = client(&server);
    let lock = client.get_lock("one-client");
    let checker = Arc::new(Checker::default());
    let threads = (0..6)
        .map(|_| {
            let (lock, checker) = (lock.clone(), checker.clone());
            std::thread::spawn(move || {
                contend(&lock, &checker, 8);
                // Inside `with_lock`'s closure the thread locks again: nested, with the first
                // hold's token.
                let (token, inner_token, count, held) = lock
                    .with_lock(|token| {
                        let inner = lock.lock().unwrap();
                        let count = lock.hold_count().unwrap();
                        let held = lock.is_held().unwrap();
                        let inner_token = inner.fencing_token();
                        inner.unlock().unwrap();
                        (token, inner_token, count, held)
                    })
                    .unwrap();
                assert_eq!((inner_token, count, held), (token, 2, true));
                // With a guard by hand: another lock() on the thread is another acquisition;
                // inside the guard's scope it is nested.
                let outer = lock.lock().unwrap();
                assert!(lock.try_lock().unwrap().is_none());
                let inner = outer.scope(|| lock.lock()).unwrap();
                assert_eq!(outer.fencing_token(), inner.fencing_token());
                assert_eq!(outer.hold_count().unwrap(), 2);
                assert!(outer.scope(|| lock.is_held()).unwrap());
                assert!(!lock.is_held().unwrap(), "outside any scope");
                inner.unlock().unwrap();
                outer.unlock().unwrap();
            })
        })
        .collect();
    join_all(threads);
    assert_eq!(checker.verify().len(), 48);
    assert!(!lock.is_locked().unwrap());
    assert_eq!(client.live_owners(), 0);
}

#[test]
fn threads_of_several_clients_exclude_each_other() {
    let server = RedisServer::start();
    let clients: Vec<Client> = (0..3).map(|_| client(&server)).collect();
    let checker = Arc::new(Checker::default());
    let threads = (0..6)
        .map(|i| {
            let lock = clients[i % 3].get_lock("several-clients");
            let checker = checker.clone();
            std::thread::spawn(move || contend(&lock, &checker, 8))
        })
        .collect();
    join_all(threads);
    assert_eq!(checker.verify().len(), 48);
}

#[test]
fn a_thread_pool_locks_one_name_per_item() {
    let server = RedisServer::start();
    let client = client(&server);
    // 60 items over 6 names: items sharing a name contend across the pool's threads.
    let queue: Arc<Mutex<VecDeque<usize>>> = Arc::new(Mutex::new((0..60).collect()));
    let checkers: Arc<HashMap<usize, Checker>> =
        Arc::new((0..6).map(|n| (n, Checker::default())).collect());
    let done = Arc::new(Mutex::new(Vec::new()));
    let pool = (0..4)
        .map(|_| {
            let (client, queue) = (client.clone(), queue.clone());
            let (checkers, done) = (checkers.clone(), done.clone());
            std::thread::spawn(move || {
                loop {
                    let Some(item) = queue.lock().unwrap().pop_front() else {
                        return;
                    };
                    let name = item % 6;
                    let guard = client.get_lock(&format!("item:{name}")).lock().unwrap();
                    let start = checkers[&name].enter();
                    std::thread::sleep(Duration::from_millis(1));
                    checkers[&name].exit(guard.fencing_token(), start);
                    done.lock().unwrap().push(item);
                    guard.unlock().unwrap();
                }
            })
        })
        .collect();
    join_all(pool);
    for checker in checkers.values() {
        assert_eq!(checker.verify().len(), 10);
    }
    let mut done = done.lock().unwrap().clone();
    done.sort_unstable();
    assert_eq!(done, (0..60).collect::<Vec<_>>(), "every item once");
}

#[test]
fn a_lease_is_renewed_while_the_holding_thread_sleeps() {
    let server = RedisServer::start();
    let lease = Duration::from_millis(300);
    let client = builder(&server).watchdog_timeout(lease).build().unwrap();
    let other = client_of_its_own(&server);
    let lock = client.get_lock("sleeper");
    let guard = lock.lock().unwrap();
    let token = guard.fencing_token();
    // This thread does nothing for three leases: the client's own thread renews.
    std::thread::sleep(lease * 3 + Duration::from_millis(150));
    assert!(
        !guard.is_lost(),
        "the lease was lost while the thread slept"
    );
    assert!(!guard.wait_lost(Duration::from_millis(50)).unwrap());
    let ttl = lock.remaining_ttl().unwrap().expect("a lease on the lock");
    assert!(ttl > Duration::ZERO && ttl <= lease, "ttl {ttl:?}");
    let contender = other.get_lock("sleeper");
    let taken = std::thread::spawn(move || contender.try_lock().unwrap().is_some());
    assert!(!taken.join().unwrap(), "another client got a held lock");
    guard.unlock().unwrap();
    let (next, _next_guard) = other
        .get_fenced_lock("sleeper")
        .lock_and_get_token()
        .unwrap();
    assert!(next > token);
}

fn client_of_its_own(server: &RedisServer) -> Client {
    client(server)
}

#[test]
fn a_dropped_guard_is_released_without_waiting_for_its_lease() {
    let server = RedisServer::start();
    let client = client(&server);
    let other = client_of_its_own(&server);
    let guard = client.get_lock("dropped").lock().unwrap();
    let token = guard.fencing_token();
    let dropped = Instant::now();
    drop(guard);
    // The 30 s lease would keep it; the background release frees it at once.
    let next = other
        .get_lock("dropped")
        .try_lock_for(Duration::from_secs(5), None)
        .unwrap()
        .expect("the dropped guard's lock is free");
    assert!(dropped.elapsed() < Duration::from_secs(5));
    assert!(next.fencing_token() > token);
    next.unlock().unwrap();
    // A guard dropped on another thread than its owner's releases the same way.
    let guard = client.get_lock("dropped").lock().unwrap();
    std::thread::spawn(move || drop(guard)).join().unwrap();
    let again = other
        .get_lock("dropped")
        .try_lock_for(Duration::from_secs(5), None)
        .unwrap()
        .expect("a guard dropped on another thread is released");
    again.unlock().unwrap();
    assert!(eventually(|| client.live_owners() == 0));
}

/// An async guard dropped on a plain thread (no runtime there) is released too: the blocking
/// guard relies on it.
#[test]
fn an_async_guard_dropped_on_a_plain_thread_is_released() {
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let guard = runtime.block_on(async {
        let client = support::client(&server).await;
        client.get_lock("async-dropped").lock().await.unwrap()
    });
    drop(runtime);
    std::thread::spawn(move || drop(guard)).join().unwrap();
    let next = client(&server)
        .get_lock("async-dropped")
        .try_lock_for(Duration::from_secs(5), None)
        .unwrap();
    assert!(
        next.is_some(),
        "the async guard dropped on a thread kept its lock"
    );
}

#[test]
fn a_hold_belongs_to_its_acquisition_whatever_the_thread_or_handle() {
    let server = RedisServer::start();
    let client = client(&server);
    let lock = client.get_lock("threads");
    let guard = lock.lock().unwrap();
    // Another handle of the name on this thread, outside the hold's scope: another acquisition.
    assert!(client.get_lock("threads").try_lock().unwrap().is_none());
    // Inside the hold's scope: nested.
    let again = guard
        .scope(|| client.get_lock("threads").try_lock())
        .unwrap()
        .expect("nested");
    assert_eq!(again.fencing_token(), guard.fencing_token());
    // The same handle on another thread: a contender, which does not hold it.
    let shared = lock.clone();
    let elsewhere = std::thread::spawn(move || {
        (
            shared.try_lock().unwrap().is_some(),
            shared.is_held().unwrap(),
            shared.hold_count().unwrap(),
        )
    });
    assert_eq!(elsewhere.join().unwrap(), (false, false, 0));
    // A nested guard unlocked on another thread gives back one hold of its acquisition.
    std::thread::spawn(move || again.unlock())
        .join()
        .unwrap()
        .unwrap();
    assert_eq!(guard.hold_count().unwrap(), 1);
    assert_eq!(lock.hold_count().unwrap(), 0, "outside any scope");
    guard.unlock().unwrap();
    assert!(!lock.is_locked().unwrap());
}

#[test]
fn a_killed_holder_process_frees_the_lock_after_its_lease() {
    let server = RedisServer::start();
    let mut holder = Holder::spawn(&server, "killed", 600);
    let token = holder.locked(Duration::from_secs(10));
    let client = client(&server);
    let lock = client.get_lock("killed");
    assert!(lock.try_lock().unwrap().is_none(), "the holder holds it");
    // Alive, it keeps the lock past its lease: its client's thread renews while its own sleeps.
    std::thread::sleep(Duration::from_millis(1200));
    assert!(
        lock.try_lock().unwrap().is_none(),
        "the sleeping holder lost its lock"
    );
    holder.kill();
    let killed = Instant::now();
    let guard = lock
        .try_lock_for(Duration::from_secs(5), None)
        .unwrap()
        .expect("the lock frees itself after the dead holder's lease");
    let waited = killed.elapsed();
    assert!(waited < Duration::from_secs(3), "freed after {waited:?}");
    assert!(guard.fencing_token() > token);
    guard.unlock().unwrap();
}

#[test]
fn calls_inside_a_multi_thread_runtime_fail_with_inside_runtime() {
    inside_a_runtime_everything_is_refused();
}

/// From a current-thread runtime's `block_on` and from a task; `spawn_blocking` and
/// `Runtime::enter` may block, and work (tests/blocking_contexts.rs has every context).
#[test]
fn calls_inside_a_current_thread_runtime_fail_with_inside_runtime() {
    let server = RedisServer::start();
    let client = client(&server);
    let lock = client.get_lock("refused");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let in_block_on = runtime.block_on(async { lock.lock().map(drop) });
    let task_lock = lock.clone();
    let in_task = runtime
        .block_on(runtime.spawn(async move { task_lock.try_lock().map(drop) }))
        .unwrap();
    for (where_, result) in [("block_on", in_block_on), ("a task", in_task)] {
        assert!(
            matches!(result, Err(Error::InsideRuntime)),
            "{where_}: {result:?}"
        );
    }
    let blocking_lock = lock.clone();
    let in_spawn_blocking = runtime
        .block_on(runtime.spawn_blocking(move || blocking_lock.is_locked()))
        .unwrap();
    let entered = runtime.enter();
    let under_enter = lock.is_locked();
    drop(entered);
    assert!(!in_spawn_blocking.unwrap(), "nothing was taken meanwhile");
    assert!(!under_enter.unwrap());
    drop(runtime);
    // Outside again, the same handle works.
    lock.lock().unwrap().unlock().unwrap();
}

fn inside_a_runtime_everything_is_refused() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let server = RedisServer::start();
    // Built, and a guard taken, on a thread of its own; then used from `#[tokio::test]`-like
    // async code below.
    let url = server.url();
    let (client, guard) = std::thread::spawn(move || {
        let client = Client::connect(&url).unwrap();
        let guard = client.get_lock("held").lock().unwrap();
        (client, guard)
    })
    .join()
    .unwrap();
    runtime.block_on(async_refusals(client.clone(), guard, server.url()));
    drop(runtime);
    // The guard unlocked inside the runtime was dropped, which released it.
    let lock = client.get_lock("held");
    assert!(eventually(|| !lock.is_locked().unwrap()));
    assert!(!client.get_lock("refused").is_locked().unwrap());
}

async fn async_refusals(client: Client, guard: ferrisson::blocking::LockGuard, url: String) {
    let lock = client.get_lock("refused");
    let semaphore = client.get_semaphore("refused-semaphore");
    let latch = client.get_count_down_latch("refused-latch");
    let refusals: Vec<(&str, ferrisson::Result<()>)> = vec![
        ("connect", Client::connect(&url).map(drop)),
        ("lock", lock.lock().map(drop)),
        ("try_lock", lock.try_lock().map(drop)),
        ("is_locked", lock.is_locked().map(drop)),
        ("acquire", semaphore.acquire(1)),
        ("await_zero", latch.await_zero()),
        (
            "wait_lost",
            guard.wait_lost(Duration::from_secs(1)).map(drop),
        ),
        ("unlock", guard.unlock()),
    ];
    for (what, result) in refusals {
        match result {
            Err(Error::InsideRuntime) => {}
            other => panic!("{what} inside a runtime: {other:?}"),
        }
    }
    // From a spawned task as well; and the async API of the same client works here.
    let in_task = tokio::spawn(async move { lock.try_lock().map(drop) })
        .await
        .unwrap();
    assert!(matches!(in_task, Err(Error::InsideRuntime)));
    let guard = client.as_async().get_lock("refused").lock().await.unwrap();
    guard.unlock().await.unwrap();
}

/// The `#[tokio::test]` form of the refusal: the test body is a runtime's `block_on`.
#[tokio::test]
async fn calls_from_a_tokio_test_body_fail_with_inside_runtime() {
    let built = Client::connect("redis://127.0.0.1:1");
    assert!(matches!(built, Err(Error::InsideRuntime)), "{built:?}");
    let server = RedisServer::start();
    let url = server.url();
    let client = std::thread::spawn(move || Client::connect(&url).unwrap())
        .join()
        .unwrap();
    let lock = client.get_lock("from-a-test");
    assert!(matches!(lock.lock(), Err(Error::InsideRuntime)));
    assert!(matches!(
        client.get_mutex("from-a-test").try_lock(),
        Err(Error::InsideRuntime)
    ));
    assert!(matches!(client.clone().close(), Err(Error::InsideRuntime)));
    // The client's last handle may be dropped here: that does not block on anything.
    tokio::task::spawn_blocking(move || drop(client))
        .await
        .unwrap();
}

/// Polls `check` every 10 ms for up to 5 s.
fn eventually(mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if check() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    check()
}

/// A `ferrisson-test-holder` process of the `blocking` kind, killed on drop.
struct Holder {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Holder {
    fn spawn(server: &RedisServer, name: &str, ms: u64) -> Holder {
        let mut child = std::process::Command::new(support::holder_binary())
            .args([&server.url(), name, &ms.to_string(), "blocking"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("the holder process starts");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Holder { child, lines }
    }

    /// Waits until the process holds the lock; its fencing token.
    fn locked(&mut self, within: Duration) -> u64 {
        let line = self
            .lines
            .recv_timeout(within)
            .expect("the holder process locks in time");
        line.strip_prefix("LOCKED ")
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("unexpected line from the holder: {line}"))
    }

    /// SIGKILL, and wait until it is gone.
    fn kill(&mut self) {
        self.child.kill().expect("kill the holder");
        self.child.wait().expect("reap the holder");
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
