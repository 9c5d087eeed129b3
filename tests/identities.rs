//! Client identities: each client records who it is under `ferrisson_client:{<id>}` (app name,
//! host, pid, version, start), kept alive by its heartbeat with a 5 s TTL (longer while it
//! holds: see tests/silent_holders.rs), removed by `close`, gone after a kill once its holds
//! cannot live (8 s with a 2 s watchdog), written again after the server lost it; off, nothing is
//! written and an idle client sends nothing. On one server and on a Cluster, and what it costs.

mod support;

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use ferrisson::{Client, ClientIdentity};
use redis::AsyncCommands;
use support::cluster::RedisCluster;
use support::{HolderProcess, RedisServer, builder, eventually};

/// The identity's TTL (5 s), and slack for a loaded machine.
const TTL: Duration = Duration::from_secs(5);
/// The killed holders' watchdog timeout, and the TTL their identity's beats set for it (2 s,
/// 2% for the clocks and 5 s, rounded up to whole seconds).
const HOLDER_MS: u64 = 2_000;
const HOLDER_TTL: Duration = Duration::from_secs(8);
const SLACK: Duration = Duration::from_millis(1_500);

fn key(client: &Client) -> String {
    format!("ferrisson_client:{{{}}}", client.id())
}

async fn fields(raw: &mut impl redis::aio::ConnectionLike, key: &str) -> HashMap<String, String> {
    redis::cmd("HGETALL")
        .arg(key)
        .query_async(raw)
        .await
        .unwrap()
}

async fn server_ms(raw: &mut redis::aio::MultiplexedConnection) -> u64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(raw).await.unwrap();
    secs * 1000 + micros / 1000
}

/// The identity's fields as the client wrote them, and what `identity_of` reads back.
async fn check_fields(
    client: &Client,
    fields: &HashMap<String, String>,
    app: &str,
    now_ms: u64,
) -> ClientIdentity {
    assert_eq!(
        fields.get("app").map(String::as_str),
        Some(app),
        "{fields:?}"
    );
    assert_eq!(fields["pid"], std::process::id().to_string());
    assert_eq!(fields["version"], env!("CARGO_PKG_VERSION"));
    assert!(!fields["host"].is_empty(), "{fields:?}");
    let started: u64 = fields["started"].parse().unwrap();
    assert!(
        started <= now_ms && now_ms - started < 10_000,
        "started {started}, server now {now_ms}"
    );
    let read = client.identity_of(client.id()).await.unwrap().unwrap();
    assert_eq!(read.id, client.id());
    assert_eq!((read.app.as_str(), read.pid), (app, std::process::id()));
    assert_eq!(read.host, fields["host"]);
    assert_eq!(read.version, env!("CARGO_PKG_VERSION"));
    assert_eq!(read.started_ms, started);
    assert!(read.age < Duration::from_secs(10), "{read:?}");
    read
}

/// Keys under the identities' prefix that no client wrote (a name or a field that is not
/// UTF-8, another type) never fail the listing: odd bytes are shown lossily, the rest left out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_keys_under_the_prefix_do_not_fail_the_listing() {
    let server = RedisServer::start();
    let client = support::client(&server).await;
    let mut raw = server.raw().await;
    let _: () = raw
        .set(b"ferrisson_client:{\xff\xfe}".as_slice(), 1)
        .await
        .unwrap();
    let _: () = raw.set("ferrisson_client:{not-a-uuid}", 1).await.unwrap();
    let odd = uuid::Uuid::from_u128(0x5eed);
    let odd_key = format!("ferrisson_client:{{{odd}}}");
    let _: () = raw
        .hset(&odd_key, "app", b"caf\xe9".as_slice())
        .await
        .unwrap();
    let _: () = raw.hset(&odd_key, "pid", "12").await.unwrap();
    let wrong = uuid::Uuid::from_u128(0xbad);
    let _: () = raw
        .rpush(format!("ferrisson_client:{{{wrong}}}"), "x")
        .await
        .unwrap();

    let listed = client.clients().await.unwrap();
    let ids: std::collections::BTreeSet<_> = listed.iter().map(|c| c.id).collect();
    assert_eq!(ids, [client.id(), odd].into_iter().collect(), "{listed:?}");
    let shown = client.identity_of(odd).await.unwrap().unwrap();
    assert_eq!(shown.app, "caf\u{fffd}");
    assert_eq!(shown.pid, 12);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_identity_is_there_after_connect_with_its_fields() {
    let server = RedisServer::start();
    let named = builder(&server).app_name("billing").build().await.unwrap();
    let unnamed = support::client(&server).await;
    let mut raw = server.raw().await;
    let now = server_ms(&mut raw).await;
    check_fields(
        &named,
        &fields(&mut raw, &key(&named)).await,
        "billing",
        now,
    )
    .await;
    // Without a name: the executable's file name (this test binary's).
    let exe = std::env::current_exe().unwrap();
    let exe = exe.file_name().unwrap().to_str().unwrap();
    check_fields(&unnamed, &fields(&mut raw, &key(&unnamed)).await, exe, now).await;
    let ttl: i64 = raw.pttl(key(&named)).await.unwrap();
    assert!(0 < ttl && ttl <= 5_000, "TTL {ttl} ms");

    // Kept alive past its TTL by the heartbeat, idle as the client is, and listed.
    tokio::time::sleep(TTL + Duration::from_secs(1)).await;
    let listed = named.clients().await.unwrap();
    let ids: Vec<_> = listed.iter().map(|c| c.id).collect();
    assert_eq!(ids.len(), 2, "{listed:?}");
    assert!(ids.contains(&named.id()) && ids.contains(&unnamed.id()));
    let me = listed.iter().find(|c| c.id == named.id()).unwrap();
    assert!(me.age >= TTL, "aged by the server's clock: {me:?}");
    // Ordered by start: the first client built comes first.
    assert_eq!(listed[0].id, named.id());
    assert_eq!(named.identity_of(uuid_of_nobody()).await.unwrap(), None);
}

