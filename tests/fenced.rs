//! RFencedLock: tokens first, strictly increasing across clients, surviving force_unlock.

mod support;

use std::time::Duration;

use redis::AsyncCommands;
use support::{RedisServer, client};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_strictly_increase_across_clients_and_survive_force_unlock() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let b = client(&server).await;
    let fa = a.get_fenced_lock("fenced");
    let fb = b.get_fenced_lock("fenced");
    assert_eq!(fa.token().await.unwrap(), None, "no grant yet");

    let mut last = 0;
    for round in 0..10 {
        let lock = if round % 2 == 0 { &fa } else { &fb };
        let (token, guard) = match round % 4 {
            0 => lock.lock_and_get_token().await.unwrap(),
            1 => lock.try_lock_and_get_token().await.unwrap().expect("free"),
            2 => lock
                .lock_and_get_token_with_lease(Duration::from_secs(5))
                .await
                .unwrap(),
            _ => lock
                .try_lock_and_get_token_for(Duration::from_secs(1), None)
                .await
                .unwrap()
                .expect("free"),
        };
        assert!(token > last, "token {token} after {last}");
        assert_eq!(token, guard.fencing_token());
        assert_eq!(fa.token().await.unwrap(), Some(token));
        last = token;
        if round == 5 {
            // Forced open: the counter is untouched, the next grant goes on from it.
            assert!(fb.force_unlock().await.unwrap());
            assert!(guard.unlock().await.is_err());
        } else {
            guard.unlock().await.unwrap();
        }
    }
    let mut raw = server.raw().await;
    let ttl: i64 = raw.pttl("redisson_lock_token:{fenced}").await.unwrap();
    assert_eq!(ttl, -1, "the counter never expires");

    // Nested holds share their first token; a fenced lock and a plain lock of one name share
    // the counter.
    let (t1, g1) = fa.lock_and_get_token().await.unwrap();
    let (t2, g2) = g1.scope(fa.lock_and_get_token()).await.unwrap();
    assert_eq!(t1, t2);
    g2.unlock().await.unwrap();
    g1.unlock().await.unwrap();
    let plain = a.get_lock("fenced").lock().await.unwrap();
    assert!(plain.fencing_token() > t1);
    plain.unlock().await.unwrap();
    assert!(
        !fa.is_locked().await.unwrap(),
        "RLock's methods through Deref"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_key_of_another_type_is_wrong_type() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let mut raw = server.raw().await;
    let _: () = raw.sadd("redisson_lock_token:{odd}", "x").await.unwrap();
    let lock = client.get_fenced_lock("odd");
    assert!(matches!(
        lock.token().await,
        Err(ferrisson::Error::WrongType { .. })
    ));
    assert!(matches!(
        lock.lock_and_get_token().await,
        Err(ferrisson::Error::WrongType { .. })
    ));
    assert!(matches!(
        client.get_fenced_lock("").token().await,
        Err(ferrisson::Error::InvalidArgument(_))
    ));
}

/// A Java `RFencedLock` counts in `redisson_lock_token:{name}` alone (its grant is an INCR of
/// it); ferrisson's fenced grants count there too, so the two hand out one increasing sequence,
/// whichever grants in between. ferrisson's plain grants on the name go above both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn java_and_ferrisson_fenced_locks_share_one_sequence() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let mut raw = server.raw().await;
    let fenced = client.get_fenced_lock("shared-seq");
    let plain = client.get_lock("shared-seq");
    let mut last = 0;
    for round in 0..6 {
        let token = match round % 3 {
            // A Java RFencedLock grant: INCR of Redisson's per-name counter.
            0 => raw
                .incr("redisson_lock_token:{shared-seq}", 1)
                .await
                .unwrap(),
            1 => {
                let (token, guard) = fenced.lock_and_get_token().await.unwrap();
                guard.unlock().await.unwrap();
                token
            }
            _ => {
                let guard = plain.lock().await.unwrap();
                let token = guard.fencing_token();
                guard.unlock().await.unwrap();
                // Only a fenced grant tells Java's counter; compare Java with fenced grants.
                assert!(token > last, "plain token {token} after {last}");
                continue;
            }
        };
        assert!(token > last, "round {round}: token {token} after {last}");
        last = token;
    }
}

