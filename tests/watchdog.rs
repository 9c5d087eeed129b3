//! Lease renewal and loss: the watchdog keeps held leases, tells holders when one is lost, and a
//! dead holder frees the lock within its lease.

mod support;

use std::time::{Duration, Instant};

use redis::AsyncCommands;
use support::{HolderProcess, RedisServer, builder, client};

const LEASE: Duration = Duration::from_millis(600);

async fn short_lease_client(server: &RedisServer) -> ferrisson::Client {
    builder(server)
        .watchdog_timeout(LEASE)
        .build()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_keeps_a_lock_for_three_leases_and_more() {
    let server = RedisServer::start();
    let client = short_lease_client(&server).await;
    let lock = client.get_lock("kept");
    let guard = lock.lock().await.unwrap();
    let rival = client.get_lock("kept");
    let until = Instant::now() + LEASE * 4;
    while Instant::now() < until {
        assert!(
            rival.try_lock().await.unwrap().is_none(),
            "lost the lock to a rival"
        );
        let ttl = lock
            .remaining_ttl()
            .await
            .unwrap()
            .expect("renewed locks keep a TTL");
        assert!(ttl <= LEASE);
        assert!(!guard.is_lost());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    guard.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_are_batched_into_one_script_call() {
    let server = RedisServer::start();
    let client = short_lease_client(&server).await;
    let mut guards = Vec::new();
    for i in 0..150 {
        guards.push(client.get_lock(&format!("batch:{i}")).lock().await.unwrap());
    }
    server.reset_stats().await;
    tokio::time::sleep(LEASE).await; // at least one renewal round for each
    let calls = server.calls("evalsha").await;
    // A tick every lease/3: at most 4 ticks in the sleep, each renewing the 150 leases in
    // ceil(150 / 100) = 2 script calls. One call per lease would be 450 or more.
    assert!((2..=8).contains(&calls), "renewal calls: {calls}");
    for guard in guards {
        assert!(!guard.is_lost());
        guard.unlock().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_key_marks_the_guard_lost_at_the_next_renewal() {
    let server = RedisServer::start();
    let client = short_lease_client(&server).await;
    let guard = client.get_lock("deleted").lock().await.unwrap();
    let mut raw = server.raw().await;
    let _: () = raw.del("deleted").await.unwrap();
    let started = Instant::now();
    tokio::time::timeout(LEASE, guard.lost())
        .await
        .expect("lost within one renewal period");
    assert!(guard.is_lost());
    assert!(started.elapsed() <= LEASE / 3 + Duration::from_millis(150));
    assert!(
        matches!(guard.unlock().await, Err(ferrisson::Error::LockLost { name }) if name == "deleted")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_paused_past_the_lease_loses_it() {
    let server = RedisServer::start();
    let client = short_lease_client(&server).await;
    let guard = client.get_lock("paused").lock().await.unwrap();
    let acquired = Instant::now();
    server.pause();
    tokio::time::timeout(LEASE * 3, guard.lost())
        .await
        .expect("lost once the lease passed");
    let lost_after = acquired.elapsed();
    server.resume();
    assert!(
        lost_after <= LEASE + Duration::from_millis(150),
        "reported lost only after {lost_after:?}"
    );
    assert!(
        guard.is_lost(),
        "lost stays lost even once renewals could work again"
    );
    tokio::time::sleep(LEASE / 2).await;
    assert!(guard.is_lost());
    // The server's own clock expired the hold meanwhile: the unlock finds nothing to release.
    assert!(matches!(
        guard.unlock().await,
        Err(ferrisson::Error::LockLost { .. })
    ));
    let again = client.get_lock("paused").try_lock().await.unwrap();
    again.expect("free again").unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_lease_expires_and_its_stale_unlock_leaves_the_new_holder_alone() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let first = client.get_lock("fixed");
    let stale = first
        .lock_with_lease(Duration::from_millis(300))
        .await
        .unwrap();
    assert!(!stale.is_lost());
    let ttl = first.remaining_ttl().await.unwrap().unwrap();
    assert!(ttl <= Duration::from_millis(300));

    let second = client.get_lock("fixed");
    let fresh = second.lock().await.unwrap(); // waits until the fixed lease has run out
    assert!(stale.is_lost(), "a fixed lease is lost once it has passed");
    assert!(fresh.fencing_token() > stale.fencing_token());
    assert!(matches!(
        stale.unlock().await,
        Err(ferrisson::Error::LockLost { .. })
    ));
    assert_eq!(
        second.hold_count().await.unwrap(),
        1,
        "the stale unlock touched the new holder"
    );
    assert!(!fresh.is_lost());
    fresh.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holder_process_frees_the_lock_within_its_lease() {
    let server = RedisServer::start();
    let mut holder = HolderProcess::spawn(&server, "orphan", LEASE.as_millis() as u64, "lock");
    let dead_token = holder.locked(Duration::from_secs(10)).await;

    // Outlive a few renewals first: the lease only runs out because the holder is dead.
    let client = client(&server).await;
    let lock = client.get_lock("orphan");
    assert!(
        lock.try_lock_for(LEASE * 2, None).await.unwrap().is_none(),
        "the live holder kept it"
    );
    holder.kill().await;
    let killed = Instant::now();
    let guard = tokio::time::timeout(LEASE * 4, lock.lock())
        .await
        .expect("freed by the lease")
        .unwrap();
    let freed_after = killed.elapsed();
    assert!(
        freed_after <= LEASE + Duration::from_millis(200),
        "freed after {freed_after:?}"
    );
    assert!(guard.fencing_token() > dead_token);
    guard.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_lease_stays_fixed_after_a_reentrant_watchdog_hold_ends() {
    let server = RedisServer::start();
    let client = builder(&server)
        .watchdog_timeout(Duration::from_millis(300))
        .build()
        .await
        .unwrap();
    let lock = client.get_lock("fixed-then-renewed");
    let fixed = lock
        .lock_with_lease(Duration::from_millis(500))
        .await
        .unwrap();
    let renewed = lock.lock().await.unwrap();
    renewed.unlock().await.unwrap();
    // Renewal stopped with the last watchdog hold: the lock frees itself at the last lease set.
    tokio::time::timeout(Duration::from_secs(2), fixed.lost())
        .await
        .expect("the fixed hold runs out");
    assert!(
        eventually_free(&lock, Duration::from_secs(2)).await,
        "the fixed-lease hold is still renewed"
    );
}

async fn eventually_free(lock: &ferrisson::RLock, within: Duration) -> bool {
    support::eventually(within, || async { !lock.is_locked().await.unwrap() }).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_of_another_type_in_a_renewal_batch_loses_only_its_own_lease() {
    let server = RedisServer::start();
    let client = short_lease_client(&server).await;
    let a = client.get_lock("batch-a").lock().await.unwrap();
    let b = client.get_lock("batch-b").lock().await.unwrap();
    let c = client.get_lock("batch-c").lock().await.unwrap();
    let mut raw = server.raw().await;
    let _: () = raw.del("batch-b").await.unwrap();
    let _: () = raw.set("batch-b", "not a lock").await.unwrap();
    tokio::time::timeout(LEASE, b.lost())
        .await
        .expect("b is lost at the next renewal");
    tokio::time::sleep(LEASE).await;
    assert!(
        !a.is_lost() && !c.is_lost(),
        "one bad key must not stop the batch"
    );
    let kept: String = raw.get("batch-b").await.unwrap();
    assert_eq!(kept, "not a lock");
    a.unlock().await.unwrap();
    c.unlock().await.unwrap();
}
