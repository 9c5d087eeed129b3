//! Redis Cluster: every kind works on a real 3-master + 3-replica cluster, each object's keys in
//! one slot; waiters wake by message, sharded where the servers have it (Redis 7, Valkey) and
//! classic on Redis 6.2, as Redisson's do (a Java-style waiter too); renewals go per slot; a
//! killed master's replica takes over and grants resume.

mod support;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use ferrisson::{Client, MultiLock};
use redis::AsyncCommands;
use support::Contenders;
use support::cluster::RedisCluster;

async fn cluster_client(cluster: &RedisCluster, recheck: Duration) -> Client {
    Client::builder()
        .cluster(cluster.seed_urls())
        .connection_timeout(Duration::from_secs(2))
        .response_timeout(Duration::from_secs(2))
        .recheck_interval(recheck)
        .build()
        .await
        .expect("a cluster client")
}

/// Every key on every master, with its slot, but the live clients' identities (which belong to
/// no object).
async fn keys_by_slot(cluster: &RedisCluster) -> Vec<(String, u16)> {
    let mut found = Vec::new();
    for port in cluster.masters().await {
        let mut node = cluster.raw_node(port).await;
        let keys: Vec<String> = node.keys("*").await.unwrap();
        for key in keys
            .into_iter()
            .filter(|k| !k.starts_with("ferrisson_client:"))
        {
            let slot = cluster.slot_of(&key).await;
            found.push((key, slot));
        }
    }
    found
}

/// Starts `wait` as a task, checks it waits, runs `release`, and returns what `wait` gave
/// within 3 s: with a 30 s re-check interval only a message wakes it that soon.
async fn woken<T: Send + 'static>(
    what: &str,
    wait: impl std::future::Future<Output = T> + Send + 'static,
    release: impl std::future::Future<Output = ()>,
) -> T {
    let waiter = tokio::spawn(wait);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "{what}: did not wait");
    let released = Instant::now();
    release.await;
    let out = tokio::time::timeout(Duration::from_secs(3), waiter)
        .await
        .unwrap_or_else(|_| panic!("{what}: not woken by the release's message"))
        .unwrap();
    eprintln!("{what}: woken {:?} after the release", released.elapsed());
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_works_on_a_cluster_with_its_keys_in_one_slot() {
    let cluster = RedisCluster::start().await;
    let a = cluster_client(&cluster, Duration::from_secs(30)).await;
    let b = cluster_client(&cluster, Duration::from_secs(30)).await;
    let names = ["orders:1", "orders:2", "users:7", "{tenant:9}:jobs"];
    for name in names {
        // RLock, nested, with a waiter of another client woken by the sharded message.
        let lock = a.get_lock(name);
        let first = lock.lock().await.unwrap();
        let again = first.scope(lock.lock()).await.unwrap();
        assert!(first.fencing_token() > 0);
        assert_eq!(again.fencing_token(), first.fencing_token());
        assert_eq!(first.hold_count().await.unwrap(), 2);
        again.unlock().await.unwrap();
        let other = b.get_lock(name);
        let got = woken(
            "RLock waiter",
            async move { other.lock().await.unwrap() },
            async { first.unlock().await.unwrap() },
        )
        .await;
        got.unlock().await.unwrap();

        // Fair lock, read/write, fenced, mutex.
        let fair = a
            .get_fair_lock(&format!("{name}:fair"))
            .lock()
            .await
            .unwrap();
        let other = b.get_fair_lock(&format!("{name}:fair"));
        let got = woken(
            "fair waiter",
            async move { other.lock().await.unwrap() },
            async { fair.unlock().await.unwrap() },
        )
        .await;
        got.unlock().await.unwrap();
        let rw = format!("{name}:rw");
        let read = a.get_read_write_lock(&rw).read_lock().lock().await.unwrap();
        let shared = b.get_read_write_lock(&rw).read_lock().lock().await.unwrap();
        let writer = b.get_read_write_lock(&rw).write_lock();
        let write = woken(
            "writer",
            async move { writer.lock().await.unwrap() },
            async {
                read.unlock().await.unwrap();
                shared.unlock().await.unwrap();
            },
        )
        .await;
        write.unlock().await.unwrap();
        let (token, fenced) = a
            .get_fenced_lock(&format!("{name}:fenced"))
            .lock_and_get_token()
            .await
            .unwrap();
        assert!(token > 0);
        fenced.unlock().await.unwrap();
        let mutex = a.get_mutex(&format!("{name}:mutex")).lock().await.unwrap();
        assert!(
            a.get_mutex(&format!("{name}:mutex"))
                .try_lock()
                .await
                .unwrap()
                .is_none()
        );
        mutex.unlock().await.unwrap();

        // Semaphores and the latch.
        let sem = a.get_semaphore(&format!("{name}:sem"));
        assert!(sem.try_set_permits(1).await.unwrap());
        sem.acquire(1).await.unwrap();
        let other = b.get_semaphore(&format!("{name}:sem"));
        woken(
            "semaphore waiter",
            async move { other.acquire(1).await.unwrap() },
            async { sem.release(1).await.unwrap() },
        )
        .await;
        let permits = a.get_permit_expirable_semaphore(&format!("{name}:permits"));
        assert!(permits.try_set_permits(1).await.unwrap());
        let held = permits.acquire().await.unwrap();
        let other = b.get_permit_expirable_semaphore(&format!("{name}:permits"));
        let got = woken(
            "permit waiter",
            async move { other.acquire().await.unwrap() },
            async { held.release().await.unwrap() },
        )
        .await;
        got.release().await.unwrap();
        if !name.contains('{') {
            let latch = a.get_count_down_latch(&format!("{name}:latch"));
            assert!(latch.try_set_count(1).await.unwrap());
            let other = b.get_count_down_latch(&format!("{name}:latch"));
            woken(
                "latch waiter",
                async move { other.await_zero().await.unwrap() },
                async {
                    latch.count_down().await.unwrap();
                },
            )
            .await;
        }
    }
    // Every key an object left (its data, request records, token counters) is in the slot
    // of the object's name.
    let suffixes = [
        "", ":fair", ":rw", ":fenced", ":mutex", ":sem", ":permits", ":latch",
    ];
    let objects: Vec<String> = names
        .iter()
        .flat_map(|n| suffixes.iter().map(move |s| format!("{n}{s}")))
        .collect();
    let mut object_slots = HashSet::new();
    for object in &objects {
        object_slots.insert(cluster.slot_of(object).await);
    }
    for (key, slot) in keys_by_slot(&cluster).await {
        let owner = objects
            .iter()
            .filter(|o| {
                key == **o
                    || key.contains(&format!("{{{o}}}"))
                    || (o.contains('{') && key.contains(o.as_str()))
            })
            .max_by_key(|o| o.len());
        match owner {
            Some(object) => {
                let home = cluster.slot_of(object).await;
                assert_eq!(
                    slot, home,
                    "{key} is in slot {slot}, its object {object} in {home}"
                );
            }
            None => {
                assert!(
                    key.starts_with("ferrisson_token:"),
                    "a key of nobody: {key}"
                );
                assert!(
                    object_slots.contains(&slot),
                    "{key} counts for no object's slot"
                );
            }
        }
    }
}

