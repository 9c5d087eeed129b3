//! RLock semantics: nesting (reentrancy inside a hold's scope), hold counts, contention,
//! inspection, force unlock.

mod support;

use std::time::Duration;

use redis::AsyncCommands;
use support::{Elsewhere, RedisServer, client, eventually};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_holds_are_counted_and_released_one_by_one() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let lock = client.get_lock("reentrant");
    let clone = lock.clone();

    let first = lock.lock().await.unwrap();
    // Outside the hold's scope, another acquisition of this task waits like anyone's, through
    // the same handle or a clone.
    assert!(lock.try_lock().await.unwrap().is_none());
    assert!(
        clone
            .try_lock_for(Duration::from_millis(200), None)
            .await
            .unwrap()
            .is_none()
    );
    // Nested: inside the hold's scope, and taken from the guard.
    let second = first.scope(clone.lock()).await.unwrap();
    let third = first
        .scope(lock.try_lock())
        .await
        .unwrap()
        .expect("a nested try_lock succeeds");
    let fourth = first.reenter().await.unwrap();
    assert_eq!(first.hold_count().await.unwrap(), 4);
    assert_eq!(first.scope(lock.hold_count()).await.unwrap(), 4);
    assert_eq!(
        first.fencing_token(),
        second.fencing_token(),
        "a nested hold keeps its token"
    );
    assert_eq!(first.fencing_token(), third.fencing_token());
    assert_eq!(first.fencing_token(), fourth.fencing_token());
    fourth.unlock().await.unwrap();
    let first_token = first.fencing_token();

    // Another handle of the name nests in the hold's scope too; another task is another
    // owner, even through a clone of the same handle.
    let another_handle = client.get_lock("reentrant");
    let fifth = first
        .scope(another_handle.try_lock())
        .await
        .unwrap()
        .expect("another handle of the name, nested");
    assert_eq!(fifth.fencing_token(), first.fencing_token());
    fifth.unlock().await.unwrap();
    let other = Elsewhere::new(lock.clone());
    assert!(
        other.try_lock().await.unwrap().is_none(),
        "another task is another owner"
    );
    assert!(!other.is_held().await.unwrap());
    assert!(first.scope(lock.is_held()).await.unwrap());
    assert!(!lock.is_held().await.unwrap(), "outside any scope");
    assert_eq!(lock.hold_count().await.unwrap(), 0, "outside any scope");

    third.unlock().await.unwrap();
    assert_eq!(first.hold_count().await.unwrap(), 2);
    first.unlock().await.unwrap();
    assert_eq!(second.hold_count().await.unwrap(), 1);
    assert!(lock.is_locked().await.unwrap());
    assert!(other.try_lock().await.unwrap().is_none(), "one hold left");
    second.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());

    let next = other
        .try_lock()
        .await
        .unwrap()
        .expect("free after the last hold");
    assert!(next.fencing_token() > first_token);
    next.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_tasks_sharing_one_handle_contend() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let a = client.get_lock("contend");
    let b = Elsewhere::new(a.clone());
    let held = a.lock().await.unwrap();
    let started = std::time::Instant::now();
    assert!(
        b.try_lock_for(Duration::from_millis(300), None)
            .await
            .unwrap()
            .is_none()
    );
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(290),
        "try_lock_for gave up early: {waited:?}"
    );
    assert!(
        waited < Duration::from_secs(2),
        "try_lock_for overran its budget: {waited:?}"
    );
    held.unlock().await.unwrap();
    let got = b
        .try_lock_for(Duration::from_millis(300), None)
        .await
        .unwrap();
    got.expect("free now").unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_gets_the_lock_when_the_holder_unlocks() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let holder = client.get_lock("handoff");
    let guard = holder.lock().await.unwrap();
    let waiter = client.get_lock("handoff");
    let task = tokio::spawn(async move {
        let g = waiter.lock().await.unwrap();
        let token = g.fencing_token();
        g.unlock().await.unwrap();
        token
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!task.is_finished());
    let first = guard.fencing_token();
    guard.unlock().await.unwrap();
    let second = tokio::time::timeout(Duration::from_secs(2), task)
        .await
        .unwrap()
        .unwrap();
    assert!(second > first, "{second} after {first}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspection_reports_ttl_and_state() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let lock = client.get_lock("inspect");
    assert_eq!(lock.remaining_ttl().await.unwrap(), None);
    assert!(!lock.is_locked().await.unwrap());
    let guard = lock.lock_with_lease(Duration::from_secs(20)).await.unwrap();
    let ttl = lock
        .remaining_ttl()
        .await
        .unwrap()
        .expect("a leased lock has a TTL");
    assert!(
        ttl > Duration::from_secs(18) && ttl <= Duration::from_secs(20),
        "{ttl:?}"
    );
    assert_eq!(lock.name(), "inspect");
    assert_eq!(guard.name(), "inspect");
    guard.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_frees_wakes_and_keeps_the_token_counter() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let lock = client.get_lock("forced");
    let guard = lock.lock().await.unwrap();
    let waiter = client.get_lock("forced");
    let task = tokio::spawn(async move { waiter.lock().await.map(|g| g.fencing_token()) });
    tokio::time::sleep(Duration::from_millis(100)).await;

    let admin = client.get_lock("forced");
    assert!(admin.force_unlock().await.unwrap());
    let token = tokio::time::timeout(Duration::from_secs(2), task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(
        token > guard.fencing_token(),
        "tokens never go backwards after force_unlock"
    );
    let mut raw = server.raw().await;
    let key = client.get_lock("forced").token_counter_key();
    let counter: u64 = raw.get(&key).await.unwrap();
    assert_eq!(counter, token);
    assert!(matches!(
        guard.unlock().await,
        Err(ferrisson::Error::LockLost { .. })
    ));
    assert!(!client.get_lock("free").force_unlock().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_guard_releases_in_the_background() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let lock = client.get_lock("dropped");
    let guard = lock.lock().await.unwrap();
    drop(guard);
    assert!(
        eventually(Duration::from_secs(2), || async {
            !lock.is_locked().await.unwrap()
        })
        .await
    );

    // Outer hold dropped while a nested one lives: one hold goes, the lock stays.
    let outer = lock.lock().await.unwrap();
    let inner = outer.scope(lock.lock()).await.unwrap();
    drop(outer);
    assert!(
        eventually(Duration::from_secs(2), || async {
            inner.hold_count().await.unwrap() == 1
        })
        .await
    );
    assert!(lock.is_locked().await.unwrap());
    inner.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_moves_into_another_task() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let guard = client.get_lock("moved").lock().await.unwrap();
    tokio::spawn(async move { guard.unlock().await })
        .await
        .unwrap()
        .unwrap();
    assert!(!client.get_lock("moved").is_locked().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_have_distinct_ids_and_owners() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let b = client(&server).await;
    assert_ne!(a.id(), b.id());
    let guard = a.get_lock("ids").lock().await.unwrap();
    let mut raw = server.raw().await;
    let fields: Vec<String> = raw.hkeys("ids").await.unwrap();
    assert_eq!(fields.len(), 1);
    assert!(fields[0].starts_with(&a.id().to_string()));
    guard.unlock().await.unwrap();
    assert!(format!("{a:?}").contains(&a.id().to_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_client_and_its_guards_closes_every_connection() {
    let server = RedisServer::start();
    let mut raw = server.raw().await;
    let connections = |list: String| list.lines().count();
    let before = connections(
        redis::cmd("CLIENT")
            .arg("LIST")
            .query_async(&mut raw)
            .await
            .unwrap(),
    );
    {
        let client = client(&server).await;
        let guard = client.get_lock("bye").lock().await.unwrap();
        // Contention (another task's) opens the pub/sub connection too.
        let other = Elsewhere::new(client.get_lock("bye"));
        assert!(
            other
                .try_lock_for(Duration::from_millis(50), None)
                .await
                .unwrap()
                .is_none()
        );
        drop(other);
        // The pub/sub connection may come up after the wait gave up (its subscription was not
        // confirmed in time).
        assert!(
            eventually(Duration::from_secs(3), || async {
                let mut raw = raw.clone();
                let list: String = redis::cmd("CLIENT")
                    .arg("LIST")
                    .query_async(&mut raw)
                    .await
                    .unwrap();
                connections(list) == before + 5
            })
            .await,
            "the callers' and the background work's command connections, one pub/sub connection \
             and the two presence connections"
        );
        guard.unlock().await.unwrap();
    }
    assert!(
        eventually(Duration::from_secs(3), || async {
            let list: String = redis::cmd("CLIENT")
                .arg("LIST")
                .query_async(&mut server.raw().await)
                .await
                .unwrap();
            // The check's own raw connection counts once.
            connections(list) <= before + 1
        })
        .await,
        "a dropped client left connections open"
    );
}

/// `with_lock` holds the lock while its work runs, passes the hold's token, gives the lock back
/// and answers the work's output; tasks using it on one handle never overlap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_lock_runs_the_work_holding_and_gives_the_lock_back() {
    use std::sync::Arc;
    let server = RedisServer::start();
    let client = client(&server).await;
    let lock = Arc::new(client.get_lock("scoped"));
    let checker = Arc::new(support::Checker::default());
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let (lock, checker) = (lock.clone(), checker.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..10 {
                let inner = lock.clone();
                let checker = checker.clone();
                let got = lock
                    .with_lock(|token| async move {
                        let start = checker.enter();
                        assert!(inner.is_held().await.unwrap(), "held while the work runs");
                        tokio::time::sleep(Duration::from_millis(1)).await;
                        checker.exit(token, start);
                        token
                    })
                    .await
                    .unwrap();
                assert!(got > 0);
            }
        }));
    }
    support::join_within(Duration::from_secs(30), tasks, "with_lock contenders").await;
    assert_eq!(checker.verify().len(), 40);
    assert!(!lock.is_locked().await.unwrap(), "given back");
}

/// A hold lost while `with_lock`'s work runs stops the work at once and answers `LockLost`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_lock_stops_the_work_when_the_hold_is_lost() {
    let server = RedisServer::start();
    let client = support::builder(&server)
        .watchdog_timeout(Duration::from_millis(600))
        .build()
        .await
        .unwrap();
    let lock = client.get_lock("scoped-lost");
    let mut raw = server.raw().await;
    let deleter = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let _: i64 = raw.del("scoped-lost").await.unwrap();
    });
    let started = std::time::Instant::now();
    let answer = lock
        .with_lock(|_| async {
            tokio::time::sleep(Duration::from_secs(10)).await;
            "finished"
        })
        .await;
    deleter.await.unwrap();
    assert!(
        matches!(answer, Err(ferrisson::Error::LockLost { .. })),
        "{answer:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the work ran on for {:?}",
        started.elapsed()
    );
}
