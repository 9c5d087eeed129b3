//! RCountDownLatch: Redisson's layout and messages, waiters woken by message across clients,
//! bounded waits, deletion, bad input.

mod support;

use std::time::{Duration, Instant};

use ferrisson::Error;
use redis::AsyncCommands;
use support::{RedisServer, client, join_within};

const CHANNEL: &str = "redisson_countdownlatch__channel__{gate}";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_waiters_on_three_clients_wake_when_the_last_count_goes() {
    let server = RedisServer::start();
    let mut clients = Vec::new();
    for _ in 0..3 {
        // A long re-check interval: only the message can wake them in time.
        let client = support::message_only_client(&server).await;
        clients.push(client);
    }
    let latch = clients[0].get_count_down_latch("gate");
    assert!(latch.try_set_count(3).await.unwrap());
    let mut waiters = Vec::new();
    for i in 0..50 {
        let latch = clients[i % 3].get_count_down_latch("gate");
        waiters.push(tokio::spawn(async move {
            latch.await_zero().await.unwrap();
            Instant::now()
        }));
    }
    // Every client has its subscription up before the count runs out.
    server.wait_subscribers(CHANNEL, 3).await;
    assert_eq!(latch.count_down().await.unwrap(), 2);
    assert_eq!(
        clients[1]
            .get_count_down_latch("gate")
            .count_down()
            .await
            .unwrap(),
        1
    );
    assert_eq!(latch.get_count().await.unwrap(), 1);
    let opened = Instant::now();
    assert_eq!(
        clients[2]
            .get_count_down_latch("gate")
            .count_down()
            .await
            .unwrap(),
        0
    );
    let woke = join_within(Duration::from_secs(5), waiters, "waiters").await;
    let slowest = woke
        .iter()
        .map(|t| t.saturating_duration_since(opened))
        .max()
        .unwrap();
    eprintln!("50 waiters on 3 clients: the last woke {slowest:?} after the last count_down");
    assert!(slowest < Duration::from_secs(2), "{slowest:?}");
    let mut raw = server.raw().await;
    assert!(
        !raw.exists::<_, bool>("gate").await.unwrap(),
        "an open latch leaves no key"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn layout_and_messages_follow_redisson() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let mut listener = support::Listener::on(&server, CHANNEL).await;
    let latch = client.get_count_down_latch("gate");
    assert_eq!(
        latch.get_count().await.unwrap(),
        0,
        "a latch never set is open"
    );
    assert!(latch.try_set_count(2).await.unwrap());
    assert!(!latch.try_set_count(5).await.unwrap(), "set only once");
    let mut raw = server.raw().await;
    let count: String = raw.get("gate").await.unwrap();
    assert_eq!(count, "2");
    assert_eq!(listener.next().await, "1", "a new count is published as 1");
    latch.count_down().await.unwrap();
    latch.count_down().await.unwrap();
    assert_eq!(listener.next().await, "0", "opening is published as 0");
    assert_eq!(
        latch.count_down().await.unwrap(),
        0,
        "an open latch stays open"
    );
    assert!(!raw.exists::<_, bool>("gate").await.unwrap());
    assert_eq!(
        listener.next_within(Duration::from_millis(200)).await,
        None,
        "counting an open latch down tells nobody"
    );
}

/// A Java Redisson client counting down (DECR, then DEL and PUBLISH 0 at zero) wakes a
/// ferrisson waiter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_java_count_down_wakes_a_waiter() {
    let server = RedisServer::start();
    let client = support::message_only_client(&server).await;
    let latch = client.get_count_down_latch("gate");
    assert!(latch.try_set_count(1).await.unwrap());
    let waiter = tokio::spawn(async move { latch.await_for(Duration::from_secs(10)).await });
    server.wait_subscribers(CHANNEL, 1).await;
    let mut raw = server.raw().await;
    let left: i64 = raw.decr("gate", 1).await.unwrap();
    assert_eq!(left, 0);
    let _: () = raw.del("gate").await.unwrap();
    let _: () = raw.publish(CHANNEL, "0").await.unwrap();
    let opened = tokio::time::timeout(Duration::from_secs(2), waiter)
        .await
        .expect("woken by the message")
        .unwrap()
        .unwrap();
    assert!(opened);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn await_for_times_out_and_delete_opens_the_latch() {
    let server = RedisServer::start();
    let client = support::message_only_client(&server).await;
    let latch = client.get_count_down_latch("gate");
    assert!(latch.try_set_count(1).await.unwrap());
    let started = Instant::now();
    assert!(!latch.await_for(Duration::from_millis(300)).await.unwrap());
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_secs(2),
        "{waited:?}"
    );
    let waiters: Vec<_> = (0..5)
        .map(|_| {
            let latch = latch.clone();
            tokio::spawn(async move { latch.await_zero().await })
        })
        .collect();
    server.wait_subscribers(CHANNEL, 1).await;
    assert!(latch.delete().await.unwrap());
    for result in join_within(
        Duration::from_secs(2),
        waiters,
        "waiters of a deleted latch",
    )
    .await
    {
        result.unwrap();
    }
    assert!(!latch.delete().await.unwrap(), "nothing left to delete");
    assert!(latch.await_for(Duration::ZERO).await.unwrap(), "open");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_and_changes_nothing() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let latch = client.get_count_down_latch("gate");
    // A count of 0 is an open latch (tests/starting_closed.rs).
    assert!(matches!(
        latch.try_set_count(u64::MAX).await,
        Err(Error::InvalidArgument(_))
    ));
    for name in ["", "a{tag}", "{tag}", "a{b"] {
        let bad = client.get_count_down_latch(name);
        assert!(
            matches!(bad.get_count().await, Err(Error::InvalidArgument(_))),
            "{name}"
        );
        assert!(
            matches!(bad.count_down().await, Err(Error::InvalidArgument(_))),
            "{name}"
        );
        assert!(
            matches!(bad.await_zero().await, Err(Error::InvalidArgument(_))),
            "{name}"
        );
    }
    let mut raw = server.raw().await;
    let _: () = raw.hset("a-hash", "f", 1).await.unwrap();
    let _: () = raw.set("a-word", "precious").await.unwrap();
    for key in ["a-hash", "a-word"] {
        let latch = client.get_count_down_latch(key);
        assert!(
            matches!(latch.count_down().await, Err(Error::WrongType { key: k }) if k == key),
            "{key}"
        );
        assert!(
            matches!(latch.get_count().await, Err(Error::WrongType { .. })),
            "{key}"
        );
        assert!(
            !latch.try_set_count(3).await.unwrap(),
            "{key} exists: not set"
        );
    }
    let word: String = raw.get("a-word").await.unwrap();
    assert_eq!(word, "precious");
    let kind: String = redis::cmd("TYPE")
        .arg("a-hash")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(kind, "hash");
}
