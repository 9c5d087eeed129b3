//! One owner per acquisition: every acquisition is an owner of its own, whatever task, thread,
//! future or handle makes it. Tasks sharing a handle exclude each other, for every lock kind and
//! every way Rust code shares a value; two acquisitions of one task or thread exclude each other
//! too; only an acquisition nested in a hold's scope (`LockGuard::scope`, `with_lock`'s work) or
//! taken with `LockGuard::reenter` is one more hold of it, through any handle of the name; a guard
//! carries its hold to any task or thread.

mod support;

use std::sync::Arc;
use std::time::Duration;

use ferrisson::{
    Error, LockGuard, MultiGuard, MultiLock, RFencedLock, RLock, RReadWriteLock, RedLock,
    RedLockGuard,
};
use support::{Checker, RedisServer, builder, client, eventually, join_within};

const TASKS: usize = 3;
const ROUNDS: usize = 5;
const INSIDE: Duration = Duration::from_millis(2);

static RED_GRANTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// One handle of each kind, shared as a whole by the contending tasks.
#[derive(Debug, Clone)]
enum Shared {
    Lock(RLock),
    Fenced(RFencedLock),
    /// Every task takes the write side.
    Write(RReadWriteLock),
    Multi(MultiLock),
    Red(RedLock),
}

/// A hold of any kind, and the token that orders it.
enum Held {
    Lock(LockGuard),
    Multi(MultiGuard),
    Red(RedLockGuard),
}

impl Held {
    fn token(&self) -> u64 {
        match self {
            Held::Lock(g) => g.fencing_token(),
            Held::Multi(g) => g.parts()[0].fencing_token(),
            // A grant needs a majority, not every instance, so no one instance's tokens
            // order all grants: number them in grant order here (the checker then proves the
            // holds never overlapped).
            Held::Red(g) => {
                assert!(g.granted() >= 2, "a majority granted");
                RED_GRANTS.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            }
        }
    }

    async fn unlock(self) {
        match self {
            Held::Lock(g) => g.unlock().await.unwrap(),
            Held::Multi(g) => g.unlock().await.unwrap(),
            Held::Red(g) => g.unlock().await.unwrap(),
        }
    }
}

impl Shared {
    async fn hold(&self) -> Held {
        match self {
            Shared::Lock(l) => Held::Lock(l.lock().await.unwrap()),
            Shared::Fenced(l) => Held::Lock(l.lock_and_get_token().await.unwrap().1),
            Shared::Write(rw) => Held::Lock(rw.write_lock().lock().await.unwrap()),
            Shared::Multi(m) => Held::Multi(m.lock().await.unwrap()),
            Shared::Red(r) => Held::Red(r.lock().await.unwrap()),
        }
    }
}

/// One critical section: enter, stay a little, leave.
async fn round(shared: &Shared, checker: &Checker) {
    let held = shared.hold().await;
    let start = checker.enter();
    tokio::time::sleep(INSIDE).await;
    checker.exit(held.token(), start);
    held.unlock().await;
}

/// The ways a handle reaches several tasks.
#[derive(Debug, Clone, Copy)]
enum Sharing {
    /// `Arc<AppState>`, each request task calling through it.
    Arc,
    /// A clone moved into each spawned task.
    Clone,
    /// A `&'static` (a `static`, or a leaked app state).
    Static,
}

