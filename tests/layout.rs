//! The Redisson 3.x layout: a Java service using Redisson's RLock on the same name must contend
//! with us. Foreign holders are played with raw commands.

mod support;

use std::time::Duration;

use futures::StreamExt;
use redis::AsyncCommands;
use support::{RedisServer, client, eventually};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lock_is_a_hash_of_owner_to_count_with_the_lease_as_ttl() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let lock = client.get_lock("layout");
    let guard = lock.lock_with_lease(Duration::from_secs(25)).await.unwrap();
    // A hold nested in the first: one owner field, counted twice.
    let again = guard
        .scope(lock.lock_with_lease(Duration::from_secs(25)))
        .await
        .unwrap();

    let mut raw = server.raw().await;
    let kind: String = redis::cmd("TYPE")
        .arg("layout")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(kind, "hash");
    let fields: Vec<(String, i64)> = raw.hgetall("layout").await.unwrap();
    assert_eq!(fields.len(), 1);
    let (owner, count) = &fields[0];
    let (uuid, n) = owner.rsplit_once(':').expect("owner is <uuid>:<n>");
    assert_eq!(uuid, client.id().to_string());
    assert!(
        n.parse::<u64>().is_ok(),
        "owner suffix is a number: {owner}"
    );
    assert_eq!(*count, 2);
    let pttl: i64 = raw.pttl("layout").await.unwrap();
    assert!(pttl > 23_000 && pttl <= 25_000, "pttl {pttl}");
    let counter = client.get_lock("layout").token_counter_key();
    let token: u64 = raw.get(&counter).await.unwrap();
    assert_eq!(token, guard.fencing_token());
    let token_ttl: i64 = raw.pttl(&counter).await.unwrap();
    assert_eq!(token_ttl, -1, "the fencing counter never expires");

    again.unlock().await.unwrap();
    guard.unlock().await.unwrap();
    let exists: bool = raw.exists("layout").await.unwrap();
    assert!(!exists);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_publishes_zero_on_the_redisson_channel() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let pubsub_client = redis::Client::open(server.url()).unwrap();
    let mut pubsub = pubsub_client.get_async_pubsub().await.unwrap();
    pubsub
        .subscribe("redisson_lock__channel:{chan}")
        .await
        .unwrap();

    let guard = client.get_lock("chan").lock().await.unwrap();
    guard.unlock().await.unwrap();
    let msg = tokio::time::timeout(Duration::from_secs(2), pubsub.on_message().next())
        .await
        .expect("a message within 2 s")
        .unwrap();
    assert_eq!(msg.get_channel_name(), "redisson_lock__channel:{chan}");
    assert_eq!(msg.get_payload::<String>().unwrap(), "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tagged_name_keeps_its_own_hash_tag() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let guard = client.get_lock("{user:1}:lock").lock().await.unwrap();
    let mut raw = server.raw().await;
    let counter = client.get_lock("{user:1}:lock").token_counter_key();
    let token: u64 = raw.get(&counter).await.unwrap();
    assert_eq!(token, guard.fencing_token());
    // One counter per cluster slot (src/slots.rs checks it shares the slot of the name's tag).
    assert!(counter.starts_with("ferrisson_token:{"), "{counter}");
    guard.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_holder_blocks_us_and_its_unlock_message_wakes_us() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let mut raw = server.raw().await;
    // What Redisson writes for thread 1 of a Java client.
    let java_owner = "9b2c7a63-2f7e-4f0b-9a55-5f3c0e6b1d11:1";
    let _: () = raw.hset("shared", java_owner, 1).await.unwrap();
    let _: () = raw.pexpire("shared", 60_000).await.unwrap();

    let lock = client.get_lock("shared");
    assert!(
        lock.try_lock().await.unwrap().is_none(),
        "the Java holder blocks us"
    );
    assert!(lock.is_locked().await.unwrap());
    assert!(!lock.is_held().await.unwrap());

    let before = server.calls("evalsha").await;
    let waiter = tokio::spawn(async move {
        let started = std::time::Instant::now();
        let guard = lock.lock().await.unwrap();
        let waited = started.elapsed();
        guard.unlock().await.unwrap();
        waited
    });
    // The waiter asks Redis, subscribes, asks again, and is woken once more by its client's
    // first pub/sub connection (an unlock may have gone unheard before it); then it sleeps
    // for the re-check interval (5 s).
    assert!(
        eventually(Duration::from_secs(5), || async {
            server.subscribers("redisson_lock__channel:{shared}").await == 1
                && server.calls("evalsha").await >= before + 3
        })
        .await,
        "the waiter subscribed on Redisson's channel and asked Redis"
    );
    assert!(!waiter.is_finished());

    // Redisson's unlock: delete the hash, publish 0 on the lock's channel.
    let _: () = raw.del("shared").await.unwrap();
    let receivers: i64 = raw
        .publish("redisson_lock__channel:{shared}", "0")
        .await
        .unwrap();
    assert_eq!(
        receivers, 1,
        "our client is subscribed on Redisson's channel"
    );
    let waited = tokio::time::timeout(Duration::from_secs(2), waiter)
        .await
        .unwrap()
        .unwrap();
    // The holder's TTL was a minute and the re-check interval 5 s: only the message explains it.
    assert!(waited < Duration::from_secs(2), "woke after {waited:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_holder_sees_our_hold_as_taken() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let guard = client.get_lock("ours").lock().await.unwrap();
    let mut raw = server.raw().await;
    // Redisson's acquire test: the key exists and our field is not theirs.
    let exists: bool = raw.exists("ours").await.unwrap();
    let theirs: bool = raw
        .hexists("ours", "9b2c7a63-2f7e-4f0b-9a55-5f3c0e6b1d11:1")
        .await
        .unwrap();
    assert!(exists && !theirs);
    guard.unlock().await.unwrap();
}
