//! Chaos: contenders on three clients loop lock/unlock on one lock while its master is killed,
//! on a Sentinel setup and on a Cluster.
//!
//! - Replicas cut off first (frozen, and their links dropped by the master, so they certainly
//!   miss what follows: a frozen replica alone still finds the stream in its socket on thaw):
//!   the promoted replica never saw the last grants nor the counter they raised, and still no
//!   token is handed out twice and tokens rise in grant order (they start at the server clock).
//! - Every grant synced to every replica (`sync_replicas`): the promoted replica has every
//!   grant a contender was told of, so no two holds whose unlock found them overlap either.
//!
//! And a Cluster failover that loses grants of every kind: each next token is above the lost
//! ones, and the lost holds are known lost within 3 s of the promotion although their 30 s
//! leases are not due for renewal (the heartbeat reaches every master).

mod support;

use std::time::{Duration, Instant};

use ferrisson::{Client, ClientBuilder};
use redis::aio::MultiplexedConnection;
use support::chaos::{self, Chaos, EveryKind};
use support::cluster::RedisCluster;
use support::sentinel::RedisSentinels;

const NAME: &str = "chaos:lock";
/// A key of [`NAME`]'s slot, written only while the replicas are cut off.
const MARKER: &str = "{chaos:lock}:written-while-cut";

async fn clients(builder: impl Fn() -> ClientBuilder) -> Vec<Client> {
    let mut clients = Vec::new();
    for _ in 0..3 {
        let built = builder()
            .connection_timeout(Duration::from_millis(500))
            .response_timeout(Duration::from_millis(500))
            .recheck_interval(Duration::from_millis(200))
            // A hold whose release the dead master never passed on blocks the lock until its
            // lease runs out: keep that short.
            .watchdog_timeout(Duration::from_secs(5))
            .build()
            .await
            .expect("a client");
        clients.push(built);
    }
    clients
}

async fn query<T: redis::FromRedisValue>(conn: &mut MultiplexedConnection, cmd: &redis::Cmd) -> T {
    cmd.query_async(conn)
        .await
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"))
}

/// Writes [`MARKER`] on `master`, whose replicas were cut off.
async fn mark(master: &mut MultiplexedConnection) {
    let _: () = query(master, redis::cmd("SET").arg(MARKER).arg(1)).await;
}

/// Asserts the new master never got [`MARKER`]: it missed what the old one did while cut off.
async fn assert_missed(new_master: &mut MultiplexedConnection) {
    let marker: Option<String> = query(new_master, redis::cmd("GET").arg(MARKER)).await;
    assert!(
        marker.is_none(),
        "the promoted replica got what was written while it was cut off"
    );
}

