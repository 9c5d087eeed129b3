//! A hold removed by somebody else is noticed within about a second, whatever removed it and
//! whatever kind it is: `DEL` of its key, `FLUSHALL`, another client's forced unlock (for
//! permits: another client's `release_by_id`). With the default 30 s watchdog lease, renewals
//! come 10 s apart; the client's heartbeat looks at every hold each second.

mod support;

use std::time::{Duration, Instant};

use ferrisson::Client;
use support::RedisServer;

/// How soon a removal must be noticed: the heartbeat's second, a round trip, and slack for a
/// loaded test machine.
const NOTICED_WITHIN: Duration = Duration::from_millis(1_800);

/// Every kind of hold the watchdog keeps.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Plain,
    FixedLease,
    Fair,
    Fenced,
    Read,
    Write,
    Mutex,
    Permit,
}

const KINDS: [Kind; 8] = [
    Kind::Plain,
    Kind::FixedLease,
    Kind::Fair,
    Kind::Fenced,
    Kind::Read,
    Kind::Write,
    Kind::Mutex,
    Kind::Permit,
];

/// A live hold of one kind, and how another client removes it by force.
enum Hold {
    Lock(ferrisson::LockGuard),
    Permit(ferrisson::PermitGuard),
}

impl Hold {
    async fn lost(&self) {
        match self {
            Hold::Lock(guard) => guard.lost().await,
            Hold::Permit(guard) => guard.lost().await,
        }
    }

    fn is_lost(&self) -> bool {
        match self {
            Hold::Lock(guard) => guard.is_lost(),
            Hold::Permit(guard) => guard.is_lost(),
        }
    }
}

fn name(kind: Kind) -> String {
    format!("removed:{kind:?}")
}

async fn take(client: &Client, kind: Kind) -> Hold {
    let name = name(kind);
    let lock = match kind {
        Kind::Plain => client.get_lock(&name).lock().await,
        Kind::FixedLease => {
            client
                .get_lock(&name)
                .lock_with_lease(Duration::from_secs(60))
                .await
        }
        Kind::Fair => client.get_fair_lock(&name).lock().await,
        Kind::Fenced => client.get_fenced_lock(&name).lock().await,
        Kind::Read => client.get_read_write_lock(&name).read_lock().lock().await,
        Kind::Write => client.get_read_write_lock(&name).write_lock().lock().await,
        Kind::Mutex => client.get_mutex(&name).lock().await,
        Kind::Permit => {
            let semaphore = client.get_permit_expirable_semaphore(&name);
            assert!(semaphore.try_set_permits(2).await.unwrap());
            return Hold::Permit(semaphore.acquire().await.unwrap());
        }
    };
    Hold::Lock(lock.unwrap())
}

/// Another client removes `hold` (of `kind`) through the API.
async fn force(other: &Client, kind: Kind, hold: &Hold) {
    let name = name(kind);
    let forced = match (kind, hold) {
        (Kind::Read, _) => {
            other
                .get_read_write_lock(&name)
                .read_lock()
                .force_unlock()
                .await
        }
        (Kind::Write, _) => {
            other
                .get_read_write_lock(&name)
                .write_lock()
                .force_unlock()
                .await
        }
        (Kind::Mutex, _) => other.get_mutex(&name).force_unlock().await,
        (Kind::Fair, _) => other.get_fair_lock(&name).force_unlock().await,
        (Kind::Fenced, _) => other.get_fenced_lock(&name).force_unlock().await,
        (_, Hold::Permit(guard)) => {
            let semaphore = other.get_permit_expirable_semaphore(&name);
            semaphore
                .release_by_id(&guard.ids()[0])
                .await
                .map(|()| true)
        }
        _ => other.get_lock(&name).force_unlock().await,
    };
    assert!(forced.unwrap(), "{kind:?}: the forced unlock found a hold");
}

