//! A holder hears at once that its hold vanished when the server forgot it: once the client's
//! connection drops or reconnects, the watchdog re-checks every renewed hold right away (not a
//! third of a lease later) and marks the vanished ones lost.

mod support;

use std::time::{Duration, Instant};

use redis::AsyncCommands;
use support::{RedisServer, client};

/// Within this of the server being back, every vanished hold is known lost.
const NOTICE: Duration = Duration::from_secs(3);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_without_persistence_marks_every_renewed_hold_lost_at_once() {
    let mut server = RedisServer::start();
    // The default 30 s lease: the next regular renewal is 10 s away.
    let client = client(&server).await;
    let held = support::chaos::EveryKind::hold(&client, "gone").await;
    server.restart(); // back at once, empty
    let back = Instant::now();
    held.assert_lost_by(back + NOTICE).await;
    eprintln!(
        "every hold known lost {:?} after the restart",
        back.elapsed()
    );
}

/// A dropped connection to a server that still has the holds: the re-check renews them at once
/// (the TTL is back to the whole lease within a second, not a third of a lease later) and no
/// guard is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_connection_renews_every_hold_at_once_and_loses_none() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let lock = client.get_lock("kept:plain");
    let guard = lock.lock().await.unwrap();
    let mut raw = server.raw().await;
    // Let the TTL run down a little, so a renewal shows.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let before: i64 = raw.pttl("kept:plain").await.unwrap();
    assert!(before < 29_000, "{before}");
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .arg("SKIPME")
        .arg("yes")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(killed >= 1, "the client's connection was killed");
    let renewed = support::eventually(Duration::from_secs(1), || {
        let mut raw = raw.clone();
        async move {
            let now: i64 = raw.pttl("kept:plain").await.unwrap();
            now > 29_000
        }
    })
    .await;
    assert!(
        renewed,
        "the hold was not renewed at once after the dropped connection"
    );
    assert!(!guard.is_lost());
    guard.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
}

/// Holds with a fixed lease are never renewed, but the watchdog re-checks them with the renewed
/// ones: a restart marks them lost at once too, not at their lease's end a minute later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_marks_fixed_lease_holds_lost_at_once_too() {
    let mut server = RedisServer::start();
    let client = client(&server).await;
    let lease = Some(Duration::from_secs(60));
    let now = Duration::ZERO;
    let rw = client.get_read_write_lock("fixed:rw");
    let guards = [
        (
            "plain",
            client
                .get_lock("fixed:plain")
                .lock_with_lease(Duration::from_secs(60))
                .await
                .unwrap(),
        ),
        (
            "fair",
            client
                .get_fair_lock("fixed:fair")
                .try_lock_for(now, lease)
                .await
                .unwrap()
                .unwrap(),
        ),
        (
            "read",
            rw.read_lock()
                .try_lock_for(now, lease)
                .await
                .unwrap()
                .unwrap(),
        ),
        (
            "write",
            client
                .get_read_write_lock("fixed:rw2")
                .write_lock()
                .try_lock_for(now, lease)
                .await
                .unwrap()
                .unwrap(),
        ),
        (
            "mutex",
            client
                .get_mutex("fixed:mutex")
                .lock_with_lease(Duration::from_secs(60))
                .await
                .unwrap(),
        ),
    ];
    let permits = client.get_permit_expirable_semaphore("fixed:permits");
    permits.try_set_permits(2).await.unwrap();
    let permit = permits
        .acquire_with_lease(Duration::from_secs(60))
        .await
        .unwrap();
    // A renewed permit turned into a fixed one is re-checked too.
    let updated = permits.acquire().await.unwrap();
    updated.update_lease(Duration::from_secs(60)).await.unwrap();

    server.restart();
    let back = Instant::now();
    for (what, guard) in &guards {
        assert!(
            tokio::time::timeout(NOTICE.saturating_sub(back.elapsed()), guard.lost())
                .await
                .is_ok(),
            "{what}: a fixed-lease hold not told within {NOTICE:?} that the server lost it"
        );
    }
    for (what, permit) in [("permit", &permit), ("updated permit", &updated)] {
        assert!(
            tokio::time::timeout(NOTICE.saturating_sub(back.elapsed()), permit.lost())
                .await
                .is_ok(),
            "{what}: not told within {NOTICE:?}"
        );
    }
    eprintln!(
        "every fixed-lease hold known lost {:?} after the restart",
        back.elapsed()
    );
}