fn uuid_of_nobody() -> uuid::Uuid {
    "00000000-0000-4000-8000-000000000000".parse().unwrap()
}

/// Calls per command since the last reset, without the test's own: `INFO`, `CONFIG`, and the
/// `CLIENT SETINFO` redis-rs sends on each of the test's raw connections (counted as `client`
/// on Redis 6.2, `client|setinfo` on Valkey, refused by Redis 7.0).
async fn client_calls(server: &RedisServer) -> BTreeMap<String, u64> {
    server
        .commandstats()
        .await
        .into_iter()
        .filter(|(name, _)| {
            !["info", "config", "client"]
                .iter()
                .any(|own| name.starts_with(own))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn off_there_is_no_key_and_no_call_while_idle() {
    let server = RedisServer::start();
    let client = builder(&server).identity(false).build().await.unwrap();
    server.reset_stats().await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let calls = client_calls(&server).await;
    assert!(
        calls.is_empty(),
        "an idle client without identity sent {calls:?}"
    );
    let mut raw = server.raw().await;
    let keys: Vec<String> = raw.keys("ferrisson_client:*").await.unwrap();
    assert!(keys.is_empty(), "{keys:?}");
    assert_eq!(client.identity_of(client.id()).await.unwrap(), None);
    assert!(client.clients().await.unwrap().is_empty());

    // On, the same idle client beats every second.
    let on = support::client(&server).await;
    server.reset_stats().await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let pexpires = server.calls("pexpire").await;
    assert!((2..=4).contains(&pexpires), "{pexpires} PEXPIRE in 3 s");
    drop(on);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_removes_it_for_good() {
    let server = RedisServer::start();
    let client = support::client(&server).await;
    let (id, key) = (client.id(), key(&client));
    let observer = support::client(&server).await;
    assert!(observer.identity_of(id).await.unwrap().is_some());
    // A lock held a moment: a heartbeat with holds, then none.
    client
        .get_lock("closing")
        .lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    let left = client.clone().close().await;
    assert!(left.is_empty(), "{left:?}");
    let mut raw = server.raw().await;
    assert!(!raw.exists::<_, bool>(&key).await.unwrap());
    // The clone still lives, its heartbeat too: it does not write the identity back.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert!(!raw.exists::<_, bool>(&key).await.unwrap());
    assert_eq!(observer.identity_of(id).await.unwrap(), None);
    drop(client);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_client_vanishes_once_its_hold_cannot_live() {
    let server = RedisServer::start();
    let mut holder = HolderProcess::spawn(&server, "held-by-the-dead", HOLDER_MS, "identity");
    let line = holder.line(Duration::from_secs(10)).await;
    let id: uuid::Uuid = line.strip_prefix("ID ").unwrap().parse().unwrap();
    holder.locked(Duration::from_secs(10)).await;
    let observer = support::client(&server).await;
    let who = observer
        .identity_of(id)
        .await
        .unwrap()
        .expect("the holder's identity");
    // The default name: the executable's.
    assert_eq!(who.app, "ferrisson-test-holder");
    assert_eq!(Some(who.pid), holder.pid());
    // The owner name on the lock leads to it.
    let mut raw = server.raw().await;
    let owners: Vec<String> = raw.hkeys("held-by-the-dead").await.unwrap();
    assert!(owners[0].starts_with(&id.to_string()), "{owners:?}");

    holder.kill().await;
    let killed = Instant::now();
    let gone = eventually(HOLDER_TTL + SLACK, || async {
        observer.identity_of(id).await.unwrap().is_none()
    })
    .await;
    assert!(gone, "still listed {:?} after the kill", killed.elapsed());
    eprintln!("gone {:?} after the kill", killed.elapsed());
    assert!(!observer.clients().await.unwrap().iter().any(|c| c.id == id));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_gets_it_back_at_the_next_beat() {
    let mut server = RedisServer::start();
    let client = support::client(&server).await;
    let before = client.identity_of(client.id()).await.unwrap().unwrap();
    server.restart();
    let restarted = Instant::now();
    let mut raw = server.raw().await;
    let key = key(&client);
    let back = eventually(Duration::from_secs(3), || {
        let mut raw = raw.clone();
        let key = key.clone();
        async move { raw.exists::<_, bool>(&key).await.unwrap() }
    })
    .await;
    assert!(back, "not back {:?} after the restart", restarted.elapsed());
    eprintln!("back {:?} after the restart", restarted.elapsed());
    let after = client.identity_of(client.id()).await.unwrap().unwrap();
    assert_eq!(
        after.started_ms, before.started_ms,
        "the client's start, not the rewrite's"
    );
    assert_eq!((after.app, after.pid), (before.app, before.pid));
    let ttl: i64 = raw.pttl(&key).await.unwrap();
    assert!(0 < ttl && ttl <= 5_000, "TTL {ttl} ms");
}

/// What an identity costs: Redis calls per second of one idle client and of one holding locks
/// (measured over 10 s each with `INFO commandstats`; docs/observability.md quotes it). The
/// holds have fixed leases, so no renewal (every third of a lease, identities or not) falls in
/// a window and each count is the heartbeat's alone: a `PEXPIRE` run inside a renewal script
/// would count as one the client sent. The identity's own scripts (`client_beat.lua`, which
/// runs when the holds' sites or the TTL the identity needs change: a fixed lease's remainder
/// shrinks, so it does a few times in a window; `client_identity.lua`) each run one `PEXPIRE`
/// and one `HSET`: the `HSET`s count those `PEXPIRE`s out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_an_identity_costs_in_calls_per_second() {
    const WINDOW: Duration = Duration::from_secs(10);
    let server = RedisServer::start();
    let measure = |what: &'static str| {
        let server = &server;
        async move {
            server.reset_stats().await;
            tokio::time::sleep(WINDOW).await;
            let calls = client_calls(server).await;
            let sent: u64 = calls
                .iter()
                // A presence confirmation is a `PUBSUB NUMSUB` and an `HDEL` sent together:
                // one call, counted by its first command (no script here counts channels).
                .filter(|(name, _)| {
                    ["evalsha", "eval", "pexpire", "pubsub|numsub"].contains(&name.as_str())
                })
                .map(|(_, n)| n)
                .sum();
            let sent = sent - calls.get("hset").copied().unwrap_or(0);
            let per_second = sent as f64 / WINDOW.as_secs_f64();
            eprintln!("{what}: {per_second:.1} calls/s sent; every command run: {calls:?}");
            per_second
        }
    };
    let on = support::client(&server).await;
    let idle_on = measure("idle, identity on").await;
    let lease = Duration::from_secs(120);
    let guards = [
        on.get_lock("cost:a").lock_with_lease(lease).await.unwrap(),
        on.get_lock("cost:b").lock_with_lease(lease).await.unwrap(),
    ];
    let holding_on = measure("holding 2 locks, identity on").await;
    drop(guards);
    on.close().await;
    let off = builder(&server).identity(false).build().await.unwrap();
    let idle_off = measure("idle, identity off").await;
    let guards = [
        off.get_lock("cost:a").lock_with_lease(lease).await.unwrap(),
        off.get_lock("cost:b").lock_with_lease(lease).await.unwrap(),
    ];
    let holding_off = measure("holding 2 locks, identity off").await;
    drop(guards);
    // One PEXPIRE a second more, whatever the client holds (beside the presence check's
    // EVALSHA when it holds something); and with the identity, the confirmations of the
    // client's presence (see `presence`, on by default with it): one every 5 s idle, two a
    // second while it holds something.
    assert!((1.0..=1.4).contains(&idle_on), "{idle_on}");
    assert_eq!(idle_off, 0.0);
    assert!((3.6..=4.3).contains(&holding_on), "{holding_on}");
    assert!((0.8..=1.2).contains(&holding_off), "{holding_off}");
}

/// On a Cluster: the identity is written to the master of its own slot, `clients` finds the
/// identities on every master, `close` removes it, the heartbeat keeps it past its TTL, and off
/// writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_every_master_is_searched() {
    let cluster = RedisCluster::start().await;
    let build = |identity: bool| {
        Client::builder()
            .cluster(cluster.seed_urls())
            .connection_timeout(Duration::from_secs(2))
            .response_timeout(Duration::from_secs(2))
            .app_name("clustered")
            .identity(identity)
            .build()
    };
    // Clients until their identities lie on every master.
    let masters = cluster.masters().await;
    let mut clients = Vec::new();
    let mut on_masters = std::collections::BTreeSet::new();
    while on_masters.len() < masters.len() {
        assert!(clients.len() < 40, "40 identities on {on_masters:?} only");
        let client = build(true).await.unwrap();
        on_masters.insert(cluster.master_for_key(&key(&client)).await);
        clients.push(client);
    }
    let mut raw = cluster.cluster_connection().await;
    let now = server_ms(&mut cluster.raw_node(masters[0]).await).await;
    check_fields(
        &clients[0],
        &fields(&mut raw, &key(&clients[0])).await,
        "clustered",
        now,
    )
    .await;
    let off = build(false).await.unwrap();

    tokio::time::sleep(TTL + Duration::from_secs(1)).await;
    let listed = off.clients().await.unwrap();
    let mut found: Vec<_> = listed.iter().map(|c| c.id).collect();
    let mut expected: Vec<_> = clients.iter().map(Client::id).collect();
    found.sort();
    expected.sort();
    assert_eq!(found, expected, "every client on every master, none twice");
    assert!(listed.iter().all(|c| c.app == "clustered" && c.age >= TTL));
    assert_eq!(off.identity_of(off.id()).await.unwrap(), None);

    let last = clients.pop().unwrap();
    let (id, last_key) = (last.id(), key(&last));
    assert!(last.close().await.is_empty());
    assert!(!raw.exists::<_, bool>(&last_key).await.unwrap());
    assert!(!off.clients().await.unwrap().iter().any(|c| c.id == id));
}

/// On a cluster too a killed client (no `close`, no last beat) vanishes once its hold cannot
/// live, from `clients()` searching every master and from `identity_of` on its own key's master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_cluster_client_vanishes_once_its_hold_cannot_live() {
    let cluster = RedisCluster::start().await;
    let url = format!("cluster={}", cluster.seed_urls().join("+"));
    let mut holder =
        HolderProcess::spawn_url(&url, "cluster-held-by-the-dead", HOLDER_MS, "identity");
    let line = holder.line(Duration::from_secs(10)).await;
    let id: uuid::Uuid = line.strip_prefix("ID ").unwrap().parse().unwrap();
    holder.locked(Duration::from_secs(10)).await;
    let observer = Client::builder()
        .cluster(cluster.seed_urls())
        .app_name("observer")
        .build()
        .await
        .unwrap();
    let who = observer
        .identity_of(id)
        .await
        .unwrap()
        .expect("the holder's identity");
    assert_eq!(Some(who.pid), holder.pid());
    assert!(observer.clients().await.unwrap().iter().any(|c| c.id == id));
    let snapshot = observer
        .get_lock("cluster-held-by-the-dead")
        .snapshot()
        .await
        .unwrap();
    assert_eq!(
        snapshot.holders[0].client,
        Some(id),
        "the owner leads to the identity"
    );

    holder.kill().await;
    let killed = Instant::now();
    let gone = eventually(HOLDER_TTL + SLACK, || async {
        observer.identity_of(id).await.unwrap().is_none()
            && !observer.clients().await.unwrap().iter().any(|c| c.id == id)
    })
    .await;
    assert!(gone, "still listed {:?} after the kill", killed.elapsed());
    eprintln!("gone {:?} after the kill", killed.elapsed());
    // The observer itself is still listed: only the dead one went.
    assert!(
        observer
            .clients()
            .await
            .unwrap()
            .iter()
            .any(|c| c.id == observer.id())
    );
}

/// The blocking client: the same settings and readers, on a plain thread.
#[test]
fn the_blocking_client_records_and_reads_identities() {
    let server = RedisServer::start();
    let named = ferrisson::blocking::Client::builder()
        .url(server.url())
        .app_name("blocking-app")
        .build()
        .unwrap();
    let off = ferrisson::blocking::Client::builder()
        .url(server.url())
        .identity(false)
        .build()
        .unwrap();
    let who = off.identity_of(named.id()).unwrap().expect("its identity");
    assert_eq!(
        (who.app.as_str(), who.pid),
        ("blocking-app", std::process::id())
    );
    assert_eq!(off.identity_of(off.id()).unwrap(), None);
    let listed: Vec<_> = off.clients().unwrap().into_iter().map(|c| c.id).collect();
    assert_eq!(listed, vec![named.id()]);
    assert!(named.close().unwrap().is_empty());
    assert!(off.clients().unwrap().is_empty());
}