/// Whether the cluster's servers have sharded pub/sub (Redis 7.0 and later, Valkey): asked of
/// the server itself, not of the client under test. Redis 6.2 knows no `SSUBSCRIBE`, and
/// answers `COMMAND INFO` about it with nil.
async fn has_sharded_pubsub(cluster: &RedisCluster) -> bool {
    let port = cluster.masters().await[0];
    let info: Vec<redis::Value> = redis::cmd("COMMAND")
        .arg("INFO")
        .arg("SSUBSCRIBE")
        .query_async(&mut cluster.raw_node(port).await)
        .await
        .unwrap();
    !matches!(info.as_slice(), [] | [redis::Value::Nil])
}

/// A Java Redisson waiter on a cluster: Redisson 3.22+ subscribes with SSUBSCRIBE where the
/// servers have sharded pub/sub, and with SUBSCRIBE on Redis 6.2; here a RESP3 connection
/// subscribed to `channel` the same way, whose pushes arrive on the receiver. Also says which
/// way it listens (true: sharded).
async fn java_listener(
    cluster: &RedisCluster,
    channel: &str,
) -> (
    redis::cluster_async::ClusterConnection,
    tokio::sync::mpsc::UnboundedReceiver<redis::PushInfo>,
    bool,
) {
    let (tx, pushes) = tokio::sync::mpsc::unbounded_channel();
    let mut conn = redis::cluster::ClusterClientBuilder::new(cluster.seed_urls())
        .use_protocol(redis::ProtocolVersion::RESP3)
        .push_sender(tx)
        .build()
        .unwrap()
        .get_async_connection()
        .await
        .unwrap();
    let sharded = has_sharded_pubsub(cluster).await;
    if sharded {
        conn.ssubscribe(channel).await.unwrap();
    } else {
        conn.subscribe(channel).await.unwrap();
    }
    (conn, pushes, sharded)
}

