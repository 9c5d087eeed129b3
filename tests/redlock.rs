//! RedLock over independent servers: exhaustive quorum, minority and majority faults through a
//! fault-injecting proxy, late replies, racing contenders, a killed holder process.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrisson::{Error, RedLock};
use redis::AsyncCommands;
use support::{Checker, HolderProcess, Mode, Proxy, RedisServer, builder, join_within};

const FOREIGN: &str = "9b2c7a63-2f7e-4f0b-9a55-5f3c0e6b1d11:1";

struct Cluster {
    servers: Vec<RedisServer>,
    proxies: Vec<Proxy>,
}

impl Cluster {
    async fn start(n: usize) -> Cluster {
        let servers: Vec<RedisServer> = (0..n).map(|_| RedisServer::start()).collect();
        let mut proxies = Vec::new();
        for s in &servers {
            proxies.push(Proxy::start(s.port()).await);
        }
        Cluster { servers, proxies }
    }

    /// One client per instance, through its proxy.
    async fn clients(&self, lease: Duration) -> Vec<ferrisson::Client> {
        let mut clients = Vec::new();
        for p in &self.proxies {
            let client = support::builder_for(&p.url())
                .watchdog_timeout(lease)
                .response_timeout(Duration::from_millis(500))
                .connection_timeout(Duration::from_millis(500))
                .build()
                .await
                .unwrap();
            clients.push(client);
        }
        clients
    }

    /// Fields of `name` on every server that belong to `client`.
    async fn ours(&self, name: &str, client: &ferrisson::Client) -> usize {
        let mut n = 0;
        for s in &self.servers {
            // A killed server holds nothing.
            let Ok(mut conn) = redis::Client::open(s.url())
                .unwrap()
                .get_multiplexed_async_connection()
                .await
            else {
                continue;
            };
            let fields: Vec<String> = conn.hkeys(name).await.unwrap_or_default();
            n += fields
                .iter()
                .filter(|f| f.starts_with(&client.id().to_string()))
                .count();
        }
        n
    }
}

fn redlock(clients: &[ferrisson::Client], name: &str) -> RedLock {
    RedLock::new(clients.iter().map(|c| c.get_lock(name)))
}

/// The default instance timeout is a twentieth of the lease: 30 ms for these tests' 600 ms
/// leases, which one scheduling stall of a debug build on a loaded machine can exceed on every
/// instance at once (and a minority answering fails the acquire). Tests that are not about the
/// timeout give each instance more.
const SLOW_MACHINE_TIMEOUT: Duration = Duration::from_millis(250);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quorum_is_exact_for_every_subset_of_busy_instances() {
    for n in [3usize, 5] {
        let cluster = Cluster::start(n).await;
        let clients = cluster.clients(Duration::from_secs(10)).await;
        for busy in 0u32..(1 << n) {
            let name = format!("q{n}-{busy}");
            for (i, s) in cluster.servers.iter().enumerate() {
                if busy & (1 << i) != 0 {
                    let _: () = s.raw().await.hset(&name, FOREIGN, 1).await.unwrap();
                    let _: () = s.raw().await.pexpire(&name, 60_000).await.unwrap();
                }
            }
            let free = n - busy.count_ones() as usize;
            let got = redlock(&clients, &name).try_lock().await.unwrap();
            assert_eq!(got.is_some(), free > n / 2, "n={n} busy={busy:b}");
            match got {
                Some(guard) => {
                    assert_eq!(guard.granted(), free);
                    guard.unlock().await.unwrap();
                }
                None => {
                    for c in &clients {
                        assert_eq!(
                            cluster.ours(&name, c).await,
                            0,
                            "n={n} busy={busy:b}: a part was left"
                        );
                    }
                }
            }
            // The foreign holds are untouched.
            for (i, s) in cluster.servers.iter().enumerate() {
                let theirs: bool = s.raw().await.hexists(&name, FOREIGN).await.unwrap();
                assert_eq!(theirs, busy & (1 << i) != 0);
            }
        }
    }
}