/// A resent handover of a fenced lock answers the slot counter's value as the waiter's token
/// (the real one is not kept); the name's counter is raised to it, so a Java `RFencedLock`
/// grant afterwards still goes above it. Run on the script itself: the resend path needs a
/// handover reply lost on the wire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resent_handover_keeps_the_names_counter_above_the_token_it_answers() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let counter = client.get_lock("fx").token_counter_key();
    let mut raw = server.raw().await;
    let _: () = raw.hset("fx", "waiter", 1).await.unwrap();
    let _: () = raw.set(&counter, 100).await.unwrap();
    let _: () = raw.set("redisson_lock_token:{fx}", 50).await.unwrap();
    let script = redis::Script::new(concat!(
        include_str!("../lua/clock.lua"),
        include_str!("../lua/lock_handover.lua")
    ));
    let token: i64 = script
        .key("fx")
        .key("redisson_lock__channel:{fx}")
        .key(&counter)
        .key("ferrisson_lock_starving:{fx}")
        .key("redisson_lock_token:{fx}")
        .arg("releaser")
        .arg("waiter")
        .arg(30_000)
        .arg(0)
        .arg("1")
        .arg(500)
        .arg("0")
        .invoke_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(token, 100, "handed over, with the slot counter's value");
    let java: i64 = raw.incr("redisson_lock_token:{fx}", 1).await.unwrap();
    assert!(java > token, "a Java grant got {java} after token {token}");
}

/// The handover script's integer replies, one per outcome, and its tokens never below 1 (which
/// could not be told from them), whatever the counter holds. Run on the script itself, as a release of this
/// client sends it (no subscriber of another client unless said).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handover_script_answers_one_integer_per_outcome() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let counter = client.get_lock("hx").token_counter_key();
    let mut raw = server.raw().await;
    assert_eq!(
        handover(&mut raw, &counter, "0").await.unwrap(),
        redis::Value::Int(-1)
    );
    assert_eq!(
        handover(&mut raw, &counter, "1").await.unwrap(),
        redis::Value::Int(-2)
    );
    let _: () = raw.hset("hx", "releaser", 2).await.unwrap();
    assert_eq!(
        handover(&mut raw, &counter, "0").await.unwrap(),
        redis::Value::Int(-3)
    );
    assert_eq!(raw.hget::<_, _, i64>("hx", "releaser").await.unwrap(), 2);

    // A counter set by hand below 0: the token is the server's clock in µs, never below 1.
    let _: () = raw.hset("hx", "releaser", 1).await.unwrap();
    let _: () = raw.set(&counter, -5).await.unwrap();
    let redis::Value::Int(token) = handover(&mut raw, &counter, "0").await.unwrap() else {
        panic!("a token");
    };
    assert!(token > 1_000_000_000_000_000, "{token}");
    assert_eq!(raw.get::<_, i64>(&counter).await.unwrap(), token);
    let _: () = raw.del("hx").await.unwrap();
    let _: () = raw.hset("hx", "releaser", 1).await.unwrap();

    // A counter ahead of the clock: the counter + 1.
    let ahead: i64 = 1 << 52;
    let _: () = raw.set(&counter, ahead + 41).await.unwrap();
    assert_eq!(
        handover(&mut raw, &counter, "0").await.unwrap(),
        redis::Value::Int(ahead + 42)
    );
    assert_eq!(raw.hget::<_, _, i64>("hx", "waiter").await.unwrap(), 1);
    // Its resend, the waiter holding: the counter's value again.
    assert_eq!(
        handover(&mut raw, &counter, "1").await.unwrap(),
        redis::Value::Int(ahead + 42)
    );

    // Another client waits: freed and published instead.
    let _: () = raw.del("hx").await.unwrap();
    let _: () = raw.hset("hx", "releaser", 1).await.unwrap();
    let _listener = support::Listener::on(&server, "redisson_lock__channel:{hx}").await;
    assert_eq!(
        handover(&mut raw, &counter, "0").await.unwrap(),
        redis::Value::Int(0)
    );
    assert!(!raw.exists::<_, bool>("hx").await.unwrap());
}

/// Hands lock `hx` from `releaser` to `waiter` by the script, as a release of this client sends
/// it (with no subscriber of its own).
async fn handover(
    raw: &mut redis::aio::MultiplexedConnection,
    counter: &str,
    resend: &str,
) -> redis::RedisResult<redis::Value> {
    redis::Script::new(concat!(
        include_str!("../lua/clock.lua"),
        include_str!("../lua/lock_handover.lua")
    ))
    .key("hx")
    .key("redisson_lock__channel:{hx}")
    .key(counter)
    .arg("releaser")
    .arg("waiter")
    .arg(30_000)
    .arg(0)
    .arg(resend)
    .invoke_async(raw)
    .await
}
