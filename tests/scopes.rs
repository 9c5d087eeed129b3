//! Where a scope ends: a hold's scope nests acquisitions only while the hold stands, only in
//! the task (or thread) that runs inside it, and never in an `RMutex`'s hold. Each of these
//! was found by a review of owners per acquisition, against a real server.

mod support;

use std::time::Duration;

use ferrisson::Error;
use support::{RedisServer, client};

/// A scope future that outlives its guard: after the guard was given back, two scopes of it
/// must not each get the lock (a fresh grant under the old owner, shared by the second).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scopes_of_a_hold_given_back_find_it_gone() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let lock = client.get_lock("scope:given-back");
    let guard = lock.lock().await.unwrap();
    let (l1, l2) = (lock.clone(), lock.clone());
    let s1 = guard.scope(async move { l1.try_lock().await });
    let s2 = guard.scope(async move { l2.try_lock().await });
    guard.unlock().await.unwrap();
    for scope in [tokio::spawn(s1), tokio::spawn(s2)] {
        let nested = scope.await.unwrap();
        assert!(
            matches!(nested, Err(Error::LockLost { .. })),
            "a scope of a hold given back: {:?}",
            nested.map(|g| g.map(|g| g.fencing_token()))
        );
    }
    // The lock is free for anyone.
    let next = lock.try_lock().await.unwrap().expect("free");
    next.unlock().await.unwrap();
}

/// A scope of a lost hold (its fixed lease ran out): a nested acquisition finds it gone, as
/// `reenter` does, instead of a fresh grant under the old owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scope_of_a_lost_hold_finds_it_gone() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let lock = client.get_lock("scope:lost");
    let guard = lock
        .lock_with_lease(Duration::from_millis(200))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(guard.is_lost());
    assert!(matches!(guard.reenter().await, Err(Error::LockLost { .. })));
    let nested = guard.scope(lock.try_lock()).await;
    assert!(
        matches!(nested, Err(Error::LockLost { .. })),
        "{:?}",
        nested.map(|g| g.map(|g| g.fencing_token()))
    );
    // Another holder meanwhile: the lost scope still nests nothing.
    let other = client.get_lock("scope:lost").lock().await.unwrap();
    let nested = guard.scope(lock.try_lock()).await;
    assert!(matches!(nested, Err(Error::LockLost { .. })));
    other.unlock().await.unwrap();
}

/// Nothing nests in an `RMutex`'s hold, not even an `RLock` of the same name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_nests_in_a_mutex_hold() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let mutex = client.get_mutex("scope:mutex");
    let guard = mutex.lock().await.unwrap();
    let lock = client.get_lock("scope:mutex");
    assert!(lock.try_lock().await.unwrap().is_none(), "outside: refused");
    let inside = guard.scope(lock.try_lock()).await.unwrap();
    assert!(inside.is_none(), "an RLock nested in the RMutex's hold");
    let inside = guard.scope(mutex.try_lock()).await.unwrap();
    assert!(inside.is_none(), "the RMutex nested in itself");
    guard.unlock().await.unwrap();
}

/// A scope inside a mutex hold's scope still nests in the outer holds: the mutex's own scope
/// link adds nothing, and takes nothing away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mutex_hold_inside_a_scope_keeps_the_outer_scope() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let lock = client.get_lock("scope:outer");
    let mutex = client.get_mutex("scope:inner-mutex");
    let inner = lock.clone();
    let nested = lock
        .with_lock(|token| async move {
            let m = mutex.lock().await?;
            let again = m
                .scope(inner.try_lock())
                .await?
                .expect("nested in the outer hold");
            assert_eq!(again.fencing_token(), token);
            again.unlock().await?;
            m.unlock().await
        })
        .await
        .unwrap();
    nested.unwrap();
}

/// The blocking `with_lock`'s thread scope is not seen by a task that a runtime driven inside
/// the closure polls: that task was spawned before the hold and is not inside its work.
#[test]
fn a_thread_scope_is_not_seen_by_tasks_a_nested_runtime_polls() {
    let server = RedisServer::start();
    let client = ferrisson::blocking::Client::builder()
        .url(server.url())
        .build()
        .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let async_lock = client.as_async().get_lock("scope:thread");
    let task = rt.spawn(async move {
        let got = async_lock.try_lock().await.unwrap();
        let token = got.as_ref().map(|g| g.fencing_token());
        if let Some(g) = got {
            g.unlock().await.unwrap();
        }
        token
    });
    let lock = client.get_lock("scope:thread");
    let (holder, unrelated) = lock
        .with_lock(|token| (token, rt.block_on(task).unwrap()))
        .unwrap();
    assert_eq!(
        unrelated, None,
        "a task polled inside the closure nested in the hold {holder}"
    );
}