async fn contend(shared: Shared, sharing: Sharing) {
    let checker = Arc::new(Checker::default());
    let mut tasks = Vec::new();
    let state = Arc::new(shared.clone());
    let leaked: &'static Shared = Box::leak(Box::new(shared.clone()));
    for _ in 0..TASKS {
        let checker = checker.clone();
        let task = match sharing {
            Sharing::Arc => {
                let state = state.clone();
                tokio::spawn(async move {
                    for _ in 0..ROUNDS {
                        round(&state, &checker).await;
                    }
                })
            }
            Sharing::Clone => {
                let mine = shared.clone();
                tokio::spawn(async move {
                    for _ in 0..ROUNDS {
                        round(&mine, &checker).await;
                    }
                })
            }
            Sharing::Static => tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    round(leaked, &checker).await;
                }
            }),
        };
        tasks.push(task);
    }
    join_within(Duration::from_secs(30), tasks, "every task gets its turns").await;
    assert_eq!(
        checker.verify().len(),
        TASKS * ROUNDS,
        "{shared:?} shared by {sharing:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_sharing_a_handle_exclude_each_other_for_every_kind() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let client = client(&servers[0]).await;
    let mut red_clients = Vec::new();
    for server in &servers {
        red_clients.push(support::client(server).await);
    }
    for sharing in [Sharing::Arc, Sharing::Clone, Sharing::Static] {
        let n = format!("{sharing:?}");
        let kinds = [
            Shared::Lock(client.get_lock(&format!("plain-{n}"))),
            Shared::Lock(client.get_fair_lock(&format!("fair-{n}"))),
            Shared::Fenced(client.get_fenced_lock(&format!("fenced-{n}"))),
            Shared::Write(client.get_read_write_lock(&format!("rw-{n}"))),
            Shared::Multi(MultiLock::new([
                client.get_lock(&format!("multi-a-{n}")),
                client.get_fair_lock(&format!("multi-b-{n}")),
            ])),
            Shared::Red(RedLock::new(
                red_clients.iter().map(|c| c.get_lock(&format!("red-{n}"))),
            )),
        ];
        for shared in kinds {
            contend(shared, sharing).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_and_a_writer_sharing_one_handle_exclude_each_other() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let rw = client.get_read_write_lock("rw-shared");

    // A task reads; another task's write through the same handle waits for it.
    let read = rw.read_lock().lock().await.unwrap();
    let writer = {
        let rw = rw.clone();
        tokio::spawn(async move { rw.write_lock().try_lock().await.unwrap().is_none() })
    };
    assert!(
        writer.await.unwrap(),
        "a writer task waits for a reader task"
    );
    // This task's own write beside its read, outside the read's scope: another acquisition,
    // which waits for the reader like the other task's.
    assert!(
        rw.write_lock().try_lock().await.unwrap().is_none(),
        "a writer waits for a reader of its own task"
    );
    // Inside the read's scope, through the same handle: one more read hold, and no upgrade.
    let again = read
        .scope(rw.read_lock().try_lock())
        .await
        .unwrap()
        .expect("a read nested in a read");
    assert_eq!(read.hold_count().await.unwrap(), 2);
    assert_eq!(read.scope(rw.read_lock().hold_count()).await.unwrap(), 2);
    assert_eq!(
        rw.read_lock().hold_count().await.unwrap(),
        0,
        "outside any scope"
    );
    assert!(matches!(
        read.scope(rw.write_lock().try_lock()).await,
        Err(Error::UpgradeNotSupported { .. })
    ));
    again.unlock().await.unwrap();
    read.unlock().await.unwrap();

    // A task writes (and may read inside the write's scope, as the same owner); a read of this
    // task outside that scope waits, and so does another task's.
    let write = rw.write_lock().lock().await.unwrap();
    let own_read = write
        .scope(rw.read_lock().try_lock())
        .await
        .unwrap()
        .expect("a read nested in the write");
    assert!(
        rw.read_lock().try_lock().await.unwrap().is_none(),
        "a reader beside the writer in its task waits"
    );
    let reader = {
        let rw = rw.clone();
        tokio::spawn(async move { rw.read_lock().try_lock().await.unwrap().is_none() })
    };
    assert!(
        reader.await.unwrap(),
        "a reader task waits for a writer task"
    );
    own_read.unlock().await.unwrap();
    write.unlock().await.unwrap();
    assert!(!rw.read_lock().is_locked().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_acquisitions_of_one_task_exclude_and_nested_ones_share_through_any_handle() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let first = client.get_lock("one-task");
    let second = client.get_lock("one-task");

    let outer = first.lock().await.unwrap();
    // The same task, outside the hold's scope: another acquisition, through either handle.
    assert!(second.try_lock().await.unwrap().is_none());
    assert!(
        first
            .try_lock_for(Duration::from_millis(200), None)
            .await
            .unwrap()
            .is_none(),
        "a second acquire of the holding task waits like anyone's"
    );
    assert!(
        eventually(Duration::from_secs(2), || async {
            client.live_owners() == 1
        })
        .await,
        "the refused acquisitions left {} owners",
        client.live_owners()
    );
    // Inside the hold's scope, through another handle: nested, one more hold of it.
    let inner = outer
        .scope(second.try_lock())
        .await
        .unwrap()
        .expect("nested through another handle of the name");
    assert_eq!(
        inner.fencing_token(),
        outer.fencing_token(),
        "one hold, one token"
    );
    assert_eq!(outer.hold_count().await.unwrap(), 2);
    assert_eq!(inner.hold_count().await.unwrap(), 2);
    assert_eq!(outer.scope(second.hold_count()).await.unwrap(), 2);
    assert!(outer.scope(second.is_held()).await.unwrap());
    // Outside any scope the task holds nothing, though it keeps both guards.
    assert_eq!(first.hold_count().await.unwrap(), 0);
    assert!(!second.is_held().await.unwrap());
    assert_eq!(client.live_owners(), 1, "nested holds share their owner");

    // Another task sees the lock taken and holds nothing of it.
    let (held, count, locked, got) = {
        let first = first.clone();
        tokio::spawn(async move {
            (
                first.is_held().await.unwrap(),
                first.hold_count().await.unwrap(),
                first.is_locked().await.unwrap(),
                first.try_lock().await.unwrap().is_some(),
            )
        })
        .await
        .unwrap()
    };
    assert!(!held && count == 0 && locked && !got);

    // Each guard gives back one hold, whichever handle made it; one handle's release never
    // takes the other's hold away.
    outer.unlock().await.unwrap();
    assert_eq!(inner.hold_count().await.unwrap(), 1);
    assert!(!inner.is_lost());
    assert!(second.try_lock().await.unwrap().is_none(), "still held");
    inner.unlock().await.unwrap();
    assert!(!first.is_locked().await.unwrap());
    assert_eq!(client.live_owners(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_lock_futures_of_one_task_exclude_each_other_unless_nested() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let lock = client.get_lock("joined");
    let checker = Checker::default();
    let take = || async {
        let guard = lock.lock().await.unwrap();
        let start = checker.enter();
        tokio::time::sleep(Duration::from_millis(50)).await;
        checker.exit(guard.fencing_token(), start);
        let token = guard.fencing_token();
        guard.unlock().await.unwrap();
        token
    };
    let (a, b) = tokio::time::timeout(Duration::from_secs(10), async {
        tokio::join!(take(), take())
    })
    .await
    .expect("each future gets its turn");
    assert_ne!(a, b, "two acquisitions, two grants");
    assert_eq!(checker.verify().len(), 2);

    // Joined inside a hold's scope, both are nested: one more hold each, no wait.
    let outer = lock.lock().await.unwrap();
    let (x, y) = tokio::time::timeout(
        Duration::from_secs(5),
        outer.scope(async { tokio::join!(lock.lock(), lock.lock()) }),
    )
    .await
    .expect("a nested acquire never waits for its own hold");
    let (x, y) = (x.unwrap(), y.unwrap());
    assert_eq!(x.fencing_token(), outer.fencing_token());
    assert_eq!(y.fencing_token(), outer.fencing_token());
    assert_eq!(outer.hold_count().await.unwrap(), 3);
    x.unlock().await.unwrap();
    outer.unlock().await.unwrap();
    assert!(lock.is_locked().await.unwrap());
    y.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_moves_across_tasks_and_threads_and_renews_there() {
    let server = RedisServer::start();
    let client = builder(&server)
        .watchdog_timeout(Duration::from_millis(600))
        .build()
        .await
        .unwrap();
    let lock = client.get_lock("moved");
    let mut raw = server.raw().await;

    // Taken in one task, unlocked in another.
    let guard = tokio::spawn({
        let lock = lock.clone();
        async move { lock.lock().await.unwrap() }
    })
    .await
    .unwrap();
    // The taking task has ended; the hold lives on in its guard, renewed past three leases.
    tokio::time::sleep(Duration::from_millis(1800)).await;
    assert!(!guard.is_lost(), "renewed while its task is gone");
    assert!(lock.is_locked().await.unwrap());
    assert!(
        !lock.is_held().await.unwrap(),
        "outside the hold's scope nobody is told it holds it"
    );
    assert!(guard.scope(lock.is_held()).await.unwrap());
    tokio::spawn(async move { guard.unlock().await.unwrap() })
        .await
        .unwrap();
    let exists: bool = redis::AsyncCommands::exists(&mut raw, "moved")
        .await
        .unwrap();
    assert!(!exists, "unlocked from another task");

    // Taken here, dropped on a plain thread: the drop's release frees it.
    let guard = lock.lock().await.unwrap();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1200));
        assert!(!guard.is_lost(), "renewed while it lives on a plain thread");
        drop(guard);
    })
    .join()
    .unwrap();
    assert!(
        eventually(Duration::from_secs(3), || async {
            !lock.is_locked().await.unwrap()
        })
        .await,
        "a guard dropped on a plain thread is released"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_ends_while_holding_frees_the_lock() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let lock = client.get_lock("ended");
    let task = {
        let lock = lock.clone();
        tokio::spawn(async move {
            let _guard = lock.lock().await.unwrap();
            // Returns with the guard: dropped at the task's end.
        })
    };
    task.await.unwrap();
    let got = lock
        .try_lock_for(Duration::from_secs(3), None)
        .await
        .unwrap()
        .expect("freed by the ended task's dropped guard");
    got.unlock().await.unwrap();
    assert!(
        eventually(Duration::from_secs(2), || async {
            client.live_owners() == 0
        })
        .await,
        "nothing is kept for the ended task"
    );
}

/// A hold given back is gone before the next acquire of its owner runs, however it was given
/// back: an unlock awaited, an unlock cancelled at its first poll (it finishes in the
/// background), a dropped guard. A new acquisition is a new hold with a new token; a nested one
/// made right after a nested hold was given back is one more hold of the outer hold alone, never
/// of the hold being given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_given_back_is_never_reentered_by_the_next_acquire() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let lock = client.get_lock("given-back");
    let give_back = |guard: LockGuard, round: usize| async move {
        match round % 3 {
            0 => guard.unlock().await.unwrap(),
            1 => {
                let _ = tokio::time::timeout(Duration::ZERO, guard.unlock()).await;
            }
            _ => drop(guard),
        }
    };
    let mut last = 0;
    for round in 0..150 {
        let guard = lock.lock().await.unwrap();
        assert_eq!(guard.hold_count().await.unwrap(), 1, "round {round}");
        assert!(
            guard.fencing_token() > last,
            "round {round}: a token repeated"
        );
        last = guard.fencing_token();
        give_back(guard, round).await;
    }

    // Nested holds of one outer hold, given back the same ways: the owner's next nested
    // acquire runs after the release, so it finds the outer hold and nothing more.
    let outer = lock.lock().await.unwrap();
    assert!(outer.fencing_token() > last);
    for round in 0..300 {
        let nested = match round % 2 {
            0 => outer.scope(lock.lock()).await.unwrap(),
            _ => outer.reenter().await.unwrap(),
        };
        assert_eq!(nested.fencing_token(), outer.fencing_token());
        assert_eq!(nested.hold_count().await.unwrap(), 2, "round {round}");
        give_back(nested, round).await;
    }
    assert!(
        eventually(Duration::from_secs(2), || async {
            outer.hold_count().await.unwrap() == 1
        })
        .await,
        "every nested hold was given back"
    );
    outer.unlock().await.unwrap();
    assert!(
        eventually(Duration::from_secs(2), || async {
            !lock.is_locked().await.unwrap()
        })
        .await,
        "every hold was given back"
    );
}

/// A read guard dropped (its release runs in the background) and the write lock taken right
/// after by the same task: the write, another acquisition, is granted once that release is done,
/// and is never refused as an upgrade (`UpgradeNotSupported` is only for a write nested in a
/// read's scope).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_read_guard_never_blocks_the_same_tasks_write_lock() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let rw = client.get_read_write_lock("down-up");
    for round in 0..200 {
        drop(rw.read_lock().lock().await.unwrap());
        let write = rw
            .write_lock()
            .lock()
            .await
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        drop(write);
    }
}

/// Plain threads (and `spawn_blocking`) driving one shared handle with `block_on` exclude each
/// other too, and so do two acquisitions of one thread; one nested in a hold's scope shares it.
#[test]
fn threads_sharing_a_handle_exclude_each_other() {
    let server = RedisServer::start();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = rt.block_on(client(&server));
    let lock = client.get_lock("threads");
    let checker = Arc::new(Checker::default());
    let handle = rt.handle().clone();
    let run = |lock: RLock, checker: Arc<Checker>, handle: tokio::runtime::Handle| {
        move || {
            for _ in 0..ROUNDS {
                let guard = handle.block_on(lock.lock()).unwrap();
                let start = checker.enter();
                std::thread::sleep(INSIDE);
                checker.exit(guard.fencing_token(), start);
                handle.block_on(guard.unlock()).unwrap();
            }
        }
    };
    let threads: Vec<_> = (0..TASKS)
        .map(|_| std::thread::spawn(run(lock.clone(), checker.clone(), handle.clone())))
        .collect();
    let blocking: Vec<_> = (0..2)
        .map(|_| rt.spawn_blocking(run(lock.clone(), checker.clone(), handle.clone())))
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    for b in blocking {
        rt.block_on(b).unwrap();
    }
    assert_eq!(checker.verify().len(), (TASKS + 2) * ROUNDS);

    // One thread locking twice: two acquisitions, unless the second is nested in the first's
    // scope.
    let a = rt.block_on(lock.lock()).unwrap();
    let again = rt.block_on(client.get_lock("threads").try_lock()).unwrap();
    assert!(again.is_none(), "a second acquisition of the thread");
    let b = rt
        .block_on(a.scope(client.get_lock("threads").lock()))
        .unwrap();
    assert_eq!(a.fencing_token(), b.fencing_token());
    rt.block_on(async {
        assert_eq!(a.hold_count().await.unwrap(), 2);
        a.unlock().await.unwrap();
        b.unlock().await.unwrap();
        assert!(!lock.is_locked().await.unwrap());
    });
}

/// 100,000 tasks each lock once (on a few hundred names, so many of them wait and are handed
/// the lock): once they are done, the client keeps no state for any of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_short_tasks_leave_no_owner_behind() {
    const TOTAL: usize = 100_000;
    const AT_ONCE: usize = 256;
    let server = RedisServer::start();
    let client = Arc::new(client(&server).await);
    let limit = Arc::new(tokio::sync::Semaphore::new(AT_ONCE));
    let mut tasks = Vec::with_capacity(TOTAL);
    for i in 0..TOTAL {
        let permit = limit.clone().acquire_owned().await.unwrap();
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let lock = client.get_lock(&format!("short:{}", i % 300));
            let guard = lock.lock().await.unwrap();
            if i % 10 == 0 {
                // Some guards are dropped, not unlocked: the background release too must leave
                // nothing behind.
                drop(guard);
            } else {
                guard.unlock().await.unwrap();
            }
            drop(permit);
        }));
    }
    join_within(Duration::from_secs(120), tasks, "every short task ends").await;
    assert!(
        eventually(Duration::from_secs(5), || async {
            client.live_owners() == 0
        })
        .await,
        "{} owners left behind",
        client.live_owners()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mutex_stays_non_reentrant_even_inside_its_holds_scope() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let mutex = client.get_mutex("mutex-owners");
    let guard = mutex.lock().await.unwrap();
    assert!(mutex.try_lock().await.unwrap().is_none());
    assert!(
        client
            .get_mutex("mutex-owners")
            .try_lock()
            .await
            .unwrap()
            .is_none()
    );
    // Nothing nests in a mutex: not in its guard's scope, not through `reenter`.
    assert!(guard.scope(mutex.try_lock()).await.unwrap().is_none());
    assert!(matches!(
        guard.reenter().await,
        Err(Error::InvalidArgument(_))
    ));
    guard.unlock().await.unwrap();
}