fn check(grants: &[chaos::Grant], killed: Instant, resumed: Instant, synced: bool) {
    let (before, after) = chaos::grants_on_both_sides(grants, killed, resumed);
    eprintln!("{before} grants before the kill, {after} after the failover");
    chaos::assert_tokens_unique_and_rising(grants);
    if synced {
        chaos::assert_released_holds_never_overlap(grants);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_failover_to_a_replica_cut_off_never_repeats_a_token() {
    let mut setup = RedisSentinels::start().await;
    let clients =
        clients(|| Client::builder().sentinel(setup.master_name(), setup.sentinel_urls())).await;
    let chaos = Chaos::start(&clients, NAME, 2);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let replicas = setup.cut_off_replicas().await;
    mark(&mut setup.raw_master().await).await;
    let cut = chaos.grants();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        chaos.grants() > cut,
        "no grant while the replicas were cut off"
    );
    let old = setup.kill_master().await;
    let killed = Instant::now();
    setup.resume_all(&replicas);
    let (new, took) = setup.wait_new_master(old).await;
    let named = Instant::now();
    eprintln!("master {old} killed; {new} named after {took:?}");
    assert_missed(&mut setup.raw_master().await).await;
    chaos
        .wait_grants_after(named, 20, Duration::from_secs(15))
        .await;
    check(&chaos.stop().await, killed, named, false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_failover_with_every_grant_synced_keeps_released_holds_apart() {
    let mut setup = RedisSentinels::start().await;
    let clients = clients(|| {
        Client::builder()
            .sentinel(setup.master_name(), setup.sentinel_urls())
            .sync_replicas(2, Duration::from_millis(500))
    })
    .await;
    let chaos = Chaos::start(&clients, NAME, 2);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let old = setup.kill_master().await;
    let killed = Instant::now();
    let (new, took) = setup.wait_new_master(old).await;
    eprintln!("master {old} killed; {new} named after {took:?}");
    // Grants need both replicas again: the killed master comes back as one.
    setup.restart_node(old).await;
    let back = Instant::now();
    chaos
        .wait_grants_after(back, 20, Duration::from_secs(15))
        .await;
    check(&chaos.stop().await, killed, back, true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_failover_to_a_replica_cut_off_never_repeats_a_token() {
    let mut cluster = RedisCluster::start().await;
    let seeds = cluster.seed_urls();
    let clients = clients(|| Client::builder().cluster(seeds.clone())).await;
    let chaos = Chaos::start(&clients, NAME, 2);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (master, replicas) = cluster.cut_off_replicas_of(NAME).await;
    mark(&mut cluster.raw_node(master).await).await;
    let cut = chaos.grants();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        chaos.grants() > cut,
        "no grant while the replicas were cut off"
    );
    let killed_port = cluster.kill_master_of(NAME).await;
    let killed = Instant::now();
    cluster.resume_all(&replicas);
    let (promoted, took) = cluster.wait_promoted(killed_port).await;
    let named = Instant::now();
    eprintln!("master {killed_port} killed; {promoted} promoted after {took:?}");
    assert_missed(&mut cluster.raw_node(promoted).await).await;
    chaos
        .wait_grants_after(named, 20, Duration::from_secs(15))
        .await;
    check(&chaos.stop().await, killed, named, false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_failover_with_every_grant_synced_keeps_released_holds_apart() {
    let mut cluster = RedisCluster::start().await;
    let seeds = cluster.seed_urls();
    let clients = clients(|| {
        Client::builder()
            .cluster(seeds.clone())
            .sync_replicas(1, Duration::from_millis(500))
    })
    .await;
    let chaos = Chaos::start(&clients, NAME, 2);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let killed_port = cluster.kill_master_of(NAME).await;
    let killed = Instant::now();
    let (promoted, took) = cluster.wait_promoted(killed_port).await;
    eprintln!("master {killed_port} killed; {promoted} promoted after {took:?}");
    // Grants need a replica again: the killed master comes back as one.
    cluster.restart_node(killed_port).await;
    let back = Instant::now();
    chaos
        .wait_grants_after(back, 20, Duration::from_secs(15))
        .await;
    check(&chaos.stop().await, killed, back, true);
}

/// A Cluster failover to a replica that missed the last grants, one of every kind with a
/// token, all held: every hold is known lost within 3 s of the promotion (30 s leases: no
/// renewal is due), and each kind's next token is above every lost one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_grants_lost_in_a_failover_are_known_lost_and_never_repeat_a_token() {
    let mut cluster = RedisCluster::start().await;
    let client = Client::builder()
        .cluster(cluster.seed_urls())
        .connection_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_millis(500))
        .watchdog_timeout(Duration::from_secs(30))
        .build()
        .await
        .unwrap();
    let (_, replicas) = cluster.cut_off_replicas_of("{lost}").await;
    let held = EveryKind::hold(&client, "{lost}").await;

    let killed = cluster.kill_master_of("{lost}").await;
    cluster.resume_all(&replicas);
    let (promoted, took) = cluster.wait_promoted(killed).await;
    let named = Instant::now();
    eprintln!("master {killed} killed; {promoted} promoted after {took:?}");
    let mut raw = cluster.raw_node(promoted).await;
    let exists: i64 = query(&mut raw, redis::cmd("EXISTS").arg("{lost}:plain")).await;
    assert_eq!(exists, 0, "the promoted replica never got the grants");
    held.assert_lost_by(named + Duration::from_secs(3)).await;
    eprintln!(
        "every hold known lost {:?} after the promotion",
        named.elapsed()
    );
    // The semaphore's permit count was set on the old master only: hold() sets it again.
    held.assert_next_tokens_above(&client, "{lost}").await;
}
