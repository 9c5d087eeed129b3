//! Every acquisition is an owner of its own: two acquisitions of one lock exclude each other
//! whatever task, future or handle they come from (futures joined, selected or buffered in ONE
//! task included), a guard handed to another task carries its hold, and a task spawned inside
//! a hold's scope is outside it (a wait for a hold of the waiter's own task is the concern of
//! `tests/self_wait.rs`). Under the old rule (one owner per task) every test here fails.

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferrisson::{LockGuard, RLock};
use futures::StreamExt;
use futures::future::join_all;
use support::{Checker, RedisServer, client, freed, join_within, within};
use tokio::sync::oneshot;

const INSIDE: Duration = Duration::from_millis(2);

/// One critical section of a granted hold: enter, stay a little, leave, give it back.
async fn inside(guard: LockGuard, checker: &Checker) {
    let start = checker.enter();
    tokio::time::sleep(INSIDE).await;
    checker.exit(guard.fencing_token(), start);
    guard.unlock().await.unwrap();
}

/// The `i`th acquisition: the acquire forms take turns.
async fn acquire(lock: &RLock, i: usize) -> LockGuard {
    let long = Duration::from_secs(60);
    match i % 4 {
        0 => lock.lock().await.unwrap(),
        1 => lock.lock_with_lease(Duration::from_secs(30)).await.unwrap(),
        2 => lock
            .try_lock_for(long, None)
            .await
            .unwrap()
            .expect("granted"),
        _ => lock
            .try_lock_for(long, Some(Duration::from_secs(30)))
            .await
            .unwrap()
            .expect("granted"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buffered_increments_in_one_task_lose_no_update() {
    const ORDERS: usize = 4;
    let server = RedisServer::start();
    let client = client(&server).await;
    let locks: Vec<RLock> = (0..ORDERS)
        .map(|o| client.get_lock(&format!("order:{o}")))
        .collect();
    let checkers: Vec<Checker> = (0..ORDERS).map(|_| Checker::default()).collect();
    let counts = Mutex::new(HashMap::<usize, u64>::new());
    let increments = futures::stream::iter(0..200)
        .map(|i| {
            let o = i % ORDERS;
            let (lock, checker, counts) = (&locks[o], &checkers[o], &counts);
            async move {
                let guard = acquire(lock, i / ORDERS).await;
                let start = checker.enter();
                let seen = counts.lock().unwrap().get(&o).copied().unwrap_or(0);
                tokio::time::sleep(Duration::from_millis(3)).await;
                counts.lock().unwrap().insert(o, seen + 1);
                checker.exit(guard.fencing_token(), start);
                guard.unlock().await.unwrap();
            }
        })
        .buffer_unordered(20)
        .collect::<Vec<()>>();
    within(Duration::from_secs(90), "200 increments", increments).await;
    let counts = counts.into_inner().unwrap();
    for o in 0..ORDERS {
        assert_eq!(counts.get(&o), Some(&50), "order {o}: {counts:?}");
        assert_eq!(checkers[o].verify().len(), 50);
        freed(&locks[o]).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joined_acquisitions_in_one_task_exclude_each_other() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let lock = client.get_lock("joined");
    let checker = Checker::default();
    let rounds = (0..20).map(|i| {
        let (lock, checker) = (&lock, &checker);
        async move { inside(acquire(lock, i).await, checker).await }
    });
    within(Duration::from_secs(60), "join_all", join_all(rounds)).await;
    assert_eq!(checker.verify().len(), 20);
    freed(&lock).await;
}

/// `rounds` holds of `lock`, each wait given up (a cancelled `lock()`) and asked again every
/// 50 ms.
async fn select_rounds(lock: &RLock, checker: &Checker, rounds: usize) {
    let mut done = 0;
    while done < rounds {
        let granted = tokio::select! {
            guard = lock.lock() => Some(guard.unwrap()),
            () = tokio::time::sleep(Duration::from_millis(50)) => None,
        };
        if let Some(guard) = granted {
            inside(guard, checker).await;
            done += 1;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn select_loops_in_one_task_exclude_each_other() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let lock = client.get_lock("selected");
    let other_handle = client.get_lock("selected");
    let checker = Checker::default();
    let a = select_rounds(&lock, &checker, 15);
    let b = select_rounds(&other_handle, &checker, 15);
    let c = select_rounds(&lock, &checker, 15);
    let both = async {
        tokio::pin!(a, b, c);
        let (mut a_done, mut b_done, mut c_done) = (false, false, false);
        while !(a_done && b_done && c_done) {
            tokio::select! {
                () = &mut a, if !a_done => a_done = true,
                () = &mut b, if !b_done => b_done = true,
                () = &mut c, if !c_done => c_done = true,
            }
        }
    };
    within(Duration::from_secs(60), "select loops", both).await;
    assert_eq!(checker.verify().len(), 45);
    freed(&lock).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_handed_to_a_spawned_worker_carries_its_hold() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let lock = client.get_lock("dispatched");
    let counter = Arc::new(Mutex::new(0u64));
    let checker = Arc::new(Checker::default());
    let dispatch = async {
        let mut workers = Vec::new();
        for i in 0..50 {
            // The dispatcher's next acquisition waits for the hold it handed away.
            let guard = acquire(&lock, i).await;
            let (counter, checker) = (counter.clone(), checker.clone());
            workers.push(tokio::spawn(async move {
                let start = checker.enter();
                let seen = *counter.lock().unwrap();
                tokio::time::sleep(Duration::from_millis(3)).await;
                *counter.lock().unwrap() = seen + 1;
                checker.exit(guard.fencing_token(), start);
                guard.unlock().await.unwrap();
            }));
        }
        workers
    };
    let workers = within(Duration::from_secs(60), "dispatching", dispatch).await;
    join_within(Duration::from_secs(30), workers, "the workers").await;
    assert_eq!(*counter.lock().unwrap(), 50);
    assert_eq!(checker.verify().len(), 50);
    freed(&lock).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_future_beside_with_lock_in_the_same_task_waits_for_it() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let lock = client.get_lock("beside");
    let checker = Checker::default();
    let (inside_tx, inside_rx) = oneshot::channel();
    let checker_ref = &checker;
    let held = lock.with_lock(move |token| async move {
        let start = checker_ref.enter();
        inside_tx.send(()).unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        checker_ref.exit(token, start);
        token
    });
    let beside = async {
        inside_rx.await.unwrap();
        // Polled beside the work, not in it: outside its scope, through either handle.
        assert!(lock.try_lock().await.unwrap().is_none());
        let other = client.get_lock("beside");
        assert!(other.try_lock().await.unwrap().is_none());
        assert!(
            !lock.is_held().await.unwrap(),
            "beside the work: not its hold"
        );
        let guard = other.lock().await.unwrap();
        let token = guard.fencing_token();
        inside(guard, checker_ref).await;
        token
    };
    let (held, beside) = within(Duration::from_secs(30), "join", async {
        tokio::join!(held, beside)
    })
    .await;
    let held = held.unwrap();
    assert!(
        beside > held,
        "a new grant, not a nested hold: {held} then {beside}"
    );
    let holds = checker.verify();
    assert_eq!(holds.len(), 2);
    assert_eq!(holds[0].token, held, "the with_lock hold came first");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_lock_in_the_same_task_outside_any_scope_is_another_owner() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let lock = client.get_lock("second");
    let first = lock.lock().await.unwrap();
    let waited = Instant::now();
    let second = lock
        .try_lock_for(Duration::from_millis(200), None)
        .await
        .unwrap();
    assert!(second.is_none(), "the same handle in the same task waits");
    assert!(waited.elapsed() >= Duration::from_millis(200));
    for other in [lock.clone(), client.get_lock("second")] {
        assert!(other.try_lock().await.unwrap().is_none(), "any handle");
        let forms = other.try_lock_for(Duration::from_millis(200), Some(Duration::from_secs(5)));
        assert!(forms.await.unwrap().is_none());
    }
    // Outside any scope the task holds nothing, though it keeps a guard.
    assert!(lock.is_locked().await.unwrap());
    assert!(!lock.is_held().await.unwrap());
    assert_eq!(lock.hold_count().await.unwrap(), 0);
    assert_eq!(first.hold_count().await.unwrap(), 1);
    let token = first.fencing_token();
    first.unlock().await.unwrap();
    // (try_lock_for: the waits given up above may leave in the background after the unlock.)
    let next = lock
        .try_lock_for(Duration::from_secs(10), None)
        .await
        .unwrap();
    let next = next.expect("free after the unlock");
    assert!(next.fencing_token() > token);
    next.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_spawned_inside_a_scope_is_outside_it() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let lock = client.get_lock("spawned-inside");

    // Spawned inside with_lock's work: refused while the work runs, granted after it.
    let (token, waiter, work_ended) = lock
        .with_lock(|token| {
            let lock = lock.clone();
            async move {
                let nested = lock
                    .try_lock()
                    .await
                    .unwrap()
                    .expect("the work itself nests");
                assert_eq!(nested.fencing_token(), token);
                nested.unlock().await.unwrap();
                let l = lock.clone();
                let refused = tokio::spawn(async move {
                    let wait = l.try_lock_for(Duration::from_millis(300), None).await;
                    (wait.unwrap().is_none(), l.is_held().await.unwrap())
                });
                assert_eq!(refused.await.unwrap(), (true, false));
                let l = lock.clone();
                let waiter = tokio::spawn(async move {
                    let guard = l.lock().await.unwrap();
                    let at = Instant::now();
                    let token = guard.fencing_token();
                    guard.unlock().await.unwrap();
                    (token, at)
                });
                tokio::time::sleep(Duration::from_millis(200)).await;
                assert!(!waiter.is_finished(), "the spawned lock() waits");
                (token, waiter, Instant::now())
            }
        })
        .await
        .unwrap();
    let (granted, at) = within(Duration::from_secs(20), "the waiter", waiter)
        .await
        .unwrap();
    assert!(at >= work_ended, "granted after the work");
    assert!(granted > token, "a new hold: {token} then {granted}");

    // Spawned inside a guard's scope: the same.
    let guard = lock.lock().await.unwrap();
    let token = guard.fencing_token();
    let spawned = guard.scope(async {
        let nested = lock
            .try_lock()
            .await
            .unwrap()
            .expect("the scope itself nests");
        assert_eq!(nested.fencing_token(), token);
        nested.unlock().await.unwrap();
        let l = lock.clone();
        let wait = async move { l.try_lock_for(Duration::from_millis(300), None).await };
        // Awaited inside the scope: the scope lasts while the spawned task asks.
        tokio::spawn(wait).await.unwrap().unwrap().is_none()
    });
    assert!(spawned.await, "a task spawned in the scope waits");
    guard.unlock().await.unwrap();
    freed(&lock).await;
}
