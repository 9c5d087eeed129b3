//! Tests of the harness itself (tests/support/server.rs, cluster.rs and sentinel.rs), with plain
//! redis-rs: servers started at once each get a port of their own and answer as themselves, and
//! the Redis Cluster and the Sentinel setup come up, serve, and fail over.

mod support;

use std::collections::HashSet;
use std::time::Instant;

use redis::AsyncCommands;
use support::RedisServer;
use support::cluster::{RedisCluster, Role};
use support::sentinel::RedisSentinels;
use support::server::{Answer, answer_on};

/// Many servers started at once, from several threads, each on a port of its own on which it
/// (its own process, not another test's server) answers. Before, ports came from `bind(0)`,
/// the kernel's ephemeral range: two starts could draw the same port, the slower server then
/// failed to bind and exited, but its readiness PING had already been answered by the other
/// one, so its test ran against another test's server until that test dropped it ("Connection
/// refused").
#[test]
fn servers_started_at_once_get_ports_of_their_own_and_answer_as_themselves() {
    let servers: Vec<RedisServer> = std::thread::scope(|scope| {
        let starts: Vec<_> = (0..8)
            .map(|_| scope.spawn(|| (0..3).map(|_| RedisServer::start()).collect::<Vec<_>>()))
            .collect();
        starts
            .into_iter()
            .flat_map(|s| s.join().expect("a server start"))
            .collect()
    });
    let ports: HashSet<u16> = servers.iter().map(RedisServer::port).collect();
    assert_eq!(ports.len(), servers.len(), "every server has its own port");
    for server in &servers {
        assert!(
            (12000..22000).contains(&server.port()),
            "port {} is below the ephemeral range",
            server.port()
        );
        let pid = server.pid().expect("running");
        assert_eq!(answer_on(server.port(), pid), Answer::Ours);
    }
}

/// The readiness check tells our server from another process's on the same port, and a
/// restarted server answers as its new process on its old port.
#[test]
fn the_readiness_check_tells_our_server_from_another_on_its_port() {
    let mut server = RedisServer::start();
    let pid = server.pid().expect("running");
    assert_eq!(answer_on(server.port(), pid + 1), Answer::Other(pid));
    server.restart();
    let again = server.pid().expect("running again");
    assert_ne!(again, pid);
    assert_eq!(answer_on(server.port(), again), Answer::Ours);
    assert_eq!(answer_on(server.port(), pid), Answer::Other(again));
    server.kill();
    assert_eq!(answer_on(server.port(), again), Answer::Nothing);
}

