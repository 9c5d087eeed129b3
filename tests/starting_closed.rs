//! Semaphores set to 0 permits and latches set to a count of 0, as `Semaphore(0)` and
//! `CountDownLatch(0)` are in Java: a semaphore that starts closed until a release (or
//! `add_permits`) opens it, from another client too; a latch that is open at once. Async and
//! blocking.

mod support;

use std::time::Duration;

use ferrisson::inspect::Snapshot;
use redis::AsyncCommands;
use support::{RedisServer, client, message_only_client, within};

const SEMAPHORE_CHANNEL: &str = "redisson_sc:{gate}";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_set_to_zero_stays_closed_until_another_client_releases() {
    let server = RedisServer::start();
    let (here, there) = (
        message_only_client(&server).await,
        message_only_client(&server).await,
    );
    let semaphore = here.get_semaphore("gate");
    assert!(semaphore.try_set_permits(0).await.unwrap());
    let mut raw = server.raw().await;
    let stored: String = raw.get("gate").await.unwrap();
    assert_eq!(
        stored, "0",
        "the count is set, to 0, as Redisson's trySetPermits(0) sets it"
    );
    // What an operator sees: a count of 0, not a semaphore never set.
    assert_eq!(semaphore.snapshot().await.unwrap().available, Some(0));
    match here.inspect("gate").await.unwrap() {
        Snapshot::Count(count) => assert_eq!(count.count, 0),
        other => panic!("a stored 0 is a count: {other:?}"),
    }
    // Set once: a second call changes nothing.
    assert!(!semaphore.try_set_permits(3).await.unwrap());
    assert!(
        !there
            .get_semaphore("gate")
            .try_set_permits(0)
            .await
            .unwrap()
    );
    assert_eq!(semaphore.available_permits().await.unwrap(), 0);
    assert!(!semaphore.try_acquire(1).await.unwrap());
    assert!(
        !semaphore
            .try_acquire_for(1, Duration::from_millis(200))
            .await
            .unwrap()
    );

    let waiter = {
        let semaphore = semaphore.clone();
        tokio::spawn(async move { semaphore.acquire(1).await })
    };
    server.wait_subscribers(SEMAPHORE_CHANNEL, 1).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiter.is_finished(), "a closed semaphore lets nobody in");
    match here.inspect("gate").await.unwrap() {
        Snapshot::Semaphore(waited) => assert_eq!(waited.available, Some(0)),
        other => panic!("a count with a semaphore waiter: {other:?}"),
    }
    // The re-check interval is 30 s: only the release's message can wake it in time.
    there.get_semaphore("gate").release(1).await.unwrap();
    within(Duration::from_secs(5), "the waiter", waiter)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(semaphore.available_permits().await.unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_semaphore_set_to_zero_waits_for_add_permits() {
    let server = RedisServer::start();
    let (here, there) = (
        message_only_client(&server).await,
        message_only_client(&server).await,
    );
    let semaphore = here.get_permit_expirable_semaphore("gate");
    assert!(semaphore.try_set_permits(0).await.unwrap());
    let mut raw = server.raw().await;
    let stored: String = raw.get("gate").await.unwrap();
    assert_eq!(stored, "0");
    assert!(!semaphore.try_set_permits(3).await.unwrap());
    assert_eq!(semaphore.available_permits().await.unwrap(), 0);
    assert_eq!(semaphore.snapshot().await.unwrap().available, Some(0));
    // Closed, not "more than it has in all": no permit, and no error.
    assert!(semaphore.try_acquire().await.unwrap().is_none());
    assert!(
        semaphore
            .try_acquire_for(2, Duration::from_millis(200), None)
            .await
            .unwrap()
            .is_none()
    );

    let waiter = {
        let semaphore = semaphore.clone();
        tokio::spawn(async move { semaphore.acquire().await })
    };
    server.wait_subscribers(SEMAPHORE_CHANNEL, 1).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiter.is_finished(), "a closed semaphore lets nobody in");
    let opener = there.get_permit_expirable_semaphore("gate");
    assert_eq!(opener.add_permits(1).await.unwrap(), 1);
    let permit = within(Duration::from_secs(5), "the waiter", waiter)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(permit.ids().len(), 1);
    permit.release().await.unwrap();

    // Closed again by removing every permit: acquirers wait again, rather than fail.
    assert_eq!(opener.add_permits(-1).await.unwrap(), 0);
    assert!(
        semaphore
            .try_acquire_for(1, Duration::from_millis(200), None)
            .await
            .unwrap()
            .is_none()
    );
    // A semaphore with some permits, but fewer in all than asked, is still refused.
    assert_eq!(opener.add_permits(1).await.unwrap(), 1);
    assert!(matches!(
        semaphore.acquire_many(2).await,
        Err(ferrisson::Error::InvalidArgument(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_latch_set_to_zero_is_open_and_writes_nothing() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let mut raw = server.raw().await;
    let latch = client.get_count_down_latch("gate");
    assert!(latch.try_set_count(0).await.unwrap());
    assert_eq!(latch.get_count().await.unwrap(), 0);
    assert!(latch.await_for(Duration::ZERO).await.unwrap(), "open");
    within(Duration::from_secs(2), "await_zero", latch.await_zero())
        .await
        .unwrap();
    let exists: bool = raw.exists("gate").await.unwrap();
    assert!(!exists, "an open latch leaves no key");
    assert!(matches!(
        client.inspect("gate").await.unwrap(),
        Snapshot::Absent(_)
    ));
    // Open, so it can be set again; a latch still counting is not changed by a count of 0.
    assert!(latch.try_set_count(0).await.unwrap());
    assert!(latch.try_set_count(2).await.unwrap());
    assert!(!latch.try_set_count(0).await.unwrap());
    assert_eq!(latch.get_count().await.unwrap(), 2);
    assert!(!latch.await_for(Duration::from_millis(100)).await.unwrap());
    assert_eq!(latch.count_down().await.unwrap(), 1);
    assert_eq!(latch.count_down().await.unwrap(), 0);

    // Redisson's trySetCount(0) leaves "0": an open latch here, which a count replaces.
    let _: () = raw.set("gate", "0").await.unwrap();
    assert_eq!(latch.get_count().await.unwrap(), 0);
    assert!(latch.await_for(Duration::ZERO).await.unwrap());
    assert!(latch.try_set_count(3).await.unwrap());
    assert_eq!(latch.get_count().await.unwrap(), 3);
    let _: () = raw.set("gate", "0").await.unwrap();
    assert!(latch.try_set_count(0).await.unwrap());
    let exists: bool = raw.exists("gate").await.unwrap();
    assert!(!exists, "the 0 left behind is gone");
}

/// The blocking twins: a waiting thread on one client, the opener on another.
#[test]
fn blocking_twins_start_closed_too() {
    use ferrisson::blocking::Client;

    let server = RedisServer::start();
    let connect = || {
        Client::builder()
            .url(server.url())
            .response_timeout(Duration::from_millis(800))
            .connection_timeout(Duration::from_millis(800))
            .recheck_interval(Duration::from_secs(30))
            .build()
            .expect("a blocking client connects")
    };
    let (here, there) = (connect(), connect());

    let semaphore = here.get_semaphore("gate");
    assert!(semaphore.try_set_permits(0).unwrap());
    assert!(!semaphore.try_set_permits(1).unwrap());
    assert!(!semaphore.try_acquire(1).unwrap());
    let waiter = {
        let semaphore = semaphore.clone();
        std::thread::spawn(move || semaphore.try_acquire_for(1, Duration::from_secs(10)))
    };
    std::thread::sleep(Duration::from_millis(300));
    assert!(!waiter.is_finished(), "a closed semaphore lets nobody in");
    there.get_semaphore("gate").release(1).unwrap();
    assert!(waiter.join().unwrap().unwrap(), "opened by the release");

    let permits = here.get_permit_expirable_semaphore("permits");
    assert!(permits.try_set_permits(0).unwrap());
    assert!(!permits.try_set_permits(1).unwrap());
    assert!(permits.try_acquire().unwrap().is_none());
    let waiter = {
        let permits = permits.clone();
        std::thread::spawn(move || permits.acquire())
    };
    std::thread::sleep(Duration::from_millis(300));
    assert!(!waiter.is_finished(), "a closed semaphore lets nobody in");
    let opener = there.get_permit_expirable_semaphore("permits");
    assert_eq!(opener.add_permits(1).unwrap(), 1);
    waiter.join().unwrap().unwrap().release().unwrap();

    let latch = here.get_count_down_latch("latch");
    assert!(latch.try_set_count(0).unwrap());
    assert_eq!(latch.get_count().unwrap(), 0);
    assert!(latch.await_for(Duration::ZERO).unwrap());
}