/// The next message a [`java_listener`] gets, within 3 s: a sharded one when it listens
/// sharded, a classic one otherwise.
async fn next_message(
    pushes: &mut tokio::sync::mpsc::UnboundedReceiver<redis::PushInfo>,
    sharded: bool,
) -> Option<redis::PushInfo> {
    let kind = if sharded {
        redis::PushKind::SMessage
    } else {
        redis::PushKind::Message
    };
    tokio::time::timeout(Duration::from_secs(3), async {
        loop {
            let push = pushes.recv().await.expect("pushes");
            if push.kind == kind {
                return push;
            }
        }
    })
    .await
    .ok()
}

/// How many connections the cluster counts on `channel`: sharded subscribers (`PUBSUB
/// SHARDNUMSUB` on the channel's master) when `sharded`, classic ones (`PUBSUB NUMSUB`, summed
/// over every node: a classic subscriber is counted by the node it is connected to, which may
/// be a replica) otherwise.
async fn subscribers(cluster: &RedisCluster, channel: &str, sharded: bool) -> i64 {
    let mut count = 0;
    let ports = if sharded {
        vec![cluster.master_for_key(channel).await]
    } else {
        cluster.running_ports()
    };
    for port in ports {
        let counts: Vec<redis::Value> = redis::cmd("PUBSUB")
            .arg(if sharded { "SHARDNUMSUB" } else { "NUMSUB" })
            .arg(channel)
            .query_async(&mut cluster.raw_node(port).await)
            .await
            .unwrap();
        if let Some(n) = counts.get(1) {
            count += redis::from_redis_value::<i64>(n.clone()).unwrap();
        }
    }
    count
}

/// A Java Redisson waiter listens on the lock's channel the way the servers allow
/// (SSUBSCRIBE from Redis 7, SUBSCRIBE on 6.2): ferrisson's release reaches it, and ferrisson's
/// own waiter subscribes the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_java_style_subscriber_hears_ferrisson_s_release() {
    let cluster = RedisCluster::start().await;
    let client = cluster_client(&cluster, Duration::from_secs(30)).await;
    let channel = "redisson_lock__channel:{orders:1}";
    let (_java, mut pushes, sharded) = java_listener(&cluster, channel).await;
    eprintln!("the servers have sharded pub/sub: {sharded}");
    let guard = client.get_lock("orders:1").lock().await.unwrap();
    assert_eq!(subscribers(&cluster, channel, sharded).await, 1);
    let waiting = client.get_lock("orders:1");
    let waiter = tokio::spawn(async move { waiting.lock().await.unwrap() });
    assert!(
        support::eventually(Duration::from_secs(5), || async {
            subscribers(&cluster, channel, sharded).await == 2
        })
        .await,
        "ferrisson's waiter did not subscribe as the servers allow (sharded: {sharded})"
    );
    guard.unlock().await.unwrap();
    let heard = next_message(&mut pushes, sharded)
        .await
        .expect("the Java-style waiter heard the unlock");
    let payload: String = redis::from_redis_value(heard.data[1].clone()).unwrap();
    assert_eq!(payload, "0", "Redisson's unlock message");
    let got = tokio::time::timeout(Duration::from_secs(3), waiter)
        .await
        .expect("ferrisson's waiter got the lock")
        .unwrap();
    got.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_renewals_and_multilock_across_slots() {
    let cluster = RedisCluster::start().await;
    let names: Vec<String> = (0..6).map(|i| format!("spread:{i}")).collect();
    let slots: HashSet<u16> = futures::future::join_all(names.iter().map(|n| cluster.slot_of(n)))
        .await
        .into_iter()
        .collect();
    assert!(slots.len() >= 4, "names in {} slots", slots.len());

    // Contenders on 3 clients; every grant's token must be new, and no two holders overlap.
    let inside: Arc<[AtomicUsize; 2]> = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let client = cluster_client(&cluster, Duration::from_secs(1)).await;
        for t in 0..3 {
            let lock = client.get_lock(&names[t % 2]);
            let inside = inside.clone();
            tasks.push(tokio::spawn(async move {
                let mut tokens = Vec::new();
                for _ in 0..15 {
                    let guard = lock.lock().await.unwrap();
                    tokens.push((t % 2, guard.fencing_token()));
                    let holders = &inside[t % 2];
                    assert_eq!(holders.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    holders.fetch_sub(1, Ordering::SeqCst);
                    guard.unlock().await.unwrap();
                }
                tokens
            }));
        }
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    // Tokens increase per name (each name's slot has its counter): never one twice per lock.
    let distinct: HashSet<(usize, u64)> = all.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        all.len(),
        "a token was granted twice for one lock"
    );

    // Renewals of holds in several slots, per slot.
    let renewing = Client::builder()
        .cluster(cluster.seed_urls())
        .watchdog_timeout(Duration::from_millis(900))
        .build()
        .await
        .unwrap();
    let mut guards = Vec::new();
    for name in &names {
        guards.push(
            renewing
                .get_lock(&format!("{name}:held"))
                .lock()
                .await
                .unwrap(),
        );
    }
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert!(
        guards.iter().all(|g| !g.is_lost()),
        "a renewal across slots failed"
    );
    for guard in guards {
        guard.unlock().await.unwrap();
    }

    // A MultiLock over locks in different slots.
    let client = cluster_client(&cluster, Duration::from_secs(1)).await;
    let multi = MultiLock::new(names.iter().map(|n| client.get_lock(n)));
    let guard = multi.lock().await.unwrap();
    let other = cluster_client(&cluster, Duration::from_secs(1)).await;
    assert!(
        other
            .get_lock(&names[3])
            .try_lock()
            .await
            .unwrap()
            .is_none()
    );
    guard.unlock().await.unwrap();
    assert!(
        other
            .get_lock(&names[3])
            .try_lock()
            .await
            .unwrap()
            .is_some()
    );
}

