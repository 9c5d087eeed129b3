//! Starvation mode of the plain lock: a waiter that has waited past the threshold says so to
//! Redis, and the next release, by any client, hands it the lock before anyone else may take
//! it; a waiter handed the lock that died or gave up keeps it for the short handed lease at
//! most. Across clients, no two holds ever overlap meanwhile.

mod support;

use std::sync::Arc;
use std::time::Duration;

use redis::AsyncCommands;
use support::redisson_lock::JavaClient;
use support::{Checker, HolderProcess, RedisServer, builder, eventually, join_within};

const STARVING: &str = "ferrisson_lock_starving:{s}";

async fn starving_count(server: &RedisServer, key: &str) -> usize {
    let mut raw = server.raw().await;
    raw.zcard(key).await.unwrap()
}

/// A client whose waiters starve after 20 ms and whose handed holds last 400 ms.
async fn client(server: &RedisServer) -> ferrisson::Client {
    builder(server)
        .lock_starvation_threshold(Some(Duration::from_millis(20)))
        .lock_starvation_handoff_lease(Duration::from_millis(400))
        .build()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_starving_waiter_of_another_client_gets_the_lock_before_the_releasers_next_acquire() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let held = a.get_lock("s").lock().await.unwrap();
    let first_token = held.fencing_token();
    let waiter = tokio::spawn({
        let lock = b.get_lock("s");
        async move { lock.lock().await.unwrap() }
    });
    // The waiter asks again once it starves, while the lock is still held: it says so then,
    // before any release.
    assert!(
        eventually(Duration::from_secs(3), || async {
            starving_count(&server, STARVING).await == 1
        })
        .await,
        "the waiter joined the starving waiters"
    );
    held.unlock().await.unwrap();
    // At once after its release, the releasing client asks again, from another task: the
    // lock is already the starving waiter's.
    let again = tokio::spawn({
        let lock = a.get_lock("s");
        async move { lock.try_lock().await.unwrap().map(|g| g.fencing_token()) }
    })
    .await
    .unwrap();
    assert_eq!(
        again, None,
        "the release handed the lock to the starving waiter"
    );
    let guard = tokio::time::timeout(Duration::from_secs(3), waiter)
        .await
        .expect("the starving waiter takes up the handed lock")
        .unwrap();
    assert!(guard.fencing_token() > first_token);
    assert_eq!(starving_count(&server, STARVING).await, 0);
    // Taken up: its own lease (the watchdog's), not the short handed one.
    let mut raw = server.raw().await;
    let ttl: i64 = raw.pttl("s").await.unwrap();
    assert!(
        ttl > 1_000,
        "the handed hold became a full lease ({ttl} ms left)"
    );
    guard.unlock().await.unwrap();
    let exists: bool = raw.exists("s").await.unwrap();
    assert!(!exists);
}

/// A starving waiter in another process that dies: killed, its entry is dropped at the next
/// release (it no longer listens) and a live waiter gets the lock at once; hung (SIGSTOP: its
/// connections stay open), it is handed the lock, which it never takes up, and the hold runs
/// out after the handed lease, not the full one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_starving_waiter_that_dies_never_keeps_the_lock_past_the_handed_lease() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let other = client(&server).await;
    for hung in [false, true] {
        let held = a.get_lock("s").lock().await.unwrap();
        // A waiter in another process, with the default 50 ms threshold.
        let mut process = HolderProcess::spawn(&server, "s", 5_000, "lock");
        assert!(
            eventually(Duration::from_secs(10), || async {
                starving_count(&server, STARVING).await == 1
            })
            .await,
            "the waiting process joined the starving waiters"
        );
        if hung {
            process.stop();
        } else {
            process.kill().await;
        }
        // A live waiter elsewhere, who starves after the dead one.
        let live = tokio::spawn({
            let lock = other.get_lock("s");
            async move {
                let guard = lock
                    .try_lock_for(Duration::from_secs(5), None)
                    .await
                    .unwrap()
                    .expect("the live waiter gets the lock");
                let got = std::time::Instant::now();
                guard.unlock().await.unwrap();
                got
            }
        });
        assert!(
            eventually(Duration::from_secs(3), || async {
                starving_count(&server, STARVING).await == 2
            })
            .await
        );
        held.unlock().await.unwrap();
        let released = std::time::Instant::now();
        let got = join_within(Duration::from_secs(5), [live], "the live waiter")
            .await
            .pop()
            .unwrap();
        let after = got.duration_since(released);
        if hung {
            assert!(
                after >= Duration::from_millis(300),
                "handed to the hung waiter first, for the handed lease: {after:?}"
            );
        } else {
            assert!(
                after < Duration::from_millis(300),
                "the killed waiter's entry was dropped, nothing handed to it: {after:?}"
            );
        }
        assert!(
            after < Duration::from_secs(2),
            "within the handed lease: {after:?}"
        );
        let mut raw = server.raw().await;
        let exists: bool = raw.exists("s").await.unwrap();
        assert!(!exists);
        let _: () = raw.del(STARVING).await.unwrap();
        process.kill().await;
    }
}

