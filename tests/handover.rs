//! Handover: a release that grants the lock straight to a waiter of the same client, and the
//! client's own view of who holds a lock. What it must keep: one round trip per handed-over
//! acquisition, FIFO among local waiters, no handover past waiters of other clients, and no
//! stranded hold when the waiter or the release is cancelled mid-handover.

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::AsyncCommands;
use support::{Mode, Proxy, RedisServer, builder, builder_for, client, eventually, join_within};

/// A margin for a waiter whose last attempt has reached Redis to get the reply and begin its
/// nap (only then may a release hand it the lock).
const SETTLE: Duration = Duration::from_millis(250);

/// Waits until Redis has run more scripts than `before` (every attempt that asks Redis is one).
async fn asked_redis(server: &RedisServer, before: u64) {
    assert!(
        server.calls_reach("evalsha", before + 1).await,
        "the waiter never asked Redis"
    );
}

/// A task waiting in `lock()` on `lock`, by the time it naps; it yields the handle and the
/// guard. Another owner holds the lock: the waiter asks Redis (this client's own view of the
/// holder is trusted only for holds granted while it listened on the lock's channel), then
/// naps for the re-check interval (5 s). Its first attempt is seen reaching Redis, and SETTLE
/// lets the rest of its attempts (after subscribing) come back.
async fn napping_waiter(
    server: &RedisServer,
    lock: ferrisson::RLock,
) -> tokio::task::JoinHandle<(ferrisson::RLock, ferrisson::LockGuard)> {
    let before = server.calls("evalsha").await;
    let waiter = tokio::spawn(async move {
        let guard = lock.lock().await.unwrap();
        (lock, guard)
    });
    asked_redis(server, before).await;
    tokio::time::sleep(SETTLE).await;
    waiter
}

/// Whether `key` is gone within 3 s (a hold given back in the background).
async fn freed(server: &RedisServer, key: &str) -> bool {
    eventually(Duration::from_secs(3), || async {
        let mut raw = server.raw().await;
        !raw.exists::<_, bool>(key).await.unwrap()
    })
    .await
}

