//! Faults: a flushed script cache, a restarted, paused or dead server, and unknown outcomes.

mod support;

use std::time::{Duration, Instant};

use redis::AsyncCommands;
use support::{RedisServer, builder, client, eventually};

/// After `SCRIPT FLUSH`, a call meets NOSCRIPT and goes again as EVAL of the script's source,
/// which also puts the script back in the cache. (EVAL is counted: its name is the same on every
/// server, where SCRIPT LOAD's is `script|load` from Redis 7.0 and `script` before.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn noscript_after_script_flush_goes_again_as_eval() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let lock = client.get_lock("flushed");
    let guard = lock.lock().await.unwrap();
    let mut raw = server.raw().await;
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut raw)
        .await
        .unwrap();
    server.reset_stats().await;

    guard.unlock().await.expect("release after SCRIPT FLUSH");
    assert!(!lock.is_locked().await.unwrap());
    assert_eq!(
        server.calls("eval").await,
        2,
        "release and inspect each went again once"
    );
    let again = lock.lock().await.unwrap();
    again.unlock().await.unwrap();
    assert_eq!(
        server.calls("eval").await,
        3,
        "acquire went again once, release was cached by its EVAL"
    );
    assert_eq!(
        server.calls("evalsha").await,
        4,
        "one EVALSHA per call: {:?}",
        server.commandstats().await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_loses_the_lease_and_then_works_again() {
    let mut server = RedisServer::start();
    let client = builder(&server)
        .watchdog_timeout(Duration::from_millis(600))
        .build()
        .await
        .unwrap();
    let lock = client.get_lock("restarted");
    let guard = lock.lock().await.unwrap();
    server.restart(); // a server without persistence comes back empty
    tokio::time::timeout(Duration::from_secs(3), guard.lost())
        .await
        .expect("the renewal finds the lock gone");
    assert!(matches!(
        guard.unlock().await,
        Err(ferrisson::Error::LockLost { .. })
    ));
    let again = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match lock.lock().await {
                Ok(g) => break g,
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    })
    .await
    .expect("works again after the restart");
    assert!(!again.is_lost());
    again.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_goes_on_across_a_restart_mid_use() {
    let mut server = RedisServer::start();
    let client = client(&server).await;
    let worker = {
        let lock = client.get_lock("busy");
        tokio::spawn(async move {
            let (mut ok, mut failed) = (0u32, 0u32);
            let until = Instant::now() + Duration::from_secs(3);
            while Instant::now() < until {
                match lock.try_lock_for(Duration::from_millis(100), None).await {
                    Ok(Some(g)) => match g.unlock().await {
                        Ok(()) => ok += 1,
                        Err(_) => failed += 1,
                    },
                    Ok(None) => {}
                    Err(_) => {
                        failed += 1;
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            }
            (ok, failed)
        })
    };
    tokio::time::sleep(Duration::from_millis(700)).await;
    server.restart();
    let (ok, failed) = worker.await.unwrap();
    eprintln!("{ok} cycles, {failed} failed calls across the restart");
    assert!(ok > 20, "only {ok} cycles");
    let lock = client.get_lock("busy");
    assert!(
        eventually(Duration::from_secs(2), || async {
            !lock.is_locked().await.unwrap_or(true)
        })
        .await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_server_is_an_error_within_the_timeouts_never_a_hang() {
    let mut server = RedisServer::start();
    let url = server.url();
    // A call without a wait budget waits up to the reconnect wait for the server to come back
    // (tests/reconnect_ride.rs): 1 s here, within the bounds below.
    let client = builder(&server)
        .reconnect_wait(Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    let lock = client.get_lock("dead");
    let held = client.get_lock("dead-held").lock().await.unwrap();
    server.kill();

    let started = Instant::now();
    let err = lock.lock().await.expect_err("no server, no lock");
    assert!(matches!(err, ferrisson::Error::Redis(_)), "{err:?}");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "took {:?}",
        started.elapsed()
    );
    let started = Instant::now();
    assert!(lock.is_locked().await.is_err());
    assert!(held.unlock().await.is_err());
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "took {:?}",
        started.elapsed()
    );

    let started = Instant::now();
    let err = ferrisson::Client::builder()
        .url(url)
        .connection_timeout(Duration::from_millis(500))
        .build()
        .await
        .expect_err("nothing listens there");
    assert!(matches!(err, ferrisson::Error::Connect { .. }), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_server_is_a_timeout_and_the_late_grant_is_repaired() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let lock = client.get_lock("late");

    // No hold yet: the acquire times out, runs once the server thaws, and the repair sent
    // behind it removes the stray hold.
    server.pause();
    let started = Instant::now();
    let err = lock
        .try_lock()
        .await
        .expect_err("a paused server answers nothing");
    assert!(
        matches!(&err, ferrisson::Error::Redis(e) if e.is_timeout()),
        "{err:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    server.resume();
    assert!(
        eventually(Duration::from_secs(3), || async {
            !lock.is_locked().await.unwrap()
        })
        .await
    );

    // One hold: a timed-out nested acquire must not leave a second one.
    let guard = lock.lock().await.unwrap();
    server.pause();
    assert!(guard.scope(lock.lock()).await.is_err());
    server.resume();
    assert!(
        eventually(Duration::from_secs(3), || async {
            guard.hold_count().await.unwrap() == 1
        })
        .await
    );
    guard.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resent_release_is_answered_from_its_latch() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let lock = client.get_lock("latched");
    let outer = lock.lock().await.unwrap();
    let inner = outer.reenter().await.unwrap();
    let mut raw = server.raw().await;
    let owner: String = raw
        .hkeys::<_, Vec<String>>("latched")
        .await
        .unwrap()
        .remove(0);

    // The release script as the library sends it; the same request id twice, as a resend after
    // a lost reply would.
    let release = redis::Script::new(include_str!("../lua/lock_release.lua"));
    let send = |request: &str, resend: &str| {
        let mut inv = release.prepare_invoke();
        inv.key("latched")
            .key("redisson_lock__channel:{latched}")
            .key("ferrisson_lock_starving:{latched}")
            .key(format!("redisson_unlock_latch:{{latched}}:{request}"))
            .arg(&owner)
            .arg(30_000)
            .arg(5_000)
            .arg(resend)
            .arg(500);
        inv
    };
    let first: i64 = send("req-1", "0").invoke_async(&mut raw).await.unwrap();
    let resent: i64 = send("req-1", "1").invoke_async(&mut raw).await.unwrap();
    assert_eq!((first, resent), (0, 0));
    assert_eq!(
        outer.hold_count().await.unwrap(),
        1,
        "the resend released a second hold"
    );
    let latch_ttl: i64 = raw
        .pttl("redisson_unlock_latch:{latched}:req-1")
        .await
        .unwrap();
    assert!(
        latch_ttl > 0 && latch_ttl <= 5_000,
        "the latch is short-lived: {latch_ttl}"
    );

    // The last hold: the first send frees the lock without a latch; its resend finds nothing
    // and says so (2), which the client reads as "released" since its hold stood when sent.
    let last: i64 = send("req-2", "0").invoke_async(&mut raw).await.unwrap();
    let resent: Option<i64> = send("req-2", "1").invoke_async(&mut raw).await.unwrap();
    assert_eq!((last, resent), (1, Some(2)));
    let not_a_resend: Option<i64> = send("req-3", "0").invoke_async(&mut raw).await.unwrap();
    assert_eq!(
        not_a_resend, None,
        "a first send that finds no hold: not the owner"
    );
    // The library's guards are stale now: the server says so.
    assert!(matches!(
        outer.unlock().await,
        Err(ferrisson::Error::LockLost { .. })
    ));
    assert!(matches!(
        inner.unlock().await,
        Err(ferrisson::Error::LockLost { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_too_long_for_redis_is_refused_before_anything_is_written() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let lock = client.get_lock("forever");
    let huge = Duration::from_millis(i64::MAX as u64);
    let err = lock
        .try_lock_for(Duration::ZERO, Some(huge))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ferrisson::Error::InvalidArgument(_)),
        "{err:?}"
    );
    let mut raw = server.raw().await;
    let exists: bool = raw.exists("forever").await.unwrap();
    assert!(!exists);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_out_of_memory_is_a_redis_error_and_changes_nothing() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let mut raw = server.raw().await;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-policy")
        .arg("noeviction")
        .query_async(&mut raw)
        .await
        .unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("1")
        .query_async(&mut raw)
        .await
        .unwrap();
    let err = client.get_lock("oom").try_lock().await.unwrap_err();
    assert!(
        matches!(&err, ferrisson::Error::Redis(e) if e.to_string().contains("OOM")),
        "{err:?}"
    );
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("0")
        .query_async(&mut raw)
        .await
        .unwrap();
    let mut keys: Vec<String> = raw.keys("*").await.unwrap();
    keys.retain(|k| !k.starts_with("ferrisson_client:")); // the client's identity
    assert!(keys.is_empty(), "a refused grant wrote {keys:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repaired_nested_acquire_gives_the_ttl_back() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let rival_client = support::client(&server).await;
    let lock = client.get_lock("shrunk");
    let outer = lock.lock().await.unwrap();
    // A nested acquire with a tiny lease runs after the server thaws, but its reply is lost
    // to the timeout: the repair must give the outer hold its lease back.
    server.pause();
    assert!(
        outer
            .scope(lock.lock_with_lease(Duration::from_millis(50)))
            .await
            .is_err()
    );
    server.resume();
    assert!(
        eventually(Duration::from_secs(3), || async {
            outer.hold_count().await.unwrap() == 1
        })
        .await
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        rival_client
            .get_lock("shrunk")
            .try_lock()
            .await
            .unwrap()
            .is_none(),
        "the outer hold expired early"
    );
    assert!(!outer.is_lost());
    let ttl = lock.remaining_ttl().await.unwrap().unwrap();
    assert!(ttl > Duration::from_secs(20), "{ttl:?}");
    outer.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finding_the_lock_taken_by_another_marks_our_hold_lost() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let lock = client.get_lock("stolen");
    let guard = lock.lock().await.unwrap();
    let mut raw = server.raw().await;
    let _: () = raw.del("stolen").await.unwrap();
    let _: () = raw.hset("stolen", "someone-else:1", 1).await.unwrap();
    let _: () = raw.pexpire("stolen", 30_000).await.unwrap();
    // A new acquisition finding it taken says nothing of our hold; a nested one (the same
    // owner) checks it on the server: lost.
    assert!(lock.try_lock().await.unwrap().is_none());
    assert!(matches!(
        guard.scope(lock.try_lock()).await,
        Err(ferrisson::Error::LockLost { .. })
    ));
    assert!(guard.is_lost(), "the busy reply shows our hold is gone");
    assert!(matches!(
        guard.unlock().await,
        Err(ferrisson::Error::LockLost { .. })
    ));
    let theirs: bool = raw.hexists("stolen", "someone-else:1").await.unwrap();
    assert!(theirs, "the stale unlock touched the new holder");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_whose_reply_was_lost_is_resent_without_releasing_twice() {
    let server = RedisServer::start();
    let proxy = support::Proxy::start(server.port()).await;
    // Long enough for the resend to come after the connection is cut, not after a timeout.
    let client = support::builder_for(&proxy.url())
        .response_timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    let lock = client.get_lock("resent");
    // Fixed leases: no watchdog entry, so no renewal or heartbeat joins the script count (the
    // reconnect below would make the watchdog re-check renewed holds).
    let lease = Duration::from_secs(30);
    let outer = lock.lock_with_lease(lease).await.unwrap();
    let inner = outer.scope(lock.lock_with_lease(lease)).await.unwrap();
    let rival_client = support::client(&server).await;
    let rival = rival_client.get_lock("resent");

    // The partial release runs on the server, its reply is lost, the connection is cut: the
    // client resends it on a new connection and the latch answers. One hold must remain.
    server.reset_stats().await;
    proxy.set(support::Mode::DropReplies);
    let unlock = tokio::spawn(async move { inner.unlock().await });
    release_ran(&server).await;
    proxy.set(support::Mode::Pass); // cuts the connections that lost replies
    tokio::time::timeout(Duration::from_secs(5), unlock)
        .await
        .unwrap()
        .unwrap()
        .expect("the resend is answered");
    assert_eq!(
        server.calls("evalsha").await,
        2,
        "the release was sent, then resent"
    );
    assert_eq!(
        outer.hold_count().await.unwrap(),
        1,
        "the resent partial release took a second hold"
    );
    assert!(rival.try_lock().await.unwrap().is_none());

    // The last hold: released by the first send, whose reply is lost; the resend finds nothing
    // and the client reports the release that happened, not a lost lock.
    server.reset_stats().await;
    proxy.set(support::Mode::DropReplies);
    let unlock = tokio::spawn(async move { outer.unlock().await });
    release_ran(&server).await;
    proxy.set(support::Mode::Pass);
    tokio::time::timeout(Duration::from_secs(5), unlock)
        .await
        .unwrap()
        .unwrap()
        .expect("released, not lost");
    assert_eq!(
        server.calls("evalsha").await,
        2,
        "the release was sent, then resent"
    );
    let got = rival
        .try_lock()
        .await
        .unwrap()
        .expect("free after the last release");
    got.unlock().await.unwrap();
}

/// Waits until the server has run the release sent through the proxy that drops replies, so
/// that the switch back to passing cuts a connection whose reply was lost. (A release that
/// reached the server only after the switch would get its reply and be sent just once.)
async fn release_ran(server: &RedisServer) {
    assert!(
        server.calls_reach("evalsha", 1).await,
        "the release never reached the server"
    );
    // The server wrote the reply before it answered the INFO that showed the call; give the
    // proxy a moment to read it and throw it away before the switch.
    tokio::time::sleep(Duration::from_millis(50)).await;
}

/// A connection cut between two calls (a Redis restart, a proxy or load balancer dropping idle
/// connections): the next acquire finds it broken, puts the server right on a new connection
/// and asks again, instead of failing its caller for the reconnect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_on_a_cut_connection_is_asked_again_on_a_new_one() {
    let server = RedisServer::start();
    let proxy = support::Proxy::start(server.port()).await;
    let client = support::builder_for(&proxy.url()).build().await.unwrap();
    let lock = client.get_lock("cut");
    for round in 0..3 {
        lock.lock().await.unwrap().unlock().await.unwrap();
        proxy.set(support::Mode::Reset);
        proxy.set(support::Mode::Pass);
        let guard = match round {
            0 => lock.lock().await,
            1 => lock.try_lock().await.map(|g| g.expect("free")),
            _ => lock
                .try_lock_for(Duration::from_secs(1), None)
                .await
                .map(|g| g.expect("free")),
        }
        .unwrap_or_else(|e| panic!("round {round}: the first acquire after the cut failed: {e}"));
        assert_eq!(guard.hold_count().await.unwrap(), 1, "granted once");
        guard.unlock().await.unwrap();
    }
}

/// Reads after a cut connection are answered on their first call too (they change nothing, so
/// they are sent again on a new connection).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_on_a_cut_connection_is_sent_again_on_a_new_one() {
    let server = RedisServer::start();
    let proxy = support::Proxy::start(server.port()).await;
    let client = support::builder_for(&proxy.url()).build().await.unwrap();
    let lock = client.get_lock("cut-read");
    let fenced = client.get_fenced_lock("cut-read");
    let latch = client.get_count_down_latch("cut-latch");
    let semaphore = client.get_semaphore("cut-sem");
    let guard = lock.lock().await.unwrap();
    for round in 0..4 {
        proxy.set(support::Mode::Reset);
        proxy.set(support::Mode::Pass);
        let read = match round {
            0 => lock.is_locked().await.map(|held| held as u64),
            1 => fenced.token().await.map(|t| t.unwrap_or(0)),
            2 => latch.get_count().await,
            _ => semaphore.available_permits().await.map(|n| n as u64),
        };
        read.unwrap_or_else(|e| panic!("round {round}: the first read after the cut failed: {e}"));
    }
    guard.unlock().await.unwrap();
}
