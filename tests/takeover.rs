//! A killed holder's locks are taken over within seconds, not at the end of its lease: the
//! kernel closes a dead process's connections, Redis drops its presence subscription, and a
//! waiter that finds it gone for the grace (2 s by default) takes the hold over. Nothing else
//! frees a hold early: a paused Redis, a stopped holder process, dropped connections that come
//! back, and a holder that cannot come back is told `lost()` before its hold is taken.

mod support;

use std::time::{Duration, Instant};

use support::{HolderProcess, RedisServer, client};

/// The default watchdog timeout: what a killed holder cost before.
const LEASE_MS: u64 = 30_000;

/// The target: another client has the lock within this of the holder's death.
const TAKEOVER: Duration = Duration::from_secs(3);

/// What a waiter in this process takes while a child process of `kind` holds `name`.
async fn wait_for(client: &ferrisson::Client, kind: &str, name: &str) -> ferrisson::Result<u64> {
    let guard = match kind {
        "lock" => client.get_lock(name).lock().await?,
        "fair" => client.get_fair_lock(name).lock().await?,
        // A read hold keeps a writer out, and a write hold a reader.
        "read" => client.get_read_write_lock(name).write_lock().lock().await?,
        "write" => client.get_read_write_lock(name).read_lock().lock().await?,
        "prefer-write" => {
            client
                .get_read_write_lock_with(name, ferrisson::RwPolicy::PreferWriters)
                .read_lock()
                .lock()
                .await?
        }
        other => panic!("no waiter for {other}"),
    };
    let token = guard.fencing_token();
    guard.unlock().await?;
    Ok(token)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holder_of_every_kind_is_taken_over_within_3s() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let mut report = Vec::new();
    for kind in ["lock", "fair", "read", "write"] {
        let name = format!("killed:{kind}");
        let mut holder = HolderProcess::spawn(&server, &name, LEASE_MS, kind);
        let held = holder.locked(Duration::from_secs(10)).await;
        let waiter = {
            let (client, kind, name) = (client.clone(), kind.to_owned(), name.clone());
            tokio::spawn(async move { wait_for(&client, &kind, &name).await })
        };
        // The waiter waits a while first, as one would.
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(
            !waiter.is_finished(),
            "{kind}: the waiter got in beside a live holder"
        );
        holder.kill().await;
        let killed = Instant::now();
        let token = tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .unwrap_or_else(|_| panic!("{kind}: not taken over within 10 s"))
            .unwrap()
            .unwrap();
        let took = killed.elapsed();
        assert!(token > held, "{kind}: a new token ({token} after {held})");
        assert!(took < TAKEOVER, "{kind}: taken over after {took:?}");
        report.push(format!("{kind} {took:?}"));
    }
    eprintln!("taken over after a kill -9: {}", report.join(", "));
}

/// The holders that take part beside a lock: a blocking API holder, a RedLock over three
/// servers (each instance's hold taken over by a RedLock waiter).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_blocking_holder_and_a_killed_redlock_holder_are_taken_over_within_3s() {
    let servers = [
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    ];
    let client = client(&servers[0]).await;
    // The blocking API: the hold is the client thread's, the process is one like any other.
    let mut holder = HolderProcess::spawn(&servers[0], "killed:blocking", LEASE_MS, "blocking");
    holder.locked(Duration::from_secs(10)).await;
    let lock = client.get_lock("killed:blocking");
    let waiter = tokio::spawn(async move { lock.lock().await.map(|g| g.fencing_token()) });
    tokio::time::sleep(Duration::from_secs(1)).await;
    holder.kill().await;
    let killed = Instant::now();
    tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("taken over")
        .unwrap()
        .unwrap();
    let blocking = killed.elapsed();
    assert!(
        blocking < TAKEOVER,
        "blocking: taken over after {blocking:?}"
    );

    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let mut holder =
        HolderProcess::spawn_url(&urls.join(","), "killed:redlock", LEASE_MS, "redlock");
    holder.locked(Duration::from_secs(10)).await;
    let mut clients = Vec::new();
    for server in &servers {
        clients.push(support::client(server).await);
    }
    let waiter = tokio::spawn(async move {
        let locks = clients.iter().map(|c| c.get_lock("killed:redlock"));
        let redlock = ferrisson::RedLock::new(locks).instance_timeout(Duration::from_millis(250));
        redlock
            .lock()
            .await
            .map(|guard| guard.fencing_tokens().len())
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        !waiter.is_finished(),
        "the RedLock got in beside a live holder"
    );
    holder.kill().await;
    let killed = Instant::now();
    let parts = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("taken over")
        .unwrap()
        .unwrap();
    let redlock = killed.elapsed();
    assert!(parts >= 2, "{parts} parts");
    assert!(redlock < TAKEOVER, "redlock: taken over after {redlock:?}");
    eprintln!("taken over after a kill -9: blocking {blocking:?}, redlock {redlock:?}");
}