/// The re-check of a fixed-lease hold only reads: after a dropped connection the hold keeps
/// the TTL it had, and is not lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_connection_leaves_a_fixed_lease_as_it_was() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let lock = client.get_lock("fixed:kept");
    let guard = lock.lock_with_lease(Duration::from_secs(20)).await.unwrap();
    let mut raw = server.raw().await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .arg("SKIPME")
        .arg("yes")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(killed >= 1, "the client's connection was killed");
    // Time for the heartbeat to find the connection gone and the re-check to run.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let ttl: i64 = raw.pttl("fixed:kept").await.unwrap();
    assert!(
        ttl > 0 && ttl <= 17_000,
        "the fixed lease was extended: {ttl} ms left"
    );
    assert!(!guard.is_lost());
    guard.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
}

/// `update_lease` on a permit with a fixed lease while the server is paused (the heartbeat's
/// look at it timing out meanwhile) returns within the response timeout, never hangs; once the
/// server is back it works, and the permit was never taken for lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_lease_during_a_pause_returns() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let permits = client.get_permit_expirable_semaphore("fixed:update");
    permits.try_set_permits(1).await.unwrap();
    let permit = permits
        .acquire_with_lease(Duration::from_secs(60))
        .await
        .unwrap();
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(3000)
        .arg("ALL")
        .query_async(&mut server.raw().await)
        .await
        .unwrap();
    // The heartbeat (every second) times out in the pause.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let during = tokio::time::timeout(
        Duration::from_secs(8),
        permit.update_lease(Duration::from_secs(30)),
    )
    .await
    .expect("update_lease returns while the server is paused");
    if let Err(e) = during {
        assert!(e.to_string().contains("timed out"), "{e}");
    }
    tokio::time::sleep(Duration::from_millis(1500)).await; // the pause is over
    permit.update_lease(Duration::from_secs(30)).await.unwrap();
    assert!(!permit.is_lost());
    permit.release().await.unwrap();
}

/// A holder cut off from Redis (its connections reset, and no reconnect) hears that its hold is
/// lost at least 1% of the lease and 2 ms before Redis may free it, so a clock of the holder's
/// that runs slower than the server's (up to 500 ppm while NTP slews) still tells it first.
/// With a 4 s lease: 42 ms before another client is granted the lock (asserted with 12 ms for
/// the holder's wake-up on a loaded machine; it was about 1 ms before the margin).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_cut_off_hears_of_its_loss_a_clock_margin_before_the_next_grant() {
    let server = RedisServer::start();
    let proxy = support::Proxy::start(server.port()).await;
    let lease = Duration::from_secs(4);
    let holder = support::builder_for(&proxy.url())
        .watchdog_timeout(lease)
        .build()
        .await
        .unwrap();
    let waiter = client(&server).await;
    let guard = holder.get_lock("margin").lock().await.unwrap();
    // Renewed for a while, then cut off for good.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    proxy.set(support::Mode::Reset);
    let next = waiter.get_lock("margin");
    let granted = tokio::spawn(async move {
        let g = next.lock().await.unwrap();
        let at = Instant::now();
        g.unlock().await.unwrap();
        at
    });
    guard.lost().await;
    let told = Instant::now();
    let granted = granted.await.unwrap();
    let ahead = granted.saturating_duration_since(told);
    eprintln!("told {ahead:?} before the next grant");
    let margin = lease / 100 + Duration::from_millis(2);
    assert!(
        ahead >= margin - Duration::from_millis(12),
        "told only {ahead:?} before the next grant"
    );
}