/// Contenders loop on locks while the master of one lock's slot is killed: its replica takes
/// over, grants resume soon after, and no call hangs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_master_is_replaced_and_grants_resume() {
    let mut cluster = RedisCluster::start().await;
    let client = Client::builder()
        .cluster(cluster.seed_urls())
        .connection_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_millis(500))
        .recheck_interval(Duration::from_millis(200))
        .build()
        .await
        .unwrap();
    let contenders = Contenders::start(&client, "failover:key");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let killed = cluster.kill_master_of("failover:key").await;
    let (promoted, took) = cluster.wait_promoted(killed).await;
    let promoted_at = Instant::now();
    eprintln!("master {killed} killed; {promoted} promoted after {took:?}");
    let resumed = contenders.resumed_after(promoted_at).await;
    eprintln!("grants resumed {resumed:?} after the promotion was seen");
    assert!(
        resumed < Duration::from_secs(3),
        "grants resumed only after {resumed:?}"
    );
    let longest = contenders.stop().await;
    assert!(
        longest < Duration::from_secs(5),
        "one call took {longest:?}"
    );
}

/// A manual failover (CLUSTER FAILOVER) drops the demoted master's sharded subscriptions: the
/// hub subscribes again on the new master and waiters still wake by message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_still_wake_by_message_after_a_manual_failover() {
    let cluster = RedisCluster::start().await;
    let a = cluster_client(&cluster, Duration::from_secs(30)).await;
    let b = cluster_client(&cluster, Duration::from_secs(30)).await;
    let held = a.get_lock("moving:lock").lock().await.unwrap();
    let other = b.get_lock("moving:lock");
    let waiter = tokio::spawn(async move {
        other
            .try_lock_for(Duration::from_secs(20), None)
            .await
            .unwrap()
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (new_master, took) = cluster.failover_manual("moving:lock").await;
    eprintln!("manual failover to {new_master} in {took:?}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let released = Instant::now();
    held.unlock().await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter was woken after the failover")
        .unwrap();
    eprintln!("woken {:?} after the release", released.elapsed());
    assert!(got.is_some());
    assert!(
        released.elapsed() < Duration::from_secs(3),
        "woken by re-check, not by message"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_seeds_fail_clearly() {
    let started = Instant::now();
    let result = Client::builder()
        .cluster(["redis://127.0.0.1:1", "redis://127.0.0.1:2"])
        .connection_timeout(Duration::from_millis(500))
        .build()
        .await;
    assert!(
        matches!(result, Err(ferrisson::Error::Connect { .. })),
        "{result:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
}

/// Handover works on a cluster: it counts the channel's subscribers (PUBSUB SHARDNUMSUB, or
/// NUMSUB on Redis 6.2), so a release hands the lock to a waiter of its own client without
/// publishing, and publishes when a Java-style waiter listens too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handover_counts_sharded_subscribers() {
    let cluster = RedisCluster::start().await;
    let client = cluster_client(&cluster, Duration::from_secs(30)).await;
    for foreign in [false, true] {
        let name = if foreign {
            "handed:foreign"
        } else {
            "handed:local"
        };
        let channel = format!("redisson_lock__channel:{{{name}}}");
        // A foreign waiter listens on the lock's channel; the other case listens elsewhere.
        let listened = if foreign {
            channel.clone()
        } else {
            format!("{channel}:unused")
        };
        let (_java, mut pushes, sharded) = java_listener(&cluster, &listened).await;
        let held = client.get_lock(name).lock().await.unwrap();
        let token = held.fencing_token();
        let waiter = {
            let lock = client.get_lock(name);
            tokio::spawn(async move { lock.lock().await.unwrap() })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        cluster.reset_stats().await;
        held.unlock().await.unwrap();
        let guard = tokio::time::timeout(Duration::from_secs(3), waiter)
            .await
            .expect("the local waiter gets the lock")
            .unwrap();
        let published = cluster.calls("spublish").await + cluster.calls("publish").await;
        assert_eq!(published, 0, "handed over: the lock was never free");
        assert!(guard.fencing_token() > token);
        guard.unlock().await.unwrap();
        if foreign {
            // Starving by now (300 ms, past the 50 ms threshold), the local waiter was handed
            // the lock although a foreign one waits; the foreign one is owed the next release,
            // which publishes (SPUBLISH, or PUBLISH on Redis 6.2) and reaches it.
            let heard = next_message(&mut pushes, sharded).await;
            assert!(heard.is_some(), "the foreign waiter heard nothing");
        }
    }
}

/// A slot whose master and replica are both gone: calls on it fail with a clear error within
/// the client's timeouts instead of hanging; other slots keep working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_without_a_master_fails_calls_clearly() {
    let mut cluster = RedisCluster::start().await;
    let client = Client::builder()
        .cluster(cluster.seed_urls())
        .connection_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_millis(500))
        .build()
        .await
        .unwrap();
    let doomed = "down:key";
    let replicas = cluster.replicas_for_key(doomed).await;
    for port in replicas {
        cluster.kill_node(port);
    }
    cluster.kill_master_of(doomed).await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let asked = Instant::now();
    let result = client.get_lock(doomed).try_lock().await;
    let took = asked.elapsed();
    eprintln!("a call on a slot without master: {result:?} after {took:?}");
    assert!(
        matches!(result, Err(ferrisson::Error::Redis(_))),
        "{result:?}"
    );
    assert!(took < Duration::from_secs(10), "took {took:?}");
}

/// `sync_replicas` on a cluster: the grant and its WAIT go to the key's master; a grant its
/// replica acknowledged is still there after a manual failover; with the replica frozen, the
/// grant is undone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synced_grants_on_a_cluster() {
    let cluster = RedisCluster::start().await;
    let client = Client::builder()
        .cluster(cluster.seed_urls())
        .connection_timeout(Duration::from_secs(1))
        .response_timeout(Duration::from_secs(1))
        .sync_replicas(1, Duration::from_millis(300))
        .build()
        .await
        .unwrap();
    let replicas = cluster.replicas_for_key("synced:undone").await;
    for port in &replicas {
        cluster.pause(*port);
    }
    let asked = Instant::now();
    let result = client.get_lock("synced:undone").try_lock().await;
    eprintln!("{result:?} after {:?}", asked.elapsed());
    for port in &replicas {
        cluster.resume(*port);
    }
    assert!(
        matches!(
            result,
            Err(ferrisson::Error::ReplicasNotSynced {
                acked: 0,
                wanted: 1
            })
        ),
        "{result:?}"
    );
    let master = cluster.master_for_key("synced:undone").await;
    let mut node = cluster.raw_node(master).await;
    let exists: bool = node.exists("synced:undone").await.unwrap();
    assert!(!exists, "the unacknowledged grant was not undone");

    // A replica that acknowledged is promoted with the grant. (After the replicas were
    // frozen, so that the cluster connection's view of the slots is not refreshed while a
    // node is frozen: redis-rs then waits for the frozen node until its response timeout.)
    let guard = client.get_lock("synced:kept").lock().await.unwrap();
    let (new_master, _) = cluster.failover_manual("synced:kept").await;
    let mut node = cluster.raw_node(new_master).await;
    let exists: bool = node.exists("synced:kept").await.unwrap();
    assert!(
        exists,
        "the synced grant is missing on the promoted replica"
    );
    guard.unlock().await.unwrap();
}
