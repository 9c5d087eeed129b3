//! Runtimes: a client built in one runtime and used from another after the first has ended, as
//! `static CLIENT: OnceLock<Client>` shared by `#[tokio::test]`s does, keeps every promise:
//! commands succeed on the first call, leases are renewed, dropped guards are released, waiters
//! wake by message and repairs run. Guards dropped on a plain thread, with no runtime left, or by
//! a runtime's shutdown are released too, and the client's own thread ends with the client.
//!
//! Each test builds its runtimes itself: the client in a first current-thread runtime, which is
//! then dropped, and the rest in a second one.

mod support;

use std::sync::{OnceLock, RwLock, RwLockReadGuard};
use std::time::{Duration, Instant};

use redis::AsyncCommands;
use support::{RedisServer, builder, eventually};

/// Tests that count the client threads of this process run alone (write); the others share it.
static THREADS: RwLock<()> = RwLock::new(());

fn shared() -> RwLockReadGuard<'static, ()> {
    THREADS.read().unwrap_or_else(|e| e.into_inner())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime")
}

/// Builds a client the way a `OnceLock` in a test suite does: inside a first runtime, which
/// uses it (as the first test would) and then ends.
fn built_in_an_ended_runtime(builder: ferrisson::ClientBuilder) -> ferrisson::Client {
    let first = runtime();
    let client = first.block_on(async {
        let client = builder.build().await.expect("the client connects");
        let guard = client.get_lock("first-runtime").lock().await.unwrap();
        guard.unlock().await.unwrap();
        client
    });
    drop(first);
    client
}

/// Whether Redis has the key `name` (the lock is held by somebody).
async fn held(server: &RedisServer, name: &str) -> bool {
    server.raw().await.exists(name).await.unwrap()
}

/// Waits (up to 5 s; the leases here are 30 s) until the lock `name` is free in Redis.
async fn freed(server: &RedisServer, name: &str) -> bool {
    eventually(Duration::from_secs(5), || async {
        !held(server, name).await
    })
    .await
}

#[test]
fn the_first_command_from_each_new_runtime_succeeds() {
    let _shared = shared();
    static CLIENT: OnceLock<ferrisson::Client> = OnceLock::new();
    let server = RedisServer::start();
    let first = runtime();
    first.block_on(async {
        let client = builder(&server).build().await.unwrap();
        let guard = client.get_lock("first").lock().await.unwrap();
        guard.unlock().await.unwrap();
        assert!(CLIENT.set(client).is_ok());
    });
    drop(first);
    // Each runtime ends before the next begins, as consecutive tests do.
    for round in 0..3 {
        runtime().block_on(async {
            let lock = CLIENT.get().unwrap().get_lock("first");
            let guard = lock.lock().await.unwrap_or_else(|e| {
                panic!("round {round}: the first lock() of a new runtime failed: {e:?}")
            });
            assert!(held(&server, "first").await);
            guard.unlock().await.unwrap();
            assert!(!lock.is_locked().await.unwrap());
        });
    }
}

#[test]
fn leases_taken_from_a_new_runtime_are_renewed() {
    let _shared = shared();
    let server = RedisServer::start();
    let client =
        built_in_an_ended_runtime(builder(&server).watchdog_timeout(Duration::from_secs(1)));
    runtime().block_on(async {
        let guard = client.get_lock("renewed").lock().await.unwrap();
        // Three and a half leases: only renewals keep the key.
        tokio::time::sleep(Duration::from_millis(3500)).await;
        assert!(!guard.is_lost(), "the lease was not renewed");
        let pttl: i64 = server.raw().await.pttl("renewed").await.unwrap();
        assert!(pttl > 0, "the key is gone (PTTL {pttl})");
        guard.unlock().await.expect("still ours");
    });
}

/// Renewals do not wait on the caller's runtime: a current-thread runtime (as
/// `#[tokio::main(flavor = "current_thread")]` and `#[tokio::test]` make) blocked in synchronous
/// work for five watchdog timeouts inside the critical section keeps its hold, and its guard
/// dropped while that runtime is blocked is released all the same.
#[test]
fn a_blocked_current_thread_runtime_keeps_its_lease() {
    let _shared = shared();
    let server = RedisServer::start();
    runtime().block_on(async {
        let client = builder(&server)
            .watchdog_timeout(Duration::from_secs(1))
            .build()
            .await
            .unwrap();
        let lock = client.get_lock("blocked");
        let guard = lock.lock().await.unwrap();
        // Synchronous work: this runtime's only thread does nothing else for 5 s.
        std::thread::sleep(Duration::from_secs(5));
        assert!(
            !guard.is_lost(),
            "the lease was lost while the runtime was blocked"
        );
        let pttl: i64 = server.raw().await.pttl("blocked").await.unwrap();
        assert!(pttl > 0, "the key is gone (PTTL {pttl})");
        guard.unlock().await.expect("still ours");

        let guard = lock.lock().await.unwrap();
        drop(guard);
        // Blocked again: the dropped guard's release does not wait for this runtime.
        std::thread::sleep(Duration::from_millis(500));
        let exists: bool = redis::Client::open(server.url())
            .unwrap()
            .get_connection()
            .and_then(|mut c| redis::cmd("EXISTS").arg("blocked").query(&mut c))
            .unwrap();
        assert!(
            !exists,
            "the dropped guard's release waited for the blocked runtime"
        );
    });
}

#[test]
fn guards_dropped_in_a_new_runtime_are_released() {
    let _shared = shared();
    let server = RedisServer::start();
    let client = built_in_an_ended_runtime(builder(&server));
    runtime().block_on(async {
        let lock = client.get_lock("dropped");
        drop(lock.lock().await.unwrap());
        assert!(
            freed(&server, "dropped").await,
            "a dropped guard was not released"
        );
        let other = support::client(&server).await;
        let guard = other.get_lock("dropped").try_lock().await.unwrap();
        guard
            .expect("free for another client")
            .unlock()
            .await
            .unwrap();
    });
}