/// Takes one hold of every kind, removes them all with `remove`, and checks that each holder
/// hears of it within [`NOTICED_WITHIN`].
async fn every_kind_notices<F, Fut>(server: &RedisServer, remove: F)
where
    F: FnOnce(Vec<Hold>) -> Fut,
    Fut: std::future::Future<Output = Vec<Hold>>,
{
    let client = support::client(server).await;
    let mut holds = Vec::new();
    for kind in KINDS {
        holds.push(take(&client, kind).await);
    }
    // Past the heartbeat's first look, so that a later look is what notices.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    assert!(holds.iter().all(|h| !h.is_lost()), "nothing is lost yet");
    let holds = remove(holds).await;
    let removed = Instant::now();
    for (kind, hold) in KINDS.iter().zip(&holds) {
        let heard = tokio::time::timeout(NOTICED_WITHIN, hold.lost()).await;
        assert!(
            heard.is_ok(),
            "{kind:?}: the loss was not noticed within {NOTICED_WITHIN:?} ({:?} after the removal)",
            removed.elapsed()
        );
    }
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_key_is_noticed_within_about_a_second_for_every_kind() {
    let server = RedisServer::start();
    let mut raw = server.raw().await;
    every_kind_notices(&server, |holds| async move {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("*removed:*")
            .query_async(&mut raw)
            .await
            .unwrap();
        assert!(!keys.is_empty());
        for key in keys {
            let _: i64 = redis::cmd("DEL")
                .arg(&key)
                .query_async(&mut raw)
                .await
                .unwrap();
        }
        holds
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flushall_is_noticed_within_about_a_second_for_every_kind() {
    let server = RedisServer::start();
    let mut raw = server.raw().await;
    every_kind_notices(&server, |holds| async move {
        let _: () = redis::cmd("FLUSHALL").query_async(&mut raw).await.unwrap();
        holds
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_clients_forced_unlock_is_noticed_within_about_a_second_for_every_kind() {
    let server = RedisServer::start();
    let other = support::client(&server).await;
    every_kind_notices(&server, |holds| async {
        for (kind, hold) in KINDS.iter().zip(&holds) {
            force(&other, *kind, hold).await;
        }
        holds
    })
    .await;
}

/// The same on a cluster: the holds spread over slots of several masters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_key_is_noticed_within_about_a_second_on_a_cluster() {
    let cluster = support::cluster::RedisCluster::start().await;
    let client = Client::builder()
        .cluster(cluster.seed_urls())
        .connection_timeout(Duration::from_secs(2))
        .response_timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    let names: Vec<String> = (0..12).map(|i| format!("spread:{i}")).collect();
    let mut guards = Vec::new();
    for name in &names {
        guards.push(client.get_lock(name).lock().await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    for name in &names {
        let port = cluster.master_for_key(name).await;
        let mut node = cluster.raw_node(port).await;
        let _: i64 = redis::cmd("DEL")
            .arg(name)
            .query_async(&mut node)
            .await
            .unwrap();
    }
    for (name, guard) in names.iter().zip(&guards) {
        assert!(
            tokio::time::timeout(NOTICED_WITHIN, guard.lost())
                .await
                .is_ok(),
            "{name}: not noticed"
        );
    }
}

/// What the look costs: one call a second for every hold a client has, not one per hold. Ten
/// holds for four seconds, with renewals 10 s apart: about four presence calls in all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_look_is_one_call_a_second_for_all_holds() {
    let server = RedisServer::start();
    // Without takeover, whose presence confirmations (two a second while the client holds
    // anything; docs/observability.md counts them) would count among the looks.
    let client = support::builder(&server)
        .takeover_grace(None)
        .build()
        .await
        .unwrap();
    let mut guards = Vec::new();
    for i in 0..10 {
        guards.push(client.get_lock(&format!("cost:{i}")).lock().await.unwrap());
    }
    server.reset_stats().await;
    tokio::time::sleep(Duration::from_millis(4_100)).await;
    let calls = server.calls("evalsha").await;
    assert!(
        (3..=6).contains(&calls),
        "{calls} script calls in 4.1 s for 10 holds"
    );
    for guard in guards {
        guard.unlock().await.unwrap();
    }
}
