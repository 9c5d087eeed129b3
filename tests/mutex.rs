//! RMutex: not reentrant (a second acquire through the same handle waits), mutual exclusion
//! across handles and clients with increasing fencing tokens, the guard's usual features.

mod support;

use std::sync::Arc;
use std::time::Duration;

use ferrisson::Error;
use support::{Checker, RedisServer, builder, client, join_within};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_handle_does_not_get_it_again_while_held() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let mutex = client.get_mutex("once");
    let guard = mutex.lock().await.unwrap();
    assert!(mutex.try_lock().await.unwrap().is_none());
    assert!(
        mutex
            .try_lock_for(Duration::from_millis(200), None)
            .await
            .unwrap()
            .is_none(),
        "a second acquire through the same handle waits like anyone else's"
    );
    // A clone is the same mutex, and no owner either.
    let again = tokio::spawn({
        let mutex = mutex.clone();
        async move { mutex.lock().await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!again.is_finished(), "lock() passed through a held mutex");
    let first = guard.fencing_token();
    guard.unlock().await.unwrap();
    let second = tokio::time::timeout(Duration::from_secs(2), again)
        .await
        .expect("granted once released")
        .unwrap()
        .unwrap();
    assert!(second.fencing_token() > first);
    second.unlock().await.unwrap();
    assert!(!mutex.is_locked().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contenders_on_several_clients_never_overlap() {
    let server = RedisServer::start();
    let checker = Arc::new(Checker::default());
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let client = client(&server).await;
        let mutex = client.get_mutex("shared");
        for _ in 0..3 {
            // One handle for all tasks of a client: each acquire is its own owner.
            let (mutex, checker) = (mutex.clone(), checker.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..10 {
                    let guard = mutex.lock().await.unwrap();
                    let start = checker.enter();
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    checker.exit(guard.fencing_token(), start);
                    guard.unlock().await.unwrap();
                }
            }));
        }
    }
    join_within(Duration::from_secs(60), tasks, "contenders").await;
    assert_eq!(checker.verify().len(), 90);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_has_the_lock_guard_features() {
    let server = RedisServer::start();
    let client = builder(&server)
        .watchdog_timeout(Duration::from_millis(600))
        .build()
        .await
        .unwrap();
    let mutex = client.get_mutex("featured");
    // Renewed by the watchdog past its lease.
    let guard = mutex.lock().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!guard.is_lost());
    assert!(mutex.is_locked().await.unwrap());
    // Released from another task.
    tokio::spawn(async move { guard.unlock().await })
        .await
        .unwrap()
        .unwrap();
    // A fixed lease runs out and the guard says so; forcing it open works.
    let fixed = mutex
        .lock_with_lease(Duration::from_millis(200))
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(2), fixed.lost())
        .await
        .expect("the fixed lease runs out");
    let held = mutex.lock().await.unwrap();
    assert!(mutex.force_unlock().await.unwrap());
    assert!(matches!(held.unlock().await, Err(Error::LockLost { .. })));
    assert!(matches!(
        client.get_mutex("").lock().await,
        Err(Error::InvalidArgument(_))
    ));
}
