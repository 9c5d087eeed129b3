//! Waiting: waiters wake on the unlock message, survive a killed subscription connection, never
//! hang on a lost message or a key without TTL, and cancelled waits leave nothing locked.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::AsyncCommands;
use support::{RedisServer, builder, client, eventually, join_within};
use tokio::sync::Barrier;

/// The scripts Redis has run, once that count has stayed put for 100 ms.
async fn steady_scripts(server: &RedisServer) -> u64 {
    let mut last = server.calls("evalsha").await;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = server.calls("evalsha").await;
        if now == last {
            return now;
        }
        last = now;
    }
    panic!("scripts kept running: {last}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handoffs_wake_the_waiter_by_message() {
    let server = RedisServer::start();
    // A long lease and re-check interval: a waiter that woke by timer would take seconds.
    let a = builder(&server)
        .recheck_interval(Duration::from_secs(10))
        .build()
        .await
        .unwrap();
    let b = builder(&server)
        .recheck_interval(Duration::from_secs(10))
        .build()
        .await
        .unwrap();
    let holder = a.get_lock("relay");
    let waiter = b.get_lock("relay");
    let mut latencies = Vec::new();
    for _ in 0..20 {
        let guard = holder.lock().await.unwrap();
        let before = server.calls("evalsha").await;
        let waiter = waiter.clone();
        let task = tokio::spawn(async move {
            let g = waiter.lock().await.unwrap();
            let woke = Instant::now();
            g.unlock().await.unwrap();
            woke
        });
        // The waiter asks Redis, subscribes, and asks again before it sleeps: after its second
        // attempt an unlock message reaches it even if it has not begun its nap.
        assert!(
            eventually(Duration::from_secs(5), || async {
                server.calls("evalsha").await >= before + 2
                    && server.subscribers("redisson_lock__channel:{relay}").await == 1
            })
            .await,
            "the waiter subscribed and asked Redis twice"
        );
        let released = Instant::now();
        guard.unlock().await.unwrap();
        let woke = tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .unwrap()
            .unwrap();
        latencies.push(woke - released);
    }
    latencies.sort();
    let median = latencies[latencies.len() / 2];
    eprintln!(
        "handoff latency: median {median:?}, max {:?}",
        latencies.last().unwrap()
    );
    // Woken by the message, a handoff takes a few ms (tens in a loaded debug build); a wake by
    // the re-check timer would take seconds.
    assert!(
        median < Duration::from_millis(200),
        "median handoff {median:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_still_acquires_when_its_subscription_connection_is_killed() {
    let server = RedisServer::start();
    let client = support::message_only_client(&server).await;
    // The holder is another client, so its release frees the lock and publishes (a holder of
    // the waiter's own client would hand the lock over without a message).
    let holder = support::client(&server).await.get_lock("resubscribe");
    let guard = holder.lock().await.unwrap();
    let waiter = client.get_lock("resubscribe");
    let task = tokio::spawn(async move { waiter.lock().await.unwrap().unlock().await });
    let mut raw = server.raw().await;
    // Wait until the waiter is subscribed, then cut its connection.
    assert!(
        eventually(Duration::from_secs(2), || async {
            server
                .subscribers("redisson_lock__channel:{resubscribe}")
                .await
                == 1
        })
        .await
    );
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query_async(&mut raw)
        .await
        .unwrap();
    // The waiter's pub/sub connection, and both clients' presence connections.
    assert_eq!(killed, 3);
    // The hub reconnects and subscribes again.
    assert!(
        eventually(Duration::from_secs(3), || async {
            server
                .subscribers("redisson_lock__channel:{resubscribe}")
                .await
                == 1
        })
        .await,
        "the hub did not subscribe again"
    );
    let released = Instant::now();
    guard.unlock().await.unwrap();
    tokio::time::timeout(Duration::from_secs(3), task)
        .await
        .expect("woken after resubscribing")
        .unwrap()
        .unwrap();
    assert!(released.elapsed() < Duration::from_secs(3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_message_or_a_key_without_ttl_never_hangs_a_waiter() {
    let server = RedisServer::start();
    let client = builder(&server)
        .recheck_interval(Duration::from_millis(300))
        .build()
        .await
        .unwrap();
    let mut raw = server.raw().await;
    // A foreign holder without TTL that goes away without publishing anything.
    let _: () = raw.hset("silent", "someone-else:1", 1).await.unwrap();
    let lock = client.get_lock("silent");
    let task = tokio::spawn(async move {
        let guard = lock.lock().await.unwrap();
        guard.unlock().await.unwrap();
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!task.is_finished(), "the waiter took a lock that was held");
    let _: () = raw.del("silent").await.unwrap();
    tokio::time::timeout(Duration::from_secs(2), task)
        .await
        .expect("re-check found the lock free")
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_lock_calls_leave_nothing_locked() {
    let server = RedisServer::start();
    let client = client(&server).await;
    // The holder is another task than the cancelled callers (this task).
    let holder = support::Elsewhere::new(client.get_lock("cancel"));
    let lock = client.get_lock("cancel");
    // Uncontended: cancel at every point of an acquire, from before sending to after the grant.
    for i in 0..200u64 {
        let budget = Duration::from_micros(i * 7);
        let _ = tokio::time::timeout(budget, lock.lock()).await;
    }
    assert!(
        eventually(Duration::from_secs(3), || async {
            !lock.is_locked().await.unwrap()
        })
        .await
    );
    // Contended: waiters cancelled while waiting, and right around the handoff.
    let guard = holder.lock().await.unwrap();
    for _ in 0..20 {
        assert!(
            tokio::time::timeout(Duration::from_millis(5), lock.lock())
                .await
                .is_err()
        );
    }
    let waiters: Vec<_> = (0..10)
        .map(|i| {
            let lock = client.get_lock("cancel");
            tokio::spawn(async move {
                let _ = tokio::time::timeout(Duration::from_millis(40 + i), lock.lock()).await;
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(45)).await;
    guard.unlock().await.unwrap();
    for w in waiters {
        w.await.unwrap();
    }
    assert!(
        eventually(Duration::from_secs(3), || async {
            !lock.is_locked().await.unwrap()
        })
        .await,
        "a cancelled waiter left a hold behind"
    );
    // And the lock still works for everybody.
    let g = lock
        .try_lock()
        .await
        .unwrap()
        .expect("usable after the cancellations");
    g.unlock().await.unwrap();
    let h = holder
        .try_lock()
        .await
        .unwrap()
        .expect("usable after the cancellations");
    h.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_nested_acquire_keeps_the_count_right() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let lock = client.get_lock("cancel-reentrant");
    let outer = lock.lock().await.unwrap();
    // Nested acquires (in the hold's scope, and from the guard) cancelled at every point.
    for i in 0..100u64 {
        let budget = Duration::from_micros(i * 11);
        match i % 2 {
            0 => drop(tokio::time::timeout(budget, outer.scope(lock.lock())).await),
            _ => drop(tokio::time::timeout(budget, outer.reenter()).await),
        }
    }
    assert!(
        eventually(Duration::from_secs(3), || async {
            outer.hold_count().await.unwrap() == 1
        })
        .await
    );
    outer.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_local_waiter_gets_the_lock_in_turn_by_handover() {
    every_local_waiter_gets_the_lock_in_turn(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_local_waiter_gets_the_lock_in_turn_by_messages() {
    every_local_waiter_gets_the_lock_in_turn(true).await;
}

/// Eight waiters of one client behind a holder of the same client. With `foreign_waiter`, a
/// subscriber of another client sits on the channel, so every release frees the lock and
/// publishes instead of handing it over.
async fn every_local_waiter_gets_the_lock_in_turn(foreign_waiter: bool) {
    let server = RedisServer::start();
    let client = client(&server).await;
    let mut foreign = redis::Client::open(server.url())
        .unwrap()
        .get_async_pubsub()
        .await
        .unwrap();
    if foreign_waiter {
        foreign
            .subscribe("redisson_lock__channel:{turns}")
            .await
            .unwrap();
    }
    server.reset_stats().await;
    let barrier = Arc::new(Barrier::new(9));
    let holder = client.get_lock("turns");
    let guard = holder.lock().await.unwrap();
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let lock = client.get_lock("turns");
            let barrier = barrier.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                let g = lock.lock().await.unwrap();
                tokio::time::sleep(Duration::from_millis(5)).await;
                g.unlock().await.unwrap();
            })
        })
        .collect();
    barrier.wait().await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    guard.unlock().await.unwrap();
    join_within(Duration::from_secs(5), tasks, "local waiters").await;
    // Eight 5 ms holds passed on by handover or messages; waking by the 5 s re-check would take
    // far longer.
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "took {:?}",
        started.elapsed()
    );
    let published = server.calls("publish").await;
    if foreign_waiter {
        assert!(published >= 9, "every release published: {published}");
    } else {
        assert_eq!(published, 1, "only the last release freed the lock");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnect_for_a_new_channel_subscribes_the_old_ones_too() {
    let server = RedisServer::start();
    let mut raw = server.raw().await;
    let client = support::message_only_client(&server).await;
    let _: () = raw.hset("old", "java:1", 1).await.unwrap();
    let _: () = raw.hset("new", "java:1", 1).await.unwrap();
    let waiter = client.get_lock("old");
    let task = tokio::spawn(async move { waiter.lock().await.map(drop) });
    assert!(
        eventually(Duration::from_secs(2), || async {
            server.subscribers("redisson_lock__channel:{old}").await == 1
        })
        .await
    );
    // Cut the subscription connection and keep the hub from reconnecting for a while.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg("pw")
        .query_async(&mut raw)
        .await
        .unwrap();
    let _: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query_async(&mut raw)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg("")
        .query_async(&mut raw)
        .await
        .unwrap();
    // A waiter on a new channel is what reconnects.
    assert!(
        client
            .get_lock("new")
            .try_lock_for(Duration::from_millis(300), None)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        eventually(Duration::from_secs(2), || async {
            server.subscribers("redisson_lock__channel:{old}").await == 1
        })
        .await
    );
    let _: () = raw.del("old").await.unwrap();
    let _: () = raw
        .publish("redisson_lock__channel:{old}", "0")
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(3), task)
        .await
        .expect("woken by the message")
        .unwrap()
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_leaves_with_an_unused_wake_up_passes_it_on() {
    let server = RedisServer::start();
    // A re-check so long that only a passed-on wake-up can explain a prompt grant.
    let client = support::message_only_client(&server).await;
    let mut raw = server.raw().await;
    let _: () = raw.hset("pass-on", "java:1", 1).await.unwrap();
    let first = client.get_lock("pass-on");
    let second = client.get_lock("pass-on");

    // The first waiter gets in line (subscribed, so first among the channel's waiters), is
    // polled a while longer, through the wake-up of the hub's first connection and the attempt
    // that follows, and is then left unpolled.
    let mut parked = Box::pin(first.lock());
    let subscribed = tokio::select! {
        _ = &mut parked => panic!("the first waiter took a lock that was held"),
        subscribed = eventually(Duration::from_secs(3), || async {
            server.subscribers("redisson_lock__channel:{pass-on}").await == 1
        }) => subscribed,
    };
    assert!(subscribed, "the first waiter subscribes");
    assert!(
        tokio::time::timeout(Duration::from_millis(200), &mut parked)
            .await
            .is_err()
    );
    // Whatever the first waiter had sent has been answered (it sleeps for 30 s).
    let before = steady_scripts(&server).await;
    let task = tokio::spawn(async move {
        let g = second.lock().await.unwrap();
        let got = Instant::now();
        g.unlock().await.unwrap();
        got
    });
    // The second waiter asks Redis, subscribes (locally: the channel is subscribed already) and
    // asks again before it sleeps: both attempts must find the lock held.
    assert!(
        server.calls_reach("evalsha", before + 2).await,
        "the second waiter asked Redis twice"
    );
    assert_eq!(
        steady_scripts(&server).await,
        before + 2,
        "the second waiter sleeps"
    );

    // The foreign holder unlocks; the message wakes the first waiter in line, which never
    // runs its attempt and is dropped: its wake-up must go to the second.
    let _: () = raw.del("pass-on").await.unwrap();
    let receivers: i64 = raw
        .publish("redisson_lock__channel:{pass-on}", "0")
        .await
        .unwrap();
    assert_eq!(receivers, 1);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!task.is_finished(), "the wake-up went to the first waiter");
    let dropped = Instant::now();
    drop(parked);
    let got = tokio::time::timeout(Duration::from_secs(3), task)
        .await
        .expect("the wake-up was passed on")
        .unwrap();
    assert!(got - dropped < Duration::from_secs(1));
}