async fn timed_acquire(
    lock: &RedLock,
) -> (Duration, Result<Option<ferrisson::RedLockGuard>, Error>) {
    let started = Instant::now();
    let result = lock.try_lock().await;
    (started.elapsed(), result)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minority_down_still_acquires_within_one_instance_timeout() {
    let mut cluster = Cluster::start(5).await;
    let clients = cluster.clients(Duration::from_secs(2)).await;
    let instance_timeout = Duration::from_millis(400);
    let lock = redlock(&clients, "minority").instance_timeout(instance_timeout);

    let (all_up, got) = timed_acquire(&lock).await;
    got.unwrap().expect("all up").unlock().await.unwrap();

    // Two instances that never answer, one paused and one blackholed: each costs a whole
    // instance timeout. Asked side by side that is one timeout; one after the other, two.
    cluster.servers[0].pause();
    cluster.proxies[1].set(Mode::Blackhole);
    let (two_silent, got) = timed_acquire(&lock).await;
    let guard = got.unwrap().expect("3 of 5 is a majority");
    assert_eq!(guard.granted(), 3);
    assert!(
        two_silent < instance_timeout * 7 / 4,
        "waited {two_silent:?}: the timeouts added up"
    );
    let _ = guard.unlock().await; // the silent instances report errors
    cluster.servers[0].resume();
    cluster.proxies[1].set(Mode::Pass);

    // Instances that fail at once (killed, connections cut) cost no timeout at all; the
    // silent ones' late grants have been or are being taken back meanwhile, so a majority of
    // the rest is what counts.
    cluster.servers[0].kill();
    cluster.proxies[3].set(Mode::Reset);
    let (killed_and_reset, got) = timed_acquire(&lock).await;
    let guard = got.unwrap().expect("3 of 5 is a majority");
    assert!(guard.granted() >= 3);
    let _ = guard.unlock().await;
    cluster.proxies[3].set(Mode::Pass);
    let one_down = {
        let lock2 = redlock(&clients, "minority-one").instance_timeout(instance_timeout);
        let (t, got) = timed_acquire(&lock2).await;
        let _ = got.unwrap().expect("one down of five").unlock().await;
        t
    };
    eprintln!(
        "redlock acquire latency, N=5: all up {all_up:?}, one down (killed) {one_down:?}, \
         two silent (paused + blackholed) {two_silent:?}, two down (killed + reset) \
         {killed_and_reset:?}"
    );
    assert!(killed_and_reset < instance_timeout * 7 / 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_majority_down_fails_fast_and_leaves_nothing_behind() {
    let mut cluster = Cluster::start(3).await;
    let clients = cluster.clients(Duration::from_secs(2)).await;
    let lock = redlock(&clients, "majority").instance_timeout(Duration::from_millis(100));
    cluster.servers[0].kill();
    // The command runs on instance 1, its reply never comes back.
    cluster.proxies[1].set(Mode::DropReplies);
    let started = Instant::now();
    let err = lock.lock().await.unwrap_err();
    let took = started.elapsed();
    assert!(
        matches!(
            err,
            // The live instance answers unless it too is slower than the timeout.
            Error::QuorumNotReached {
                answered: 0 | 1,
                needed: 2,
                total: 3,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        took < Duration::from_millis(500),
        "lock() should fail fast, took {took:?}"
    );
    let shown = err.to_string();
    assert!(shown.contains("quorum"), "{shown}");
    // Each instance that did not answer is named: its lock and its server (through its proxy).
    for proxy in &cluster.proxies[..2] {
        assert!(
            shown.contains(&format!("lock `majority` on 127.0.0.1:{}", proxy.port())),
            "{shown}"
        );
    }
    assert!(shown.contains("instance timeout"), "{shown}");
    // The one live instance granted and was released; instance 1 granted without telling us,
    // and the repair sent after it (which runs there too) took the grant back.
    let live = &clients[2];
    let blackholed = &clients[1];
    assert!(
        support::eventually(Duration::from_secs(3), || async {
            cluster.ours("majority", live).await + cluster.ours("majority", blackholed).await == 0
        })
        .await,
        "a part of the failed attempt was left behind"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_later_than_the_lease_are_not_a_grant() {
    let cluster = Cluster::start(3).await;
    let clients = cluster.clients(Duration::from_secs(2)).await;
    // The replies come after the lease has passed but within the clients' 500 ms response
    // timeout, so every instance answers, too late.
    let lease = Duration::from_millis(250);
    let lock = redlock(&clients, "late").instance_timeout(Duration::from_secs(2));
    for p in &cluster.proxies {
        p.set(Mode::Delay(Duration::from_millis(300)));
    }
    let got = lock
        .try_lock_for(Duration::ZERO, Some(lease))
        .await
        .unwrap();
    assert!(got.is_none(), "granted with a negative validity");
    for p in &cluster.proxies {
        p.set(Mode::Pass);
    }
    for c in &clients {
        assert!(
            support::eventually(Duration::from_secs(2), || async {
                cluster.ours("late", c).await == 0
            })
            .await
        );
    }
    // With replies on time the same call succeeds and the validity is positive.
    let guard = lock
        .try_lock_for(Duration::ZERO, Some(lease))
        .await
        .unwrap()
        .expect("on time");
    let left = guard
        .validity_deadline()
        .saturating_duration_since(std::time::Instant::now());
    assert!(left > Duration::ZERO && left <= lease, "{left:?}");
    assert!(!guard.is_lost());
    tokio::time::timeout(lease * 2, guard.lost())
        .await
        .expect("a fixed lease runs out");
    assert!(guard.is_lost());
}

/// The grants of an attempt refused for its spent validity are gone from every instance when
/// the call returns. The servers are frozen while the acquire is on its way, so each grant
/// starts on its server well after the client's clock started the lease: the client counts
/// those leases run out (the reply came past them) while each server still holds its grant
/// for most of a lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_refused_for_a_spent_validity_are_released_before_the_call_returns() {
    let cluster = Cluster::start(3).await;
    let clients = cluster.clients(Duration::from_secs(2)).await;
    let lease = Duration::from_millis(250);
    let frozen = Duration::from_millis(300);
    let lock = redlock(&clients, "spent").instance_timeout(Duration::from_secs(2));
    let mut raws = Vec::new();
    for s in &cluster.servers {
        raws.push(s.raw().await);
    }
    for s in &cluster.servers {
        s.pause();
    }
    let attempt = tokio::spawn(async move { lock.try_lock_for(Duration::ZERO, Some(lease)).await });
    tokio::time::sleep(frozen).await;
    for s in &cluster.servers {
        s.resume();
    }
    let got = attempt.await.unwrap().unwrap();
    // At once, before a background release could run: every instance at the same moment.
    let held =
        futures::future::join_all(raws.iter_mut().map(|raw| raw.exists::<_, bool>("spent"))).await;
    let held: Vec<bool> = held.into_iter().map(Result::unwrap).collect();
    assert!(got.is_none(), "granted with a spent validity");
    assert_eq!(
        held, [false; 3],
        "an instance still held a refused grant after the call returned"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_contenders_never_hold_together_and_all_get_turns() {
    let cluster = Cluster::start(3).await;
    let checker = Arc::new(Checker::default());
    // Instance tokens are not comparable across instances (a majority can be any two of the
    // three), so the checker gets a sequence number taken while holding.
    let sequence = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let sequence = sequence.clone();
        let clients = cluster.clients(Duration::from_secs(2)).await;
        let checker = checker.clone();
        tasks.push(tokio::spawn(async move {
            let lock = redlock(&clients, "race")
                .retry_delay(Duration::from_millis(20))
                .instance_timeout(SLOW_MACHINE_TIMEOUT);
            let mut wins = 0;
            for _ in 0..50 {
                let Some(guard) = lock
                    .try_lock_for(Duration::from_secs(5), None)
                    .await
                    .unwrap()
                else {
                    continue;
                };
                let start = checker.enter();
                assert!(!guard.is_lost());
                let seq = sequence.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                checker.exit(seq, start);
                wins += 1;
                guard.unlock().await.unwrap();
            }
            wins
        }));
    }
    let wins = join_within(Duration::from_secs(60), tasks, "contenders").await;
    eprintln!("redlock race: wins per contender {wins:?}");
    assert!(
        wins.iter().all(|w| *w > 0),
        "a contender never won: {wins:?}"
    );
    let holds = checker.verify();
    assert_eq!(holds.len(), wins.iter().sum::<usize>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holder_process_frees_the_redlock_after_its_lease() {
    let cluster = Cluster::start(3).await;
    let lease = Duration::from_millis(600);
    let urls: Vec<String> = cluster.servers.iter().map(|s| s.url()).collect();
    let mut holder = HolderProcess::spawn_url(
        &urls.join(","),
        "orphan",
        lease.as_millis() as u64,
        "redlock",
    );
    holder.locked(Duration::from_secs(10)).await;
    let clients = cluster.clients(lease).await;
    let lock = redlock(&clients, "orphan").instance_timeout(SLOW_MACHINE_TIMEOUT);
    assert!(
        lock.try_lock_for(lease * 2, None).await.unwrap().is_none(),
        "the live holder kept it"
    );
    holder.kill().await;
    let killed = Instant::now();
    let guard = tokio::time::timeout(lease * 4, lock.lock())
        .await
        .expect("freed by the lease")
        .unwrap();
    // The dead hold runs out within one lease of the kill; then one retry pause (at most
    // 100 ms) and one attempt (at most one instance timeout), plus scheduling.
    assert!(
        killed.elapsed() <= lease + Duration::from_millis(100) + SLOW_MACHINE_TIMEOUT * 2,
        "took {:?}",
        killed.elapsed()
    );
    // A majority suffices: the instance whose copy of the dead hold expires last may still
    // refuse the winning attempt, so two or three grants are both correct.
    assert!(guard.granted() >= 2, "granted {}", guard.granted());
    guard.unlock().await.unwrap();
    // The dead holder's copy on the last instance runs out within its lease too.
    for s in &cluster.servers {
        let mut conn = s.raw().await;
        let left = Instant::now();
        loop {
            let exists: bool = conn.exists("orphan").await.unwrap();
            if !exists {
                break;
            }
            assert!(
                killed.elapsed() <= lease * 3,
                "a dead hold outlived its lease on {} (waited {:?})",
                s.url(),
                left.elapsed()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_keeps_a_redlock_and_a_lost_majority_loses_it() {
    let cluster = Cluster::start(3).await;
    let lease = Duration::from_millis(600);
    let clients = cluster.clients(lease).await;
    let guard = redlock(&clients, "kept")
        .instance_timeout(SLOW_MACHINE_TIMEOUT)
        .lock()
        .await
        .unwrap();
    tokio::time::sleep(lease * 2).await;
    assert!(!guard.is_lost(), "renewed on every instance");
    assert!(guard.validity_deadline() > std::time::Instant::now());
    // Two of three instances drop the key: no majority left.
    for s in &cluster.servers[..2] {
        let _: () = s.raw().await.del("kept").await.unwrap();
    }
    tokio::time::timeout(lease, guard.lost())
        .await
        .expect("lost at the next renewal");
    assert!(
        guard.unlock().await.is_err(),
        "two parts report their lost lease"
    );
}

/// A release that fails names the instance: the lock's name and the address its client talks
/// to (here the proxy in front of the dead server).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_release_names_the_part_and_its_server() {
    let mut cluster = Cluster::start(3).await;
    let clients = cluster.clients(Duration::from_secs(10)).await;
    let guard = redlock(&clients, "named")
        .instance_timeout(SLOW_MACHINE_TIMEOUT)
        .lock()
        .await
        .unwrap();
    cluster.servers[0].kill();
    let err = guard.unlock().await.unwrap_err();
    let address = format!("127.0.0.1:{}", cluster.proxies[0].port());
    match &err {
        Error::ReleasedOnMajority {
            released: 2,
            granted: 3,
            failures: errors,
        } => match errors.as_slice() {
            [
                Error::Part {
                    name,
                    address: at,
                    error,
                },
            ] => {
                assert_eq!((name.as_str(), at), ("named", &address));
                assert!(matches!(**error, Error::Redis(_)), "{error:?}");
            }
            other => panic!("one failure, of the dead instance: {other:?}"),
        },
        other => panic!("{other:?}"),
    }
    let shown = err.to_string();
    assert!(
        shown.starts_with("the RedLock is released on a majority of its instances (2 of the 3"),
        "{shown}"
    );
    assert!(
        shown.contains(&format!("lock `named` on {address}: ")),
        "{shown}"
    );
}

/// One instance of three paused (it never answers): `unlock` says the lock is released on a
/// majority, and another RedLock over the same instances takes it at once (granted by the two
/// that answer). One of those paused too: fewer than a majority released, `Error::Multiple`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_on_a_majority_says_the_lock_is_free() {
    let cluster = Cluster::start(3).await;
    let clients = cluster.clients(Duration::from_secs(10)).await;
    let others = cluster.clients(Duration::from_secs(10)).await;
    let guard = redlock(&clients, "majority")
        .instance_timeout(SLOW_MACHINE_TIMEOUT)
        .lock()
        .await
        .unwrap();
    cluster.servers[2].pause();
    let started = Instant::now();
    let err = guard.unlock().await.unwrap_err();
    let took = started.elapsed();
    eprintln!("unlock with 1 of 3 paused took {took:?}: {err}");
    match &err {
        Error::ReleasedOnMajority {
            released: 2,
            granted: 3,
            failures,
        } => assert_eq!(failures.len(), 1, "{failures:?}"),
        other => panic!("{other:?}"),
    }
    let again = redlock(&others, "majority")
        .instance_timeout(SLOW_MACHINE_TIMEOUT)
        .try_lock()
        .await
        .unwrap()
        .expect("free on a majority: another RedLock takes it");
    cluster.servers[1].pause();
    let err = again.unlock().await.unwrap_err();
    cluster.servers[1].resume();
    cluster.servers[2].resume();
    match &err {
        // Granted by the two that answered; one of them now silent.
        Error::Multiple { errors } => assert_eq!(errors.len(), 1, "{errors:?}"),
        other => panic!("two of three paused: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_redlock_is_invalid() {
    let err = RedLock::new(Vec::<ferrisson::RLock>::new())
        .try_lock()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)));
    let server = RedisServer::start();
    let client = builder(&server).build().await.unwrap();
    let lock = RedLock::new([client.get_lock("x")]);
    assert_eq!(lock.quorum(), 1);
    assert!(matches!(
        lock.try_lock_for(Duration::ZERO, Some(Duration::ZERO))
            .await,
        Err(Error::InvalidArgument(_))
    ));
}
