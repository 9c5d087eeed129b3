//! Every bad input gets a clear, typed error and changes nothing.

mod support;

use std::time::Duration;

use ferrisson::Error;
use redis::AsyncCommands;
use support::{RedisServer, client};

/// How many keys the server has, but the live clients' identities (`ferrisson_client:*`).
async fn dbsize(server: &RedisServer) -> i64 {
    let keys: Vec<String> = server.raw().await.keys("*").await.unwrap();
    keys.iter()
        .filter(|k| !k.starts_with("ferrisson_client:"))
        .count() as i64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_names_are_refused_by_every_operation() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let too_long = "n".repeat(16 * 1024 + 1);
    for name in [
        "",
        too_long.as_str(),
        "open{brace",
        "close}brace",
        "empty{}tag",
    ] {
        let lock = client.get_lock(name);
        let shown = &name[..name.len().min(20)];
        assert!(
            matches!(lock.lock().await, Err(Error::InvalidArgument(_))),
            "lock({shown})"
        );
        assert!(
            matches!(lock.try_lock().await, Err(Error::InvalidArgument(_))),
            "try_lock({shown})"
        );
        assert!(matches!(
            lock.try_lock_for(Duration::from_millis(10), None).await,
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            lock.lock_with_lease(Duration::from_secs(1)).await,
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            lock.is_locked().await,
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            lock.is_held().await,
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            lock.hold_count().await,
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            lock.remaining_ttl().await,
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            lock.force_unlock().await,
            Err(Error::InvalidArgument(_))
        ));
    }
    let message = client
        .get_lock("")
        .try_lock()
        .await
        .unwrap_err()
        .to_string();
    assert!(message.contains("empty"), "{message}");
    assert_eq!(dbsize(&server).await, 0, "a refused call wrote something");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_leases_are_refused_and_zero_waits_mean_one_attempt() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let lock = client.get_lock("durations");
    for lease in [Duration::ZERO, Duration::from_micros(500)] {
        assert!(matches!(
            lock.lock_with_lease(lease).await,
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            lock.try_lock_for(Duration::from_secs(1), Some(lease)).await,
            Err(Error::InvalidArgument(_))
        ));
    }
    assert!(matches!(
        lock.lock_with_lease(Duration::MAX).await,
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(dbsize(&server).await, 0);

    let guard = lock
        .try_lock_for(Duration::ZERO, None)
        .await
        .unwrap()
        .expect("free: one attempt wins");
    let other = support::Elsewhere::new(client.get_lock("durations"));
    let started = std::time::Instant::now();
    assert!(
        other
            .try_lock_for(Duration::ZERO, None)
            .await
            .unwrap()
            .is_none()
    );
    assert!(started.elapsed() < Duration::from_millis(500));
    // A wait too long for the clock waits like lock() does.
    let waiter = tokio::spawn(async move { other.try_lock_for(Duration::MAX, None).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    guard.unlock().await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(2), waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    got.expect("granted").unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_of_another_type_is_wrong_type_and_stays_untouched() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let mut raw = server.raw().await;
    let _: () = raw.set("a-string", "precious").await.unwrap();
    let _: () = raw.rpush("a-list", "x").await.unwrap();
    for key in ["a-string", "a-list"] {
        let lock = client.get_lock(key);
        let wrong = |r: &Error| matches!(r, Error::WrongType { key: k } if k == key);
        assert!(wrong(&lock.lock().await.unwrap_err()), "lock on {key}");
        assert!(wrong(&lock.try_lock().await.unwrap_err()));
        assert!(wrong(
            &lock
                .lock_with_lease(Duration::from_secs(1))
                .await
                .unwrap_err()
        ));
        assert!(wrong(&lock.is_locked().await.unwrap_err()));
        assert!(wrong(&lock.hold_count().await.unwrap_err()));
        assert!(wrong(&lock.remaining_ttl().await.unwrap_err()));
        assert!(wrong(&lock.force_unlock().await.unwrap_err()));
        assert!(lock.lock().await.unwrap_err().to_string().contains(key));
    }
    let value: String = raw.get("a-string").await.unwrap();
    assert_eq!(value, "precious");
    let ttl: i64 = raw.pttl("a-string").await.unwrap();
    assert_eq!(ttl, -1);
    let counters: Vec<String> = raw.keys("ferrisson_token:*").await.unwrap();
    assert!(
        counters.is_empty(),
        "no token was handed out for a refused grant: {counters:?}"
    );

    // A fencing counter that is not a counter (the slot's, and a fenced lock's own): refused
    // before the lock is written.
    let lock = client.get_lock("bad-counter");
    let _: () = raw.hset(lock.token_counter_key(), "f", 1).await.unwrap();
    let err = lock.lock().await.unwrap_err();
    assert!(
        matches!(&err, Error::WrongType { key } if *key == lock.token_counter_key()),
        "{err:?}"
    );
    let exists: bool = raw.exists("bad-counter").await.unwrap();
    assert!(!exists);
    let _: () = raw
        .hset("redisson_lock_token:{bad-named}", "f", 1)
        .await
        .unwrap();
    let err = client
        .get_fenced_lock("bad-named")
        .lock()
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::WrongType { key } if key == "redisson_lock_token:{bad-named}"),
        "{err:?}"
    );
    let exists: bool = raw.exists("bad-named").await.unwrap();
    assert!(!exists);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_turned_into_another_type_while_held_fails_the_release_cleanly() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let guard = client.get_lock("retyped").lock().await.unwrap();
    let mut raw = server.raw().await;
    let _: () = raw.del("retyped").await.unwrap();
    let _: () = raw.set("retyped", "someone else's").await.unwrap();
    assert!(matches!(guard.unlock().await, Err(Error::WrongType { .. })));
    let value: String = raw.get("retyped").await.unwrap();
    assert_eq!(value, "someone else's");
}

/// The plain lock's acquire answers a token as a positive integer, so a counter set below 0 by
/// hand must not make a grant whose token reads as "busy" or "reentrant": the token is the
/// server's clock in microseconds, and the counter ends there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fencing_counter_set_below_zero_still_gives_a_positive_token() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let mut raw = server.raw().await;
    let lock = client.get_lock("low-counter");
    let counter = lock.token_counter_key();
    let _: () = raw.set(&counter, -2).await.unwrap();
    let guard = lock.lock().await.unwrap();
    let token = guard.fencing_token();
    assert!(token > 1_000_000_000_000_000, "{token}");
    let now: u64 = raw.get(&counter).await.unwrap();
    assert_eq!(now, token);
    guard.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_client_settings_are_config_errors() {
    for url in ["", "not a url", "http://127.0.0.1/"] {
        let err = ferrisson::Client::connect(url).await.unwrap_err();
        assert!(matches!(err, Error::Config(_)), "{url}: {err:?}");
    }
    let err = ferrisson::Client::builder().build().await.unwrap_err();
    assert!(matches!(err, Error::Config(_)));
    let err = ferrisson::Client::builder()
        .url("redis://127.0.0.1/")
        .watchdog_timeout(Duration::ZERO)
        .build()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("watchdog_timeout"), "{err}");
    // A port out of range is named (the redis crate says only "did not parse"), in every
    // topology's URLs.
    let err = ferrisson::Client::connect("redis://127.0.0.1:99999")
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Config(_)), "{err:?}");
    assert!(err.to_string().contains("the port `99999`"), "{err}");
    let err = ferrisson::Client::builder()
        .cluster(["redis://127.0.0.1:7000", "redis://127.0.0.1:70001"])
        .build()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("the port `70001`"), "{err}");
}

