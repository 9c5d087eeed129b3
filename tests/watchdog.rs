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
    let rival = support::Elsewhere::new(client.get_lock("kept"));
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
    let window_start = Instant::now();
    server.reset_stats().await;
    tokio::time::sleep(LEASE).await; // at least one renewal round for each
    let calls = server.calls("evalsha").await;
    let window = window_start.elapsed();
    // The watchdog wakes when its earliest lease is due and renews in one round every lease due
    // within the next LEASE/6, so its rounds are more than LEASE/6 apart (a failed renewal is
    // retried sooner, but only fails after the response timeout). When the 150 acquisitions
    // took long, the leases fall due in two groups and rounds come about every LEASE/6 rather
    // than every LEASE/3; a round holds at most 150 leases, ceil(150 / 100) = 2 script calls.
    // So at most 2 calls per LEASE/6 of the window, plus the round at each end of it (one may
    // have been sent before the reset and counted after it): 16 for a window of exactly LEASE,
    // more if the test slept late. One call per lease would be 150 for every round, and each
    // lease needs a round in any LEASE (or it would be lost, checked below).
    let most = 2 * (window.as_millis() / (LEASE / 6).as_millis() + 2) as u64;
    assert!(
        (2..=most).contains(&calls),
        "renewal calls: {calls} in {window:?} (at most {most} if batched)"
    );
    for guard in guards {
        assert!(!guard.is_lost());
        guard.unlock().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_key_marks_the_guard_lost_at_the_next_renewal() {
    let server = RedisServer::start();
    // A longer lease than the others: the renewal comes at lease/3, while a lease that no
    // renewal ever checked is only lost at its deadline, a whole lease after the acquire was
    // sent. Telling the two apart leaves 2/3 of the lease (800 ms) for scheduling.
    let lease = LEASE * 2;
    let client = builder(&server)
        .watchdog_timeout(lease)
        .build()
        .await
        .unwrap();
    let acquired = Instant::now(); // before the acquire is sent: its deadline comes after +lease
    let guard = client.get_lock("deleted").lock().await.unwrap();
    let mut raw = server.raw().await;
    let _: () = raw.del("deleted").await.unwrap();
    tokio::time::timeout(lease * 2, guard.lost())
        .await
        .expect("lost within one renewal period");
    let lost_after = acquired.elapsed();
    assert!(guard.is_lost());
    assert!(
        lost_after < lease,
        "reported lost only after {lost_after:?}: by the lease deadline, not by a renewal"
    );
    assert!(
        matches!(guard.unlock().await, Err(ferrisson::Error::LockLost { name }) if name == "deleted")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_paused_past_the_lease_loses_it() {
    let server = RedisServer::start();
    // A response timeout well past the test's patience: the loss must be reported by the
    // lease's own deadline, not once a renewal stuck in the paused server times out.
    let client = builder(&server)
        .watchdog_timeout(LEASE)
        .response_timeout(Duration::from_secs(5))
        .build()
        .await
        .unwrap();
    let guard = client.get_lock("paused").lock().await.unwrap();
    server.pause();
    // Everything the server ran for this hold (the acquire, a renewal if one came early) ran
    // before this instant: the client's deadline and Redis's own expiry both come within LEASE
    // of it. A renewal sent during the pause waits in the socket until the resume; the loss
    // must be reported without it, since the server only thaws once it has been.
    let paused_at = Instant::now();
    tokio::time::timeout(LEASE * 3, guard.lost())
        .await
        .expect("lost once the lease passed");
    let lost_after = paused_at.elapsed();
    // The client counts its deadline from when it sent the acquire; Redis counts the expiry
    // from when it ran it, a little later. Thawing in between would let the queued renewal
    // find the hold still there and renew it. Thaw only once Redis's expiry has surely passed
    // (all of it came before the pause), so the renewal finds nothing.
    tokio::time::sleep_until((paused_at + LEASE + Duration::from_millis(100)).into()).await;
    server.resume();
    assert!(
        lost_after <= LEASE + Duration::from_millis(450),
        "reported lost only {lost_after:?} after the pause"
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

    let second = support::Elsewhere::new(client.get_lock("fixed"));
    let fresh = second.lock().await.unwrap(); // waits until the fixed lease has run out
    assert!(stale.is_lost(), "a fixed lease is lost once it has passed");
    assert!(fresh.fencing_token() > stale.fencing_token());
    assert!(matches!(
        stale.unlock().await,
        Err(ferrisson::Error::LockLost { .. })
    ));
    assert_eq!(
        fresh.hold_count().await.unwrap(),
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
        // The last renewal ran before the kill: Redis frees the lock within LEASE of it; the
        // rest is for the waiter to notice and retry in a loaded debug build.
        freed_after <= LEASE + Duration::from_millis(500),
        "freed after {freed_after:?}"
    );
    assert!(guard.fencing_token() > dead_token);
    guard.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_lease_stays_fixed_after_a_nested_watchdog_hold_ends() {
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
    let renewed = fixed.scope(lock.lock()).await.unwrap();
    assert_eq!(renewed.fencing_token(), fixed.fencing_token(), "nested");
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

/// Unlocking a guard already known lost answers `LockLost` at once, without a round trip: with
/// the server paused it neither waits for the response timeout nor reports a timeout. Once the
/// server is back, the task locks again as a new hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlocking_a_guard_known_lost_answers_at_once() {
    let server = RedisServer::start();
    let client = builder(&server)
        .watchdog_timeout(LEASE)
        .response_timeout(Duration::from_secs(5))
        .build()
        .await
        .unwrap();
    let lock = client.get_lock("known-lost");
    let first = lock.lock().await.unwrap();
    let again = first.reenter().await.unwrap(); // a nested hold of the same lease
    server.pause();
    tokio::time::timeout(LEASE * 3, first.lost())
        .await
        .expect("lost once the lease passed");
    let asked = Instant::now();
    let answer = first.unlock().await;
    let took = asked.elapsed();
    assert!(
        matches!(answer, Err(ferrisson::Error::LockLost { .. })),
        "{answer:?}"
    );
    assert!(took < Duration::from_millis(100), "answered after {took:?}");
    let answer = tokio::time::timeout(Duration::from_millis(100), again.unlock())
        .await
        .expect("the other guard of the lost lease answers at once too");
    assert!(matches!(answer, Err(ferrisson::Error::LockLost { .. })));
    server.resume();
    let next = lock
        .try_lock_for(Duration::from_secs(5), None)
        .await
        .unwrap()
        .expect("the lock is free again");
    assert_eq!(
        next.hold_count().await.unwrap(),
        1,
        "a new hold, not a third one"
    );
    next.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
}