#[test]
fn waiters_in_a_new_runtime_wake_on_another_clients_unlock() {
    let _shared = shared();
    let server = RedisServer::start();
    // A waiter that woke by its re-check instead of the message would take 30 s.
    let client =
        built_in_an_ended_runtime(builder(&server).recheck_interval(Duration::from_secs(30)));
    runtime().block_on(async {
        let other = support::client(&server).await;
        let guard = other.get_lock("woken").lock().await.unwrap();
        server.reset_stats().await;
        let waiter = client.get_lock("woken");
        let task = tokio::spawn(async move {
            let guard = waiter.lock().await.unwrap();
            let woke = Instant::now();
            guard.unlock().await.unwrap();
            woke
        });
        // The waiter asks, subscribes and asks again before it naps: from then on only the
        // message can wake it before its re-check.
        assert!(
            eventually(Duration::from_secs(5), || async {
                server.subscribers("redisson_lock__channel:{woken}").await == 1
                    && server.calls("evalsha").await >= 2
            })
            .await,
            "the waiter never subscribed"
        );
        let unlocked = Instant::now();
        guard.unlock().await.unwrap();
        let woke = tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("the waiter did not wake on the unlock message")
            .unwrap();
        assert!(woke >= unlocked);
    });
}

#[test]
fn a_cancelled_acquire_in_a_new_runtime_is_repaired() {
    let _shared = shared();
    let server = RedisServer::start();
    let client = built_in_an_ended_runtime(builder(&server));
    runtime().block_on(async {
        let lock = client.get_lock("repaired");
        assert!(!lock.is_locked().await.unwrap());
        // The acquire reaches the frozen server; its caller gives up before the answer.
        server.pause();
        let attempt = tokio::time::timeout(Duration::from_millis(300), lock.try_lock()).await;
        server.resume();
        assert!(attempt.is_err(), "a frozen server answered");
        // The server grants it now; the repair sent behind it takes the grant back.
        assert!(
            freed(&server, "repaired").await,
            "the grant of a cancelled acquire was not repaired"
        );
    });
}

#[test]
fn a_guard_dropped_on_a_plain_thread_after_every_runtime_ended_is_released() {
    let _shared = shared();
    let server = RedisServer::start();
    let client = built_in_an_ended_runtime(builder(&server));
    let second = runtime();
    let guard = second.block_on(client.get_lock("plain").lock()).unwrap();
    drop(second);
    std::thread::spawn(move || drop(guard))
        .join()
        .expect("the drop does not panic");
    runtime().block_on(async {
        assert!(
            freed(&server, "plain").await,
            "a guard dropped with no runtime left was not released"
        );
    });
}

#[test]
fn a_guard_dropped_by_a_runtime_shutdown_is_released() {
    let _shared = shared();
    let server = RedisServer::start();
    let first = runtime();
    let client = first.block_on(builder(&server).build()).unwrap();
    let lock = client.get_lock("shutdown");
    let (locked, is_locked) = tokio::sync::oneshot::channel();
    first.spawn(async move {
        let _guard = lock.lock().await.unwrap();
        let _ = locked.send(());
        std::future::pending::<()>().await;
    });
    first.block_on(is_locked).unwrap();
    // Drops the task, and with it the guard, while the runtime shuts down.
    first.shutdown_timeout(Duration::from_secs(1));
    runtime().block_on(async {
        assert!(
            freed(&server, "shutdown").await,
            "a guard dropped by the shutdown was not released"
        );
    });
}

/// This process's client threads (Linux shows the first 15 bytes of a thread's name).
#[cfg(target_os = "linux")]
fn client_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim_end() == "ferrisson-clien")
        .count()
}

/// [`client_threads`] once it has stopped changing: threads of clients dropped just before may
/// still be winding down.
#[cfg(target_os = "linux")]
fn settled_client_threads() -> usize {
    let mut last = client_threads();
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(100));
        let now = client_threads();
        if now == last {
            return now;
        }
        last = now;
    }
    panic!("the number of client threads kept changing");
}

#[cfg(target_os = "linux")]
#[test]
fn the_client_thread_lives_exactly_as_long_as_the_client_and_its_guards() {
    let _alone = THREADS.write().unwrap_or_else(|e| e.into_inner());
    let before = settled_client_threads();
    runtime().block_on(async {
        let err = support::builder_for("redis://127.0.0.1:1/")
            .build()
            .await
            .expect_err("nothing listens there");
        assert!(matches!(err, ferrisson::Error::Connect { .. }), "{err:?}");
        let err = ferrisson::Client::connect("no-such-scheme://x")
            .await
            .expect_err("not a URL redis takes");
        assert!(matches!(err, ferrisson::Error::Config(_)), "{err:?}");
    });
    assert_eq!(client_threads(), before, "a failed start left a thread");

    let server = RedisServer::start();
    let client = built_in_an_ended_runtime(builder(&server));
    assert_eq!(client_threads(), before + 1);
    let second = runtime();
    let guard = second.block_on(client.get_lock("last").lock()).unwrap();
    drop(second);
    drop(client);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(client_threads(), before + 1, "a live guard lost its thread");
    // The release runs on the client's thread, which then ends.
    drop(guard);
    let deadline = Instant::now() + Duration::from_secs(5);
    while client_threads() > before {
        assert!(Instant::now() < deadline, "the client's thread did not end");
        std::thread::sleep(Duration::from_millis(10));
    }
    runtime().block_on(async {
        assert!(
            !held(&server, "last").await,
            "the last guard was not released"
        );
    });
}