#[test]
fn a_client_outside_a_tokio_runtime_is_refused_clearly() {
    let err =
        futures::executor::block_on(ferrisson::Client::connect("redis://127.0.0.1/")).unwrap_err();
    assert!(matches!(&err, Error::NoRuntime), "{err:?}");
    assert!(err.to_string().contains("Tokio runtime"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_lock_kind_refuses_bad_names_and_foreign_types() {
    let server = RedisServer::start();
    let client = client(&server).await;
    for lock in [
        client.get_fair_lock(""),
        client.get_read_write_lock("").read_lock(),
        client.get_read_write_lock("a{").write_lock(),
    ] {
        assert!(matches!(lock.lock().await, Err(Error::InvalidArgument(_))));
        assert!(matches!(
            lock.force_unlock().await,
            Err(Error::InvalidArgument(_))
        ));
    }
    let mut raw = server.raw().await;
    let _: () = raw
        .set("redisson_lock_queue:{fq}", "not a list")
        .await
        .unwrap();
    let err = client.get_fair_lock("fq").lock().await.unwrap_err();
    assert!(
        matches!(&err, Error::WrongType { key } if key == "redisson_lock_queue:{fq}"),
        "{err:?}"
    );
    let exists: bool = raw.exists("fq").await.unwrap();
    assert!(!exists, "nothing written");

    let _: () = raw.set("rw-string", "x").await.unwrap();
    let rw = client.get_read_write_lock("rw-string");
    assert!(matches!(
        rw.read_lock().lock().await,
        Err(Error::WrongType { .. })
    ));
    assert!(matches!(
        rw.write_lock().try_lock().await,
        Err(Error::WrongType { .. })
    ));
    assert!(matches!(
        rw.read_lock().hold_count().await,
        Err(Error::WrongType { .. })
    ));

    // An RLock hash under a read-write lock's name (and the other way round) is just "taken".
    let plain = client.get_lock("mixed-kinds").lock().await.unwrap();
    let rw = client.get_read_write_lock("mixed-kinds");
    assert!(rw.read_lock().try_lock().await.unwrap().is_none());
    assert!(rw.write_lock().try_lock().await.unwrap().is_none());
    plain.unlock().await.unwrap();
    let w = rw.write_lock().lock().await.unwrap();
    assert!(
        client
            .get_lock("mixed-kinds")
            .try_lock()
            .await
            .unwrap()
            .is_none()
    );
    w.unlock().await.unwrap();
    let mut left: Vec<String> = raw.keys("*").await.unwrap();
    left.retain(|k| {
        !k.starts_with("redisson_unlock_latch:") && !k.starts_with("ferrisson_client:")
    });
    left.sort();
    let counter = client.get_lock("mixed-kinds").token_counter_key();
    let mut expected = vec![
        counter,
        "redisson_lock_queue:{fq}".into(),
        "rw-string".into(),
    ];
    expected.sort();
    assert_eq!(left, expected);
}

/// A build without the `tls` feature refuses `rediss://` saying which feature to enable.
#[cfg(not(feature = "tls"))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediss_without_the_tls_feature_names_it() {
    let err = ferrisson::Client::connect("rediss://127.0.0.1:6380")
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Config(_)), "{err:?}");
    assert!(err.to_string().contains(r#"features = ["tls"]"#), "{err}");
}
