//! Calls ride through a reconnect: a call that needs a connection being reopened waits for it,
//! within its own wait budget (`try_lock_for`) or up to the client's reconnect wait (calls
//! without one), instead of failing at once with "not connected". And every object keeps a wait
//! budget whatever Redis does: with Redis paused, bounded waits of semaphores, permits and the
//! latch return within their budget, as every lock kind's `try_lock_for` does.

mod support;

use std::time::{Duration, Instant};

use ferrisson::Error;
use support::{RedisServer, builder, within};

/// A client whose calls without a budget wait up to `wait` for a reconnect.
async fn client(server: &RedisServer, wait: Duration) -> ferrisson::Client {
    builder(server).reconnect_wait(wait).build().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_right_after_a_restart_rides_through_the_reconnect() {
    let mut server = RedisServer::start();
    let client = client(&server, Duration::from_secs(5)).await;
    let lock = client.get_lock("ride:restart");
    lock.lock().await.unwrap().unlock().await.unwrap();

    server.restart();
    // Immediately, and several calls of each kind: none fails for the reconnect.
    for _ in 0..3 {
        let guard = within(Duration::from_secs(10), "lock after restart", lock.lock())
            .await
            .unwrap();
        assert!(lock.is_locked().await.unwrap());
        guard.unlock().await.unwrap();
    }

    // While Redis is down for a while, then back: lock() waits for it (no budget of its own:
    // up to the reconnect wait).
    server.kill();
    let started = Instant::now();
    let waiting = tokio::spawn({
        let lock = lock.clone();
        async move { lock.lock().await.map(|g| (g, Instant::now())) }
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    server.restart();
    let (guard, at) = within(Duration::from_secs(10), "lock across an outage", waiting)
        .await
        .unwrap()
        .unwrap();
    assert!(
        at.duration_since(started) >= Duration::from_millis(1400),
        "it waited for the server"
    );
    guard.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bounded_wait_uses_its_budget_during_an_outage() {
    let mut server = RedisServer::start();
    let client = client(&server, Duration::ZERO).await;
    let lock = client.get_lock("ride:budget");
    lock.lock().await.unwrap().unlock().await.unwrap();

    server.kill();
    // Down for the whole budget: it keeps trying to reconnect (attempts back off from 100 ms)
    // and fails once no attempt fits in what is left of the budget, not at once.
    let started = Instant::now();
    let result = lock.try_lock_for(Duration::from_millis(800), None).await;
    let took = started.elapsed();
    assert!(result.is_err(), "{result:?}");
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_millis(1500),
        "used its budget: {took:?}"
    );

    // Back within the budget: granted.
    let waiting = tokio::spawn({
        let lock = lock.clone();
        async move { lock.try_lock_for(Duration::from_secs(8), None).await }
    });
    tokio::time::sleep(Duration::from_millis(1000)).await;
    server.restart();
    let guard = within(
        Duration::from_secs(10),
        "try_lock_for across an outage",
        waiting,
    )
    .await
    .unwrap()
    .unwrap()
    .expect("granted once the server was back");
    guard.unlock().await.unwrap();

    // The reconnect wait of zero: a call without a budget fails at once, as before.
    server.kill();
    let started = Instant::now();
    let result = lock.lock().await;
    assert!(matches!(result, Err(Error::Redis(_))), "{result:?}");
    assert!(started.elapsed() < Duration::from_millis(1500));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bounded_waits_of_every_object_keep_their_budget_with_redis_paused() {
    let server = RedisServer::start();
    let client = builder(&server)
        .response_timeout(Duration::from_secs(5))
        .build()
        .await
        .unwrap();
    let semaphore = client.get_semaphore("paused:semaphore");
    assert!(semaphore.try_set_permits(1).await.unwrap());
    let permits = client.get_permit_expirable_semaphore("paused:permits");
    assert!(permits.try_set_permits(1).await.unwrap());
    let latch = client.get_count_down_latch("paused:latch");
    assert!(latch.try_set_count(1).await.unwrap());
    let lock = client.get_lock("paused:lock");
    let fair = client.get_fair_lock("paused:fair");
    let rw = client.get_read_write_lock("paused:rw");

    server.pause();
    let budget = Duration::from_millis(200);
    let bound = Duration::from_millis(1500);
    async fn timed<T: std::fmt::Debug>(
        what: &str,
        bound: Duration,
        call: impl std::future::Future<Output = T>,
    ) {
        let started = Instant::now();
        let out = call.await;
        let took = started.elapsed();
        assert!(took < bound, "{what} took {took:?} (answered {out:?})");
    }
    timed(
        "RSemaphore::try_acquire_for",
        bound,
        semaphore.try_acquire_for(1, budget),
    )
    .await;
    timed(
        "RPermitExpirableSemaphore::try_acquire_for",
        bound,
        permits.try_acquire_for(1, budget, None),
    )
    .await;
    timed("RCountDownLatch::await_for", bound, latch.await_for(budget)).await;
    timed(
        "RLock::try_lock_for",
        bound,
        lock.try_lock_for(budget, None),
    )
    .await;
    timed("fair try_lock_for", bound, fair.try_lock_for(budget, None)).await;
    timed(
        "read try_lock_for",
        bound,
        rw.read_lock().try_lock_for(budget, None),
    )
    .await;
    server.resume();
}