/// A waiter for the plain lock `name` that asks again when a call fails (no answer while Redis
/// is paused or down), as a service would.
fn retrying_waiter(
    client: &ferrisson::Client,
    name: &str,
) -> tokio::task::JoinHandle<ferrisson::Result<u64>> {
    let (client, name) = (client.clone(), name.to_owned());
    tokio::spawn(async move {
        loop {
            match wait_for(&client, "lock", &name).await {
                Err(e) if !matches!(e, ferrisson::Error::WrongType { .. }) => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                done => return done,
            }
        }
    })
}

/// A child process holding the plain lock `name`, and a [`retrying_waiter`] for it here.
async fn held_elsewhere(
    server: &RedisServer,
    client: &ferrisson::Client,
    name: &str,
) -> (
    HolderProcess,
    tokio::task::JoinHandle<ferrisson::Result<u64>>,
) {
    let mut holder = HolderProcess::spawn(server, name, LEASE_MS, "lock");
    holder.locked(Duration::from_secs(10)).await;
    (holder, retrying_waiter(client, name))
}

/// A live holder waits for: its lock is not taken while it lives, and it is not told lost.
async fn assert_kept(
    holder: &mut HolderProcess,
    waiter: &tokio::task::JoinHandle<ferrisson::Result<u64>>,
    what: &str,
) {
    assert!(
        !waiter.is_finished(),
        "{what}: the waiter took a live holder's lock"
    );
    // The holder exits (code 3) when told its hold is lost.
    let exited = tokio::time::timeout(
        Duration::from_millis(100),
        holder.exit_code(Duration::from_secs(3600)),
    );
    assert!(
        exited.await.is_err(),
        "{what}: the holder was told its hold is lost"
    );
}

/// Redis paused for 20 s (SIGSTOP): nobody can take anything over meanwhile, and no connection
/// drops. The holder keeps its lock, and after the pause the waiter still waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_paused_for_20s_costs_the_holder_nothing() {
    let server = RedisServer::start();
    let client = support::builder(&server)
        .response_timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    let (mut holder, waiter) = held_elsewhere(&server, &client, "paused:redis").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    server.pause();
    tokio::time::sleep(Duration::from_secs(20)).await;
    server.resume();
    // The waiter looks again and again after the pause; the holder confirms.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_kept(&mut holder, &waiter, "paused redis").await;
    // And it is still a holder whose death frees the lock in seconds.
    holder.kill().await;
    let killed = Instant::now();
    tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("taken over")
        .unwrap()
        .unwrap();
    assert!(killed.elapsed() < TAKEOVER, "after {:?}", killed.elapsed());
}

/// A holder process stopped (SIGSTOP, as a runtime that does not run): its connections stay
/// open, so its presence stands, and it keeps its lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_holder_process_keeps_its_lock() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let (mut holder, waiter) = held_elsewhere(&server, &client, "stopped:holder").await;
    holder.stop();
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert!(
        !waiter.is_finished(),
        "the waiter took a stopped holder's lock"
    );
    holder.resume();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_kept(&mut holder, &waiter, "stopped holder").await;
}

/// The server closes the holder's connections again and again (`CLIENT KILL TYPE pubsub`, then
/// `normal`, in turn); each comes back at once. The holder keeps its lock and is never told
/// lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_that_drop_and_come_back_cost_nothing() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let (mut holder, waiter) = held_elsewhere(&server, &client, "dropped:holder").await;
    let mut raw = server.raw().await;
    for round in 0..8 {
        tokio::time::sleep(Duration::from_millis(700)).await;
        // The subscribed connections, then every other one (the confirmations' included; not
        // this one).
        let kind = if round % 2 == 0 { "pubsub" } else { "normal" };
        let killed: i64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg(kind)
            .arg("SKIPME")
            .arg("yes")
            .query_async(&mut raw)
            .await
            .unwrap();
        assert!(killed >= 1, "{kind} connections were killed");
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_kept(&mut holder, &waiter, "dropped connections").await;
}

/// A holder through a proxy, a waiter connected directly; `wait` into the wait the proxy
/// switches to `mode`. Answers how long after that the holder was told its hold is lost, and
/// the waiter got the lock.
async fn cut_off(
    name: &str,
    lease: Duration,
    wait: Duration,
    mode: support::Mode,
) -> (Duration, Duration) {
    let server = RedisServer::start();
    let client = client(&server).await;
    let proxy = support::Proxy::start(server.port()).await;
    let cut_off = support::builder_for(&proxy.url())
        .watchdog_timeout(lease)
        .build()
        .await
        .unwrap();
    let guard = cut_off.get_lock(name).lock().await.unwrap();
    let lost = tokio::spawn(async move {
        guard.lost().await;
        Instant::now()
    });
    let waiter = {
        let (client, name) = (client.clone(), name.to_owned());
        tokio::spawn(async move {
            let guard = client.get_lock(&name).lock().await?;
            Ok::<_, ferrisson::Error>(Instant::now()).inspect(|_| drop(guard))
        })
    };
    tokio::time::sleep(wait).await;
    proxy.set(mode);
    let cut = Instant::now();
    let granted = tokio::time::timeout(lease * 3, waiter)
        .await
        .expect("granted")
        .unwrap()
        .unwrap();
    let lost = tokio::time::timeout(Duration::from_secs(1), lost)
        .await
        .expect("the holder was told")
        .unwrap();
    assert!(
        lost < granted,
        "{name}: told lost {:?} after the grant",
        lost - granted
    );
    (lost - cut, granted - cut)
}

