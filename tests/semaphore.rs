//! RSemaphore: never more permits out than there are, waiters woken by release messages,
//! Redisson's layout and messages, cancellation that leaves no permit taken, bad input.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use ferrisson::Error;
use redis::AsyncCommands;
use support::{Mode, Proxy, RedisServer, builder_for, client, eventually, join_within};

const CHANNEL: &str = "redisson_sc:{slots}";

/// Keys the semaphore leaves besides its count: the short-lived acquire records.
async fn records(server: &RedisServer) -> Vec<String> {
    let mut raw = server.raw().await;
    raw.keys("{slots}:ferrisson_sc_request:*").await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_more_permits_out_than_the_semaphore_has() {
    const PERMITS: i64 = 3;
    let server = RedisServer::start();
    let out = Arc::new(AtomicI64::new(0));
    let most = Arc::new(AtomicI64::new(0));
    let mut tasks = Vec::new();
    for c in 0..3 {
        let client = client(&server).await;
        if c == 0 {
            assert!(
                client
                    .get_semaphore("slots")
                    .try_set_permits(3)
                    .await
                    .unwrap()
            );
        }
        for t in 0..4 {
            let semaphore = client.get_semaphore("slots");
            let (out, most) = (out.clone(), most.clone());
            // Mixed sizes: some tasks take two permits at once.
            let n: u64 = if (c + t) % 3 == 0 { 2 } else { 1 };
            tasks.push(tokio::spawn(async move {
                for _ in 0..15 {
                    semaphore.acquire(n).await.unwrap();
                    let now = out.fetch_add(n as i64, Ordering::SeqCst) + n as i64;
                    most.fetch_max(now, Ordering::SeqCst);
                    assert!(now <= PERMITS, "{now} permits out of {PERMITS}");
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    out.fetch_sub(n as i64, Ordering::SeqCst);
                    semaphore.release(n).await.unwrap();
                }
            }));
        }
    }
    join_within(Duration::from_secs(60), tasks, "contenders").await;
    eprintln!(
        "at most {} of {PERMITS} permits were out at once",
        most.load(Ordering::SeqCst)
    );
    let semaphore = client(&server).await.get_semaphore("slots");
    assert_eq!(semaphore.available_permits().await.unwrap(), PERMITS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_woken_by_a_release_on_another_client() {
    let server = RedisServer::start();
    let here = support::message_only_client(&server).await;
    let there = support::message_only_client(&server).await;
    let semaphore = here.get_semaphore("slots");
    assert!(semaphore.try_set_permits(2).await.unwrap());
    semaphore.acquire(2).await.unwrap();
    let waiters: Vec<_> = (0..2)
        .map(|_| {
            let semaphore = semaphore.clone();
            tokio::spawn(async move { semaphore.acquire(1).await })
        })
        .collect();
    server.wait_subscribers(CHANNEL, 1).await;
    let released = Instant::now();
    // One release of two permits: its message (the count, 2) wakes both waiters.
    there.get_semaphore("slots").release(2).await.unwrap();
    for result in join_within(Duration::from_secs(3), waiters, "waiters").await {
        result.unwrap();
    }
    eprintln!(
        "both waiters got a permit {:?} after the release",
        released.elapsed()
    );
    // With a 30 s re-check interval, only the release's message can have woken them in time.
    assert_eq!(semaphore.available_permits().await.unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn layout_messages_and_the_other_operations_follow_redisson() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let mut listener = support::Listener::on(&server, CHANNEL).await;
    let semaphore = client.get_semaphore("slots");
    assert_eq!(semaphore.available_permits().await.unwrap(), 0);
    assert!(semaphore.try_set_permits(5).await.unwrap());
    assert!(
        !semaphore.try_set_permits(9).await.unwrap(),
        "set only once"
    );
    assert_eq!(listener.next().await, "5");
    let mut raw = server.raw().await;
    let count: String = raw.get("slots").await.unwrap();
    assert_eq!(count, "5", "a string count named like the semaphore");
    assert!(semaphore.try_acquire(4).await.unwrap());
    assert!(!semaphore.try_acquire(2).await.unwrap(), "1 left, 2 wanted");
    assert!(
        !semaphore
            .try_acquire_for(2, Duration::from_millis(200))
            .await
            .unwrap()
    );
    semaphore.release(3).await.unwrap();
    assert_eq!(
        listener.next().await,
        "4",
        "a release publishes the count free now"
    );
    assert_eq!(semaphore.add_permits(-3).await.unwrap(), 1);
    assert_eq!(listener.next().await, "1");
    assert_eq!(semaphore.add_permits(2).await.unwrap(), 3);
    assert_eq!(listener.next().await, "3");
    assert_eq!(semaphore.drain_permits().await.unwrap(), 3);
    assert_eq!(semaphore.available_permits().await.unwrap(), 0);
    assert_eq!(semaphore.drain_permits().await.unwrap(), 0);
    // Records of acquires live a few seconds only.
    for key in records(&server).await {
        let ttl: i64 = raw.pttl(&key).await.unwrap();
        assert!(ttl > 0, "{key} has no TTL");
    }
}

/// A Java Redisson client (its acquire: take n when at least n are free; its release: INCRBY and
/// publish the count) shares the permits, and its release wakes a ferrisson waiter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_java_client_shares_the_permits_and_wakes_waiters() {
    let server = RedisServer::start();
    let client = support::message_only_client(&server).await;
    let semaphore = client.get_semaphore("slots");
    assert!(semaphore.try_set_permits(1).await.unwrap());
    let mut raw = server.raw().await;
    let java_acquire = redis::Script::new(
        "local v = tonumber(redis.call('get', KEYS[1])) \
         if v and v >= tonumber(ARGV[1]) then redis.call('decrby', KEYS[1], ARGV[1]) return 1 end \
         return 0",
    );
    let taken: i64 = java_acquire
        .key("slots")
        .arg(1)
        .invoke_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(taken, 1);
    assert!(
        !semaphore.try_acquire(1).await.unwrap(),
        "Java holds the only permit"
    );
    let waiter = {
        let semaphore = semaphore.clone();
        tokio::spawn(async move { semaphore.try_acquire_for(1, Duration::from_secs(10)).await })
    };
    server.wait_subscribers(CHANNEL, 1).await;
    let free: i64 = raw.incr("slots", 1).await.unwrap();
    let _: () = raw.publish(CHANNEL, free).await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(2), waiter)
        .await
        .expect("woken by the Java release's message")
        .unwrap()
        .unwrap();
    assert!(got);
    let taken: i64 = java_acquire
        .key("slots")
        .arg(1)
        .invoke_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(taken, 0, "ferrisson holds it now");
}

/// Acquires dropped while their script is on its way, and acquires whose replies are lost: no
/// permit is left taken by a caller that did not get it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_and_unanswered_acquires_leave_no_permit_taken() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let semaphore = client.get_semaphore("slots");
    assert!(semaphore.try_set_permits(2).await.unwrap());
    let proxy = Proxy::start(server.port()).await;
    let proxied = builder_for(&proxy.url())
        .response_timeout(Duration::from_millis(400))
        .build()
        .await
        .unwrap();
    let through = proxied.get_semaphore("slots");

    // Replies come 100 ms late: each acquire runs on the server, its caller gives up at 20 ms.
    proxy.set(Mode::Delay(Duration::from_millis(100)));
    for round in 0..10 {
        let before = server.calls("evalsha").await;
        let gave_up = tokio::time::timeout(Duration::from_millis(20), through.acquire(1)).await;
        assert!(gave_up.is_err(), "round {round}: answered within 20 ms");
        assert!(
            server.calls_reach("evalsha", before + 1).await,
            "the acquire ran"
        );
    }
    proxy.set(Mode::Pass);
    assert!(
        eventually(Duration::from_secs(5), || async {
            semaphore.available_permits().await.unwrap() == 2
        })
        .await,
        "cancelled acquires kept permits: {} free of 2",
        semaphore.available_permits().await.unwrap()
    );

    // Replies lost: the acquire ran on the server, its caller saw an error.
    server.reset_stats().await;
    proxy.set(Mode::DropReplies);
    assert!(through.try_acquire(1).await.is_err());
    assert!(server.calls_reach("evalsha", 1).await, "the acquire ran");
    proxy.set(Mode::Pass);
    assert!(
        eventually(Duration::from_secs(5), || async {
            semaphore.available_permits().await.unwrap() == 2
        })
        .await,
        "the unanswered acquire kept its permit"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_and_changes_nothing() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let semaphore = client.get_semaphore("slots");
    // 0 permits is a semaphore that starts closed (tests/starting_closed.rs).
    assert!(matches!(
        semaphore.try_set_permits(u64::MAX).await,
        Err(Error::InvalidArgument(_))
    ));
    for n in [0, u64::MAX] {
        assert!(matches!(
            semaphore.acquire(n).await,
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            semaphore.try_acquire(n).await,
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            semaphore.release(n).await,
            Err(Error::InvalidArgument(_))
        ));
    }
    for name in ["", "a{b", "a{}b"] {
        let bad = client.get_semaphore(name);
        assert!(
            matches!(bad.try_acquire(1).await, Err(Error::InvalidArgument(_))),
            "{name}"
        );
        assert!(matches!(
            bad.available_permits().await,
            Err(Error::InvalidArgument(_))
        ));
    }
    let mut raw = server.raw().await;
    let _: () = raw.hset("a-hash", "f", 1).await.unwrap();
    let _: () = raw.set("a-word", "precious").await.unwrap();
    for key in ["a-hash", "a-word"] {
        let semaphore = client.get_semaphore(key);
        let wrong =
            |r: Result<bool, Error>| matches!(r, Err(Error::WrongType { key: k }) if k == key);
        assert!(wrong(semaphore.try_acquire(1).await), "{key}");
        assert!(wrong(semaphore.try_set_permits(1).await), "{key}");
        assert!(
            matches!(semaphore.release(1).await, Err(Error::WrongType { .. })),
            "{key}"
        );
        assert!(matches!(
            semaphore.available_permits().await,
            Err(Error::WrongType { .. })
        ));
    }
    let word: String = raw.get("a-word").await.unwrap();
    assert_eq!(word, "precious");
}