/// A waiter that stops waiting leaves the starving waiters, and gives back a lock handed to it
/// that it never heard of (a lost message, or a release that ran as it gave up): the lock is
/// free at once, not after the handed lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_starving_waiter_that_gives_up_gives_a_lock_handed_to_it_back() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let held = a.get_lock("s").lock().await.unwrap();
    let timed_out = b
        .get_lock("s")
        .try_lock_for(Duration::from_millis(200), None)
        .await
        .unwrap();
    assert!(timed_out.is_none());
    assert_eq!(
        starving_count(&server, STARVING).await,
        0,
        "a waiter that gave up left the starving waiters"
    );

    let waiter = tokio::spawn({
        let lock = b.get_lock("s");
        async move { lock.lock().await }
    });
    assert!(
        eventually(Duration::from_secs(3), || async {
            starving_count(&server, STARVING).await == 1
        })
        .await
    );
    let mut raw = server.raw().await;
    let starving: Vec<String> = raw.zrange(STARVING, 0, 0).await.unwrap();
    // A hand-off the waiter does not hear of: the lock is its own, for a long handed lease,
    // and nothing is published.
    let _: () = redis::pipe()
        .atomic()
        .del("s")
        .hset("s", &starving[0], 1)
        .pexpire("s", 60_000)
        .zrem(STARVING, &starving[0])
        .query_async(&mut raw)
        .await
        .unwrap();
    waiter.abort();
    assert!(waiter.await.unwrap_err().is_cancelled());
    assert!(
        eventually(Duration::from_secs(3), || async {
            let mut raw = server.raw().await;
            !raw.exists::<_, bool>("s").await.unwrap()
        })
        .await,
        "the cancelled waiter gave the lock handed to it back"
    );
    drop(held);
}

/// Three clients of four tasks each, back to back, with a 1 ms threshold: most grants go
/// through starvation mode (hand-offs, take-ups, local handovers of starving waiters). No two
/// holds overlap and tokens rise in grant order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contenders_in_starvation_mode_never_overlap() {
    let server = RedisServer::start();
    let checker = Arc::new(Checker::default());
    let mut tasks = Vec::new();
    for c in 0..3 {
        let client = builder(&server)
            .lock_starvation_threshold(Some(Duration::from_millis(1)))
            .lock_starvation_handoff_lease(Duration::from_millis(200))
            .build()
            .await
            .unwrap();
        for t in 0..4 {
            let lock = client.get_lock("s");
            let checker = checker.clone();
            tasks.push(tokio::spawn(async move {
                for round in 0..25 {
                    let guard = if (c + t + round) % 5 == 0 {
                        // Some give up mid-wait, to leave the starving waiters.
                        match lock
                            .try_lock_for(Duration::from_millis(3), None)
                            .await
                            .unwrap()
                        {
                            Some(g) => g,
                            None => continue,
                        }
                    } else {
                        lock.lock().await.unwrap()
                    };
                    let start = checker.enter();
                    if round % 3 == 0 {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                    checker.exit(guard.fencing_token(), start);
                    guard.unlock().await.unwrap();
                }
            }));
        }
    }
    join_within(Duration::from_secs(60), tasks, "no contender starves").await;
    let holds = checker.verify();
    assert!(holds.len() >= 12 * 20, "{} grants", holds.len());
    assert!(
        server.calls("zadd").await > 0,
        "waiters said they starve (the mode this test is about ran)"
    );
}