async fn fields(server: &RedisServer, key: &str) -> Vec<(String, String)> {
    let mut raw = server.raw().await;
    let mut all: Vec<(String, String)> = raw.hgetall(key).await.unwrap();
    all.sort();
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_hands_the_lock_to_a_local_waiter_in_its_own_round_trip() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let a = client.get_lock("handed");
    let b = client.get_lock("handed");
    let held = a.lock().await.unwrap();
    let first_token = held.fencing_token();
    let waiter = napping_waiter(&server, b).await;
    assert!(!waiter.is_finished());
    server.reset_stats().await;

    held.unlock().await.unwrap();
    let (b, guard) = tokio::time::timeout(Duration::from_secs(2), waiter)
        .await
        .expect("the waiter is handed the lock")
        .unwrap();
    assert_eq!(
        server.calls("evalsha").await,
        1,
        "the release script granted the waiter: no attempt of its own"
    );
    assert_eq!(
        server.calls("publish").await,
        0,
        "the lock was never free, so no unlock was published"
    );
    assert!(guard.fencing_token() > first_token);
    let owner_fields = fields(&server, "handed").await;
    assert_eq!(owner_fields.len(), 1, "only the new owner holds it");
    assert_eq!(owner_fields[0].1, "1");
    // The hold is the waiter task's, carried by its guard.
    assert!(!guard.is_lost());
    assert!(!b.is_held().await.unwrap(), "not this task's");
    let ttl = b.remaining_ttl().await.unwrap().unwrap();
    assert!(
        ttl > Duration::from_secs(25),
        "the waiter's watchdog lease, got {ttl:?}"
    );
    guard.unlock().await.unwrap();
    assert!(!b.is_locked().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_over_fixed_lease_is_the_waiters_and_is_not_renewed() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let a = client.get_lock("handed-lease");
    let b = client.get_lock("handed-lease");
    let held = a.lock().await.unwrap();
    // The waiter naps once the hub's first connection had it ask Redis (see `napping_waiter`).
    let before = server.calls("evalsha").await;
    let waiter =
        tokio::spawn(async move { b.lock_with_lease(Duration::from_millis(700)).await.unwrap() });
    asked_redis(&server, before).await;
    tokio::time::sleep(SETTLE).await;
    server.reset_stats().await;
    held.unlock().await.unwrap();
    let guard = waiter.await.unwrap();
    assert_eq!(
        server.calls("publish").await,
        0,
        "handed over: the lock was never free"
    );
    let ttl = client
        .get_lock("handed-lease")
        .remaining_ttl()
        .await
        .unwrap()
        .unwrap();
    assert!(ttl <= Duration::from_millis(700), "{ttl:?}");
    assert!(
        eventually(Duration::from_secs(3), || async {
            !client.get_lock("handed-lease").is_locked().await.unwrap()
        })
        .await,
        "a fixed lease runs out"
    );
    assert!(guard.is_lost());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_waiters_are_served_in_arrival_order() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let holder = client.get_lock("queue");
    let held = holder.lock().await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..4 {
        let lock = client.get_lock("queue");
        let order = order.clone();
        tasks.push(tokio::spawn(async move {
            let guard = lock.lock().await.unwrap();
            order.lock().unwrap().push(i);
            tokio::time::sleep(Duration::from_millis(20)).await;
            guard.unlock().await.unwrap();
        }));
        tokio::time::sleep(SETTLE).await;
    }
    held.unlock().await.unwrap();
    join_within(Duration::from_secs(5), tasks, "local waiters").await;
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_handover_while_a_waiter_of_another_client_is_subscribed() {
    let server = RedisServer::start();
    // Without starvation mode, which would hand the lock to whichever waiter starves first
    // (tests/starvation.rs): this is about the plain release.
    let unfair = || builder(&server).lock_starvation_threshold(None).build();
    let here = unfair().await.unwrap();
    let elsewhere = unfair().await.unwrap();
    let held = here.get_lock("shared").lock().await.unwrap();
    // Whoever gets the lock keeps it until the release under test has been checked: a waiter's
    // own unlock would publish too.
    let go = Arc::new(tokio::sync::Semaphore::new(0));
    let waiter = |lock: ferrisson::RLock| {
        let go = go.clone();
        tokio::spawn(async move {
            let guard = lock.lock().await.unwrap();
            go.acquire().await.unwrap().forget();
            guard.unlock().await.unwrap();
        })
    };
    // A waiter of this client naps, so the release could hand it the lock (see
    // `napping_waiter`)...
    let before = server.calls("evalsha").await;
    let mut waiters = vec![waiter(here.get_lock("shared"))];
    asked_redis(&server, before).await;
    // ... and one of another client is subscribed.
    waiters.push(waiter(elsewhere.get_lock("shared")));
    assert!(
        eventually(Duration::from_secs(5), || async {
            server.subscribers("redisson_lock__channel:{shared}").await == 2
        })
        .await,
        "both clients subscribe"
    );
    tokio::time::sleep(SETTLE).await;
    server.reset_stats().await;
    held.unlock().await.unwrap();
    assert_eq!(
        server.calls("publish").await,
        1,
        "the release freed the lock and published for the other client's waiter"
    );
    go.add_permits(2);
    join_within(Duration::from_secs(5), waiters, "both waiters get the lock").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_java_style_subscriber_blocks_handover_too() {
    let server = RedisServer::start();
    // Without starvation mode, whose first starving waiter is handed over to however many
    // others wait (tests/starvation.rs): this is about the plain policy.
    let client = builder(&server)
        .lock_starvation_threshold(None)
        .build()
        .await
        .unwrap();
    // A foreign waiter is only a subscription on the lock's channel.
    let foreign = redis::Client::open(server.url()).unwrap();
    let mut pubsub = foreign.get_async_pubsub().await.unwrap();
    pubsub
        .subscribe("redisson_lock__channel:{foreign}")
        .await
        .unwrap();

    let held = client.get_lock("foreign").lock().await.unwrap();
    let waiter = napping_waiter(&server, client.get_lock("foreign")).await;
    held.unlock().await.unwrap();
    let mut messages = pubsub.on_message();
    let message = tokio::time::timeout(
        Duration::from_secs(2),
        futures::StreamExt::next(&mut messages),
    )
    .await
    .expect("the unlock is published")
    .unwrap();
    assert_eq!(message.get_payload::<String>().unwrap(), "0");
    let (_, guard) = tokio::time::timeout(Duration::from_secs(2), waiter)
        .await
        .expect("the local waiter still gets the lock")
        .unwrap();
    guard.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_asking_while_another_owner_of_the_client_holds_is_answered_locally() {
    let server = RedisServer::start();
    // Without takeover: a waiter that has waited half a second looks once whether the holder
    // is gone, and the bystander's look would count among the calls counted below.
    let client = support::builder(&server)
        .takeover_grace(None)
        .build()
        .await
        .unwrap();
    let channel = "redisson_lock__channel:{known}";
    let first = client.get_lock("known").lock().await.unwrap();
    // Two waiters: the first is handed the lock below, the second keeps the client subscribed
    // to the lock's channel throughout, so the handed hold is one this client has been
    // listening for since before it was granted.
    let keeper = napping_waiter(&server, client.get_lock("known")).await;
    let bystander = napping_waiter(&server, client.get_lock("known")).await;
    assert!(
        eventually(Duration::from_secs(2), || async {
            server.subscribers(channel).await == 1
        })
        .await
    );
    first.unlock().await.unwrap();
    let (_, held) = tokio::time::timeout(Duration::from_secs(2), keeper)
        .await
        .expect("handed over")
        .unwrap();

    let other = client.get_lock("known");
    server.reset_stats().await;
    assert!(
        other
            .try_lock_for(Duration::from_millis(300), None)
            .await
            .unwrap()
            .is_none()
    );
    // Counted by what only these calls run: every acquire reads the server's clock (TIME) once,
    // and the leave removes the waiter from the starving set (ZREM). A count of EVALSHA would
    // also take in the watchdog's heartbeat (one a second while `held` is renewed), and the
    // leave is sent as the wait gives up, so it is waited for.
    assert!(
        server.calls_reach("zrem", 1).await,
        "the waiter left the starving set as it gave up: {:?}",
        server.commandstats().await
    );
    assert_eq!(
        server.calls("time").await,
        2,
        "a bounded wait asks Redis when its nap ends, not on its first two attempts; and \
         starving after 50 ms, it asks once then, to say so: {:?}",
        server.commandstats().await
    );
    // Not waiting, it asks Redis: only Redis knows of a lock freed behind the holder's back.
    let before = server.calls("evalsha").await;
    assert!(other.try_lock().await.unwrap().is_none());
    assert_eq!(server.calls("evalsha").await - before, 1);
    held.unlock().await.unwrap();
    let (_, last) = tokio::time::timeout(Duration::from_secs(2), bystander)
        .await
        .expect("handed over to the bystander")
        .unwrap();
    last.unlock().await.unwrap();
}

/// Issue 9, item 3: another client forced the lock open while nobody of this client listened
/// on its channel; a waiter arriving afterwards must not trust this client's stale view of the
/// holder and nap for the re-check interval (5 s) on a free lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_does_not_sleep_on_a_lock_forced_open_before_it_came() {
    let server = RedisServer::start();
    let here = client(&server).await;
    let elsewhere = client(&server).await;
    // Open the hub's connection first (a first connection wakes every waiter to ask Redis,
    // which would hide the fault): one short wait on another lock.
    let busy = here.get_lock("warm-up").lock().await.unwrap();
    let warm = support::Elsewhere::new(here.get_lock("warm-up"));
    assert!(
        warm.try_lock_for(Duration::from_millis(200), None)
            .await
            .unwrap()
            .is_none()
    );
    busy.unlock().await.unwrap();
    let held = here.get_lock("forced-before").lock().await.unwrap();
    assert!(
        elsewhere
            .get_lock("forced-before")
            .force_unlock()
            .await
            .unwrap()
    );
    let started = Instant::now();
    let waiter = support::Elsewhere::new(here.get_lock("forced-before"));
    let guard = tokio::time::timeout(Duration::from_secs(1), waiter.lock())
        .await
        .expect("the lock is free in Redis: granted without waiting for a re-check")
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(1));
    guard.unlock().await.unwrap();
    assert!(held.unlock().await.is_err(), "the forced-open hold is lost");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_hold_that_runs_out_unreleased_does_not_strand_local_waiters() {
    let server = RedisServer::start();
    let client = client(&server).await;
    // Taken before the hold is asked for, so before Redis starts its lease.
    let started = Instant::now();
    let leaked = client
        .get_lock("leaked")
        .lock_with_lease(Duration::from_millis(300))
        .await
        .unwrap();
    // Never released: only its lease ends the hold.
    std::mem::forget(leaked);
    let waiter = support::Elsewhere::new(client.get_lock("leaked"));
    let guard = tokio::time::timeout(Duration::from_secs(3), waiter.lock())
        .await
        .expect("the waiter gets the lock once the lease ran out")
        .unwrap();
    // Not before the lease ran out (Redis counts whole ms: a little slack).
    assert!(
        started.elapsed() >= Duration::from_millis(290),
        "granted {:?} after the 300 ms hold was asked for",
        started.elapsed()
    );
    guard.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_unlock_wakes_a_local_waiter_despite_the_live_local_holder() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let held = client.get_lock("forced").lock().await.unwrap();
    let waiter = napping_waiter(&server, client.get_lock("forced")).await;
    let started = Instant::now();
    assert!(client.get_lock("forced").force_unlock().await.unwrap());
    let (_, guard) = tokio::time::timeout(Duration::from_secs(2), waiter)
        .await
        .expect("the unlock message makes the waiter ask Redis")
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(1));
    guard.unlock().await.unwrap();
    assert!(held.unlock().await.is_err(), "the forced-open hold is lost");
}

/// The release is slowed down by a proxy that delays replies: the handover runs on the server at
/// once, while the client hears of it only later.
async fn proxied(server: &RedisServer) -> (Proxy, ferrisson::Client) {
    let proxy = Proxy::start(server.port()).await;
    // Without starvation mode: these tests time single requests through the delaying proxy,
    // and a starving waiter's extra attempt would queue ahead of them.
    let client = builder_for(&proxy.url())
        .response_timeout(Duration::from_secs(2))
        .lock_starvation_threshold(None)
        .build()
        .await
        .unwrap();
    (proxy, client)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_gives_up_while_being_handed_the_lock_leaves_it_free() {
    let server = RedisServer::start();
    let (proxy, client) = proxied(&server).await;
    let held = client.get_lock("abandoned").lock().await.unwrap();
    let holder_fields = fields(&server, "abandoned").await;
    let waiter = napping_waiter(&server, client.get_lock("abandoned")).await;
    proxy.set(Mode::Delay(Duration::from_secs(1)));
    let release = tokio::spawn(async move { held.unlock().await });
    // The handover has run on the server (the waiter is the lock's only owner now); the waiter
    // gives up before the release's reply comes back.
    assert!(
        eventually(Duration::from_secs(3), || async {
            let now = fields(&server, "abandoned").await;
            now.len() == 1 && now != holder_fields
        })
        .await,
        "the release handed the lock to the waiter: {:?}",
        fields(&server, "abandoned").await
    );
    waiter.abort();
    assert!(waiter.await.unwrap_err().is_cancelled());
    release
        .await
        .unwrap()
        .expect("the release itself succeeded");
    proxy.set(Mode::Pass);
    assert!(
        freed(&server, "abandoned").await,
        "the hold handed to the departed waiter was taken back"
    );
    let guard = client
        .get_lock("abandoned")
        .try_lock()
        .await
        .unwrap()
        .expect("free for anyone");
    guard.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_handover_release_does_not_strand_the_waiter() {
    let server = RedisServer::start();
    let (proxy, client) = proxied(&server).await;
    let held = client.get_lock("cut").lock().await.unwrap();
    let waiter = napping_waiter(&server, client.get_lock("cut")).await;
    proxy.set(Mode::Delay(Duration::from_millis(400)));
    // The caller stops waiting for the release mid-flight.
    assert!(
        tokio::time::timeout(Duration::from_millis(100), held.unlock())
            .await
            .is_err()
    );
    proxy.set(Mode::Pass);
    let (lock, guard) = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter gets the lock after all")
        .unwrap();
    // The waiter task's hold, carried by its guard, once on the server.
    assert!(!guard.is_lost());
    assert!(lock.is_locked().await.unwrap());
    let owners = fields(&server, "cut").await;
    assert_eq!(owners.len(), 1, "one owner");
    assert_eq!(owners[0].1, "1", "once");
    guard.unlock().await.unwrap();
    assert!(
        eventually(Duration::from_secs(2), || async {
            !lock.is_locked().await.unwrap()
        })
        .await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_forced_open_by_the_client_is_not_taken_for_held_by_it() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let held = client.get_lock("forced-here").lock().await.unwrap();
    assert!(client.get_lock("forced-here").force_unlock().await.unwrap());
    // Nobody waited, so no message matters here: the client must not answer from its own view.
    let guard = client
        .get_lock("forced-here")
        .try_lock()
        .await
        .unwrap()
        .expect("free after force_unlock");
    guard.unlock().await.unwrap();
    assert!(held.unlock().await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_picked_for_a_slow_handover_keeps_to_its_wait_budget() {
    let server = RedisServer::start();
    let (proxy, client) = proxied(&server).await;
    let held = client.get_lock("slow-handover").lock().await.unwrap();
    let lock = client.get_lock("slow-handover");
    // The waiter naps once the hub's first connection had it ask Redis (see `napping_waiter`);
    // the release must find it napping before its budget ends. A waiter not handed the lock
    // would ask Redis at the end of its budget and wait the reply's delay out.
    let before = server.calls("evalsha").await;
    let waiter = tokio::spawn(async move {
        let started = Instant::now();
        let got = lock
            .try_lock_for(Duration::from_millis(600), None)
            .await
            .unwrap();
        (got.is_some(), started.elapsed())
    });
    asked_redis(&server, before).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    proxy.set(Mode::Delay(Duration::from_millis(1500)));
    let release = tokio::spawn(async move { held.unlock().await });
    let (got, waited) = waiter.await.unwrap();
    assert!(!got, "the release's reply came after the budget");
    assert!(
        waited < Duration::from_millis(1200),
        "gave up with its budget, not with the release: {waited:?}"
    );
    release
        .await
        .unwrap()
        .expect("the release itself succeeded");
    proxy.set(Mode::Pass);
    assert!(
        freed(&server, "slow-handover").await,
        "the hold handed to the waiter that gave up was taken back"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contended_acquisitions_inside_one_client_cost_one_script_each() {
    const OWNERS: usize = 6;
    const ROUNDS: usize = 50;
    let server = RedisServer::start();
    let client = client(&server).await;
    // Warm the hub's connection (its first connection wakes every waiter to ask Redis).
    let warm = client.get_lock("busy").lock().await.unwrap();
    assert!(
        support::Elsewhere::new(client.get_lock("busy"))
            .try_lock_for(Duration::from_millis(20), None)
            .await
            .unwrap()
            .is_none()
    );
    let start = Arc::new(tokio::sync::Barrier::new(OWNERS + 1));
    let mut tasks = Vec::new();
    for _ in 0..OWNERS {
        let lock = client.get_lock("busy");
        let start = start.clone();
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            for _ in 0..ROUNDS {
                lock.lock().await.unwrap().unlock().await.unwrap();
            }
        }));
    }
    server.reset_stats().await;
    start.wait().await;
    tokio::time::sleep(SETTLE).await;
    warm.unlock().await.unwrap();
    join_within(Duration::from_secs(30), tasks, "owners").await;
    let acquisitions = (OWNERS * ROUNDS) as f64;
    let scripts = server.calls("evalsha").await as f64;
    assert!(
        scripts <= acquisitions * 1.1,
        "{scripts} scripts for {acquisitions} acquisitions"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_lock_sees_a_lock_another_client_forced_open_while_held_here() {
    let server = RedisServer::start();
    let here = client(&server).await;
    let elsewhere = client(&server).await;
    let held = here.get_lock("forced-elsewhere").lock().await.unwrap();
    assert!(
        elsewhere
            .get_lock("forced-elsewhere")
            .force_unlock()
            .await
            .unwrap()
    );
    let guard = here
        .get_lock("forced-elsewhere")
        .try_lock()
        .await
        .unwrap()
        .expect("Redis says it is free, whatever this client believes");
    guard.unlock().await.unwrap();
    assert!(held.unlock().await.is_err());
}