/// A holder cut off for good (its connections reset, new ones refused) cannot confirm its
/// presence: it is told its hold is lost before the waiter, which finds it gone, gets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_cut_off_hears_lost_before_its_lock_is_taken_over() {
    let (lost, granted) = cut_off(
        "cut:holder",
        Duration::from_secs(30),
        Duration::from_secs(1),
        support::Mode::Reset,
    )
    .await;
    eprintln!("cut off: told lost after {lost:?}, taken over after {granted:?}");
    assert!(
        granted < Duration::from_secs(4),
        "taken over after {granted:?}"
    );
}

/// Sends `signal` to process `pid`.
fn signal(pid: u32, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .expect("the kill command runs");
    assert!(status.success(), "kill {signal} {pid}");
}

/// Every way a process ends without giving its holds back, measured from the moment it ended
/// to another process's grant: the kernel closes its connections either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_hard_end_of_a_holder_frees_its_lock_within_3s() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let mut report = Vec::new();
    for end in ["SIGKILL", "SIGTERM", "SIGINT", "abort"] {
        let name = format!("ended:{end}");
        let kind = if end == "abort" {
            "abort-holding"
        } else {
            "lock"
        };
        let mut holder = HolderProcess::spawn(&server, &name, LEASE_MS, kind);
        holder.locked(Duration::from_secs(10)).await;
        let waiter = {
            let (client, name) = (client.clone(), name.clone());
            tokio::spawn(async move { wait_for(&client, "lock", &name).await })
        };
        if end != "abort" {
            tokio::time::sleep(Duration::from_millis(100)).await;
            signal(holder.pid().expect("it runs"), &format!("-{}", &end[3..]));
        }
        // Nothing installed: the default action of each ends the process at once.
        let code = holder.exit_code(Duration::from_secs(5)).await;
        assert_eq!(code, None, "{end}: ended by a signal, not an exit");
        let ended = Instant::now();
        tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .unwrap_or_else(|_| panic!("{end}: not taken over within 10 s"))
            .unwrap()
            .unwrap();
        let took = ended.elapsed();
        assert!(took < TAKEOVER, "{end}: taken over after {took:?}");
        report.push(format!("{end} {took:?}"));
    }
    eprintln!("taken over after the holder's end: {}", report.join(", "));
}

/// A holder cut off without a FIN (a lost machine, a cut network: here a proxy that holds every
/// byte back and keeps the connections open): Redis still sees its subscription, so nothing is
/// taken over early; its lease frees the lock, as before, and it is told lost first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_cut_off_without_a_fin_keeps_the_lease_rule() {
    let lease = Duration::from_secs(5);
    let (lost, granted) = cut_off(
        "blackholed",
        lease,
        Duration::from_millis(500),
        support::Mode::Blackhole,
    )
    .await;
    eprintln!("cut off without a FIN: told lost after {lost:?}, granted after {granted:?}");
    // The lease counts from the last renewal, up to a third of it before the cut.
    assert!(granted > lease / 2, "freed early, after {granted:?}");
}

/// A Redis restart quicker than the grace (SIGKILL, then the same server back with its AOF):
/// the holder's connections drop and come back, and it keeps its lock; nobody took it meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_restart_within_the_grace_costs_the_holder_nothing() {
    let mut server = RedisServer::start_persistent();
    let client = client(&server).await;
    let (mut holder, waiter) = held_elsewhere(&server, &client, "restarted").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let down = Instant::now();
    server.restart_keeping_data();
    eprintln!("redis was down for {:?}", down.elapsed());
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_kept(&mut holder, &waiter, "a quick restart").await;
}

/// The holder's connections cut (reset, new ones refused) for 1.5 s, less than the grace, then
/// back: it keeps its lock, and the waiter, which found it absent meanwhile, does not take it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_cut_for_less_than_the_grace_cost_nothing() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let proxy = support::Proxy::start(server.port()).await;
    let holder = support::builder_for(&proxy.url()).build().await.unwrap();
    let guard = holder.get_lock("cut:briefly").lock().await.unwrap();
    let waiter = {
        let client = client.clone();
        tokio::spawn(async move { wait_for(&client, "lock", "cut:briefly").await })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    proxy.set(support::Mode::Reset);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    proxy.set(support::Mode::Pass);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!guard.is_lost(), "the holder was told its hold is lost");
    assert!(
        !waiter.is_finished(),
        "the waiter took a live holder's lock"
    );
    guard.unlock().await.unwrap();
    tokio::time::timeout(Duration::from_secs(2), waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}