/// A release that frees the lock while a Java Redisson waiter (the test support's emulation,
/// here half a millisecond slower to act on a message than ferrisson) waits beside a ferrisson
/// one tells ferrisson's waiters to hold back, and the Java waiter gets the lock; with only
/// ferrisson waiters, a release publishes the unlock alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_java_waiter_gets_the_first_go_at_a_lock_ferrisson_frees() {
    let server = RedisServer::start();
    // Without starvation mode: the ferrisson waiter must not be handed the lock instead.
    let unfair = || builder(&server).lock_starvation_threshold(None).build();
    let (a, b) = (unfair().await.unwrap(), unfair().await.unwrap());

    // Only ferrisson waits: the release publishes the unlock and nothing more.
    let held = a.get_lock("s").lock().await.unwrap();
    let waiter = tokio::spawn({
        let lock = b.get_lock("s");
        async move { lock.lock().await.unwrap() }
    });
    server
        .wait_subscribers("redisson_lock__channel:{s}", 1)
        .await;
    server
        .wait_subscribers("redisson_lock__channel:{s}:ferrisson", 1)
        .await;
    server.reset_stats().await;
    held.unlock().await.unwrap();
    let guard = waiter.await.unwrap();
    assert_eq!(server.calls("publish").await, 1, "only the unlock message");
    guard.unlock().await.unwrap();

    let java = JavaClient::connect_reacting(&server.url(), "s", Some(Duration::from_micros(500)))
        .await
        .unwrap();
    let mut java_first = 0;
    for round in 0..10 {
        let held = a.get_lock("s").lock().await.unwrap();
        let mut ferrisson_waiter = tokio::spawn({
            let lock = b.get_lock("s");
            async move { lock.lock().await.unwrap() }
        });
        let mut thread = java.thread(round);
        let mut java_waiter = tokio::spawn(async move {
            thread.lock().await.unwrap();
            thread
        });
        server
            .wait_subscribers("redisson_lock__channel:{s}:ferrisson", 1)
            .await;
        // Both asked and wait (the Java thread's try is answered with the TTL).
        tokio::time::sleep(Duration::from_millis(50)).await;
        held.unlock().await.unwrap();
        enum First {
            Java(support::redisson_lock::JavaThread),
            Ferrisson(ferrisson::LockGuard),
        }
        let first = tokio::select! {
            thread = &mut java_waiter => First::Java(thread.unwrap()),
            guard = &mut ferrisson_waiter => First::Ferrisson(guard.unwrap()),
        };
        // The second gets the lock once the first lets it go.
        match first {
            First::Java(mut thread) => {
                java_first += 1;
                assert_eq!(thread.unlock().await.unwrap(), Some(true));
                ferrisson_waiter.await.unwrap().unlock().await.unwrap();
            }
            First::Ferrisson(guard) => {
                guard.unlock().await.unwrap();
                let mut thread = java_waiter.await.unwrap();
                assert_eq!(thread.unlock().await.unwrap(), Some(true));
            }
        }
    }
    assert!(
        java_first >= 7,
        "the Java waiter got the first go in {java_first} of 10 rounds"
    );
}

/// A handover (another owner of the releasing client was picked) while a waiter of another
/// client listens, when the picked waiter is itself the first starving waiter: handed over with
/// a token and its full lease, never as a handed (provisional) hold, which a resend of the
/// handover could not tell from the handover itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handover_to_the_first_starving_waiter_is_a_real_one() {
    let server = RedisServer::start();
    let mut raw = server.raw().await;
    let _listening = support::Listener::on(&server, "redisson_lock__channel:{s}").await;
    let _: () = raw.hset("s", "releaser", 1).await.unwrap();
    let _: () = raw.zadd(STARVING, "waiter", 1).await.unwrap();
    let script = redis::Script::new(concat!(
        include_str!("../lua/clock.lua"),
        include_str!("../lua/lock_handover.lua")
    ));
    let handover = |resend: &'static str| {
        let mut inv = script.prepare_invoke();
        inv.key("s")
            .key("redisson_lock__channel:{s}")
            .key("ferrisson_token:{s}")
            .key(STARVING)
            .arg("releaser")
            .arg("waiter")
            .arg(30_000)
            .arg(0)
            .arg(resend)
            .arg(500)
            .arg("1");
        inv
    };
    let token: i64 = handover("0").invoke_async(&mut raw).await.unwrap();
    assert!(token >= 1, "handed over with a token, not freed: {token}");
    let ttl: i64 = raw.pttl("s").await.unwrap();
    assert!(
        ttl > 1_000,
        "the waiter's own lease, not the handed one: {ttl} ms"
    );
    let entry: Option<f64> = raw.zscore(STARVING, "waiter").await.unwrap();
    assert_eq!(entry, None, "out of the starving waiters");
    let again: i64 = handover("1").invoke_async(&mut raw).await.unwrap();
    assert_eq!(again, token, "a resend answers the same handover");
}