/// Keys in the 3 shards of a fresh cluster (checked below).
const KEYS: [&str; 3] = ["a", "b", "c"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_comes_up_serves_and_fails_over_by_hand() {
    let started = Instant::now();
    let cluster = RedisCluster::start().await;
    println!("cluster started in {:?}", started.elapsed());

    let shards = cluster.shards().await;
    assert_eq!(shards.len(), 3, "3 masters: {shards:?}");
    let mut slots: u32 = 0;
    for shard in &shards {
        assert_eq!(
            shard.replicas.len(),
            1,
            "one replica per master: {shards:?}"
        );
        slots += shard
            .slots
            .iter()
            .map(|&(a, b)| u32::from(b - a) + 1)
            .sum::<u32>();
    }
    assert_eq!(slots, 16384);
    let nodes = cluster.nodes().await;
    assert_eq!(nodes.len(), 6);
    assert_eq!(
        nodes.iter().filter(|n| n.role == Role::Master).count(),
        3,
        "{nodes:?}"
    );
    let mut masters: Vec<u16> = Vec::new();
    for key in KEYS {
        masters.push(cluster.master_for_key(key).await);
    }
    masters.sort();
    masters.dedup();
    assert_eq!(masters.len(), 3, "the keys {KEYS:?} are in 3 shards");

    cluster.reset_stats().await;
    let mut conn = cluster.cluster_connection().await;
    for key in KEYS {
        let _: () = conn.set(key, format!("value of {key}")).await.unwrap();
    }
    for key in KEYS {
        let value: String = conn.get(key).await.unwrap();
        assert_eq!(value, format!("value of {key}"));
        // Each key is on its master, and only there among the masters.
        let master = cluster.master_for_key(key).await;
        assert_eq!(cluster.calls_on(master, "set").await, 1);
    }
    // `calls` sums the masters; the replicas run the replicated writes again.
    assert_eq!(cluster.calls("set").await, 3);
    assert_eq!(cluster.calls("get").await, 3);
    let replica_of_a = cluster.replicas_for_key("a").await[0];
    assert_eq!(cluster.calls_on(replica_of_a, "set").await, 1);
    assert_eq!(cluster.calls_on(replica_of_a, "get").await, 0);

    let old = cluster.master_for_key("a").await;
    let replica = cluster.replicas_for_key("a").await[0];
    let (new, took) = cluster.failover_manual("a").await;
    println!("CLUSTER FAILOVER: roles swapped in {took:?}");
    assert_eq!(new, replica);
    assert_eq!(cluster.master_for_key("a").await, replica);
    assert_eq!(cluster.replicas_for_key("a").await, vec![old]);
    assert_eq!(
        cluster.role(old).await,
        Role::Replica {
            master: new,
            linked: true
        }
    );
    // The cluster connection follows the MOVED and reads the replicated value.
    let value: String = conn.get("a").await.unwrap();
    assert_eq!(value, "value of a");
    println!("cluster test took {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_promotes_a_replica_when_a_master_is_killed() {
    let started = Instant::now();
    let mut cluster = RedisCluster::start().await;
    println!("cluster started in {:?}", started.elapsed());

    let mut conn = cluster.cluster_connection().await;
    let _: () = conn.set("b", "before the kill").await.unwrap();
    let master = cluster.master_for_key("b").await;
    let replica = cluster.replicas_for_key("b").await[0];
    // Replicated before the kill.
    let acked: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(2000)
        .query_async(&mut cluster.raw_node(master).await)
        .await
        .unwrap();
    assert_eq!(acked, 1);

    let killed = cluster.kill_master_of("b").await;
    assert_eq!(killed, master);
    let (promoted, took) = cluster.wait_promoted(killed).await;
    println!("kill -9 of master {killed}: replica {promoted} promoted, cluster ok, in {took:?}");
    assert_eq!(promoted, replica);
    assert_eq!(cluster.master_for_key("b").await, promoted);
    assert!(!cluster.seed_urls().contains(&cluster.url(killed)));

    let mut conn = cluster.cluster_connection().await;
    let value: String = conn.get("b").await.unwrap();
    assert_eq!(value, "before the kill");
    let _: () = conn.set("b", "after the kill").await.unwrap();

    let rejoin = Instant::now();
    let role = cluster.restart_node(killed).await;
    println!("the old master rejoined in {:?}", rejoin.elapsed());
    assert_eq!(
        role,
        Role::Replica {
            master: promoted,
            linked: true
        }
    );
    assert_eq!(cluster.replicas_for_key("b").await, vec![killed]);
    assert_eq!(cluster.seed_urls().len(), 6);
    println!("cluster test took {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinels_name_the_master_and_fail_over_by_hand() {
    let started = Instant::now();
    let setup = RedisSentinels::start().await;
    println!("sentinel setup started in {:?}", started.elapsed());

    let master = setup.master_port().await;
    assert_eq!(master, setup.data_ports()[0]);
    assert_eq!(setup.master_name(), "mymaster");
    let roles = setup.roles().await;
    assert_eq!(roles.len(), 3);
    for (port, role) in &roles {
        if *port != master {
            assert_eq!(
                *role,
                Role::Replica {
                    master,
                    linked: true
                }
            );
        }
    }

    // redis-rs finds the master through the sentinels.
    let mut sentinel = redis::sentinel::SentinelClient::build(
        setup.sentinel_urls(),
        String::from(setup.master_name()),
        None,
        redis::sentinel::SentinelServerType::Master,
    )
    .unwrap();
    let mut conn = sentinel.get_async_connection().await.unwrap();
    let _: () = conn.set("k", "v").await.unwrap();
    let value: String = setup.raw_master().await.get("k").await.unwrap();
    assert_eq!(value, "v");

    let (new, took) = setup.failover_manual().await;
    println!("SENTINEL FAILOVER: the sentinels named {new} in {took:?}");
    assert_ne!(new, master);
    assert_eq!(setup.master_port().await, new);
    // The old master lost its replicas, so with min-replicas-to-write 1 it refuses writes even
    // before the sentinels turn it into a replica.
    let refused: redis::RedisResult<()> = setup.raw_node(master).await.set("k", "stale").await;
    let refused = refused.expect_err("the demoted master refuses writes");
    assert!(
        refused.to_string().contains("NOREPLICAS") || refused.to_string().contains("READONLY"),
        "{refused}"
    );
    // The sentinels turn it into a replica only seconds later (about 9 s measured); not
    // waited for here.
    println!("the old master reports {:?}", setup.roles().await);
    let mut conn = sentinel.get_async_connection().await.unwrap();
    let _: () = conn.set("k", "w").await.unwrap();
    println!("sentinel test took {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinels_name_a_new_master_when_the_master_is_killed() {
    let started = Instant::now();
    let mut setup = RedisSentinels::start().await;
    println!("sentinel setup started in {:?}", started.elapsed());

    let _: () = setup.raw_master().await.set("k", "v").await.unwrap();
    let killed = setup.kill_master().await;
    let (new, took) = setup.wait_new_master(killed).await;
    println!("kill -9 of master {killed}: the sentinels named {new} in {took:?}");
    assert_ne!(new, killed);
    assert!(setup.data_ports().contains(&new));
    assert_eq!(setup.master_port().await, new);
    let mut conn = setup.raw_master().await;
    let value: Option<String> = conn.get("k").await.unwrap();
    assert_eq!(value.as_deref(), Some("v"));
    let _: () = conn.set("k", "after").await.unwrap();

    let rejoin = Instant::now();
    setup.restart_node(killed).await;
    println!("the old master rejoined in {:?}", rejoin.elapsed());
    let roles = setup.roles().await;
    assert!(
        roles.contains(&(
            killed,
            Role::Replica {
                master: new,
                linked: true
            }
        )),
        "{roles:?}"
    );
    println!("sentinel test took {:?}", started.elapsed());
}

/// A TLS test moves to a server with TLS only when its own said it has none; a missing binary,
/// a bad setting or a crash fails it where it is.
#[test]
fn only_a_server_that_says_it_has_no_tls_sends_a_tls_test_elsewhere() {
    use support::server::says_no_tls;
    for no_tls in [
        "# Missing implement of connection type tls\n# Failed finding TLS support.",
        "*** FATAL CONFIG FILE ERROR (Redis 6.2.14) ***\n>>> 'tls-port \"12001\"'\nBad directive or wrong number of arguments",
    ] {
        assert!(says_no_tls(no_tls), "{no_tls}");
    }
    for other in [
        "",
        "bash: redis-server: command not found",
        "# Could not create server TCP listening socket 127.0.0.1:12001: bind: Address already in use",
        "*** FATAL CONFIG FILE ERROR (Redis 7.0.15) ***\n>>> 'tls-cert-file \"/x\"'\nBad directive or wrong number of arguments",
        "Failed to configure TLS. Check logs for more info.",
    ] {
        assert!(!says_no_tls(other), "{other}");
    }
}
