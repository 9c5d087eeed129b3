//! Running under a Redis ACL user: the rule of the README's section "Running under a Redis ACL
//! user" (read from README.md, so the documented lines are the ones tested) lets every object
//! kind work, waiters woken by message; a user missing one permission gets
//! `Error::PermissionDenied` naming what was refused, within a bounded time, never a hang.

mod support;

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use ferrisson::{Client, Error, MultiLock};
use redis::AsyncCommands;
use support::{RedisServer, builder_for, join_within};

/// The user name and password of the README's rule.
const USER: &str = "app-locks";
const PASSWORD: &str = "change-me";

/// Well under every re-check a client of [`client_as`] would fall back to (60 s; the holder's
/// 30 s lease): a waiter back within this was woken by a message.
const BY_MESSAGE: Duration = Duration::from_secs(8);

/// How long a refusal may take to surface: bounded, and far from a hang.
const REFUSED_WITHIN: Duration = Duration::from_secs(5);

/// The README's `ACL SETUSER app-locks ...` lines, as their rule tokens.
fn readme_rule() -> Vec<Vec<String>> {
    let readme = include_str!("../README.md");
    let section = readme
        .split("## Running under a Redis ACL user")
        .nth(1)
        .expect("the README has the ACL section");
    let block = section
        .split("```text")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("the section opens with the rule's code block");
    let prefix = format!("ACL SETUSER {USER} ");
    let lines: Vec<Vec<String>> = block
        .lines()
        .filter_map(|line| line.strip_prefix(&prefix))
        .map(|rule| rule.split_whitespace().map(str::to_owned).collect())
        .collect();
    assert!(lines.len() >= 5, "the rule's lines: {lines:?}");
    lines
}

/// Creates `user` with the README's rule, without the tokens in `without` (each must be in the
/// rule).
async fn create_user(server: &RedisServer, user: &str, without: &[&str]) {
    let mut admin = server.raw().await;
    let mut left_out = BTreeSet::new();
    for line in readme_rule() {
        let mut cmd = redis::cmd("ACL");
        cmd.arg("SETUSER").arg(user);
        for token in line {
            if without.contains(&token.as_str()) {
                left_out.insert(token);
            } else {
                cmd.arg(token);
            }
        }
        let () = cmd.query_async(&mut admin).await.expect("ACL SETUSER");
    }
    assert_eq!(left_out.len(), without.len(), "left out: {left_out:?}");
}

fn url_of(server: &RedisServer, user: &str) -> String {
    format!("redis://{user}:{PASSWORD}@127.0.0.1:{}/", server.port())
}

/// A client logged in as `user`, whose waiters wake only by message within a test's time: the
/// re-check interval is 60 s and a fair waiter's nap 20 s (a third of the queue timeout).
async fn client_as(server: &RedisServer, user: &str) -> Result<Client, Error> {
    builder_as(server, user).build().await
}

/// The builder of [`client_as`].
fn builder_as(server: &RedisServer, user: &str) -> ferrisson::ClientBuilder {
    builder_for(&url_of(server, user))
        .recheck_interval(Duration::from_secs(60))
        .fair_lock_queue_timeout(Duration::from_secs(60))
}

/// Every refusal Redis logged (`ACL LOG`), as "reason object".
async fn acl_log(server: &RedisServer) -> Vec<String> {
    let mut admin = server.raw().await;
    let entries: Vec<HashMap<String, redis::Value>> = redis::cmd("ACL")
        .arg("LOG")
        .query_async(&mut admin)
        .await
        .unwrap();
    let text = |entry: &HashMap<String, redis::Value>, field: &str| {
        entry
            .get(field)
            .and_then(|v| <String as redis::FromRedisValue>::from_redis_value(v.clone()).ok())
            .unwrap_or_default()
    };
    entries
        .iter()
        .map(|e| format!("{} {}", text(e, "reason"), text(e, "object")))
        .collect()
}

/// Asserts that Redis logged (`ACL LOG`) a refusal of the kind `reason` (`command`, `key` or
/// `channel`) whose object contains `object`. What was refused is checked in the server's own
/// record, whose fields every server (Redis 6.2, 7, Valkey) fills alike, not in its wording of
/// the refusal, which differs between them.
async fn assert_logged(server: &RedisServer, reason: &str, object: &str) {
    let refusals = acl_log(server).await;
    assert!(
        refusals.iter().any(|r| r
            .split_once(' ')
            .is_some_and(|(why, what)| why == reason && what.contains(object))),
        "no {reason} refusal of {object} in ACL LOG: {refusals:?}"
    );
}

/// Runs `fut` within `within`, reporting how long it took.
async fn timed<T>(within: Duration, what: &str, fut: impl Future<Output = T>) -> (T, Duration) {
    let started = Instant::now();
    let out = tokio::time::timeout(within, fut)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within {within:?}"));
    (out, started.elapsed())
}

/// Spawns `wait`, lets it reach its wait (`channel` has `subscribers` subscribed connections),
/// runs `release`, and checks the waiter returns by message.
async fn woken_by_message<T: Send + 'static>(
    server: &RedisServer,
    what: &str,
    channel: &str,
    subscribers: i64,
    wait: impl Future<Output = T> + Send + 'static,
    release: impl Future<Output = ()>,
) -> T {
    let waiter = tokio::spawn(wait);
    server.wait_subscribers(channel, subscribers).await;
    // The waiter's attempt after subscribing has its answer and naps.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiter.is_finished(), "{what}: the waiter did not wait");
    let released = Instant::now();
    release.await;
    let out = join_within(BY_MESSAGE, [waiter], what).await.pop().unwrap();
    eprintln!("{what}: woken {:?} after the release", released.elapsed());
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_object_kind_runs_under_the_documented_rule() {
    let server = RedisServer::start();
    create_user(&server, USER, &[]).await;
    // Without takeover: its presence confirmations count channels too, and would count among
    // the handover's below (takeover under the rule: `a_killed_holder_is_taken_over_...`).
    let connect = || builder_as(&server, USER).takeover_grace(None).build();
    let a = connect().await.expect("connects as the user");
    let b = connect().await.expect("connects as the user");
    let mut admin = server.raw().await;
    let mut numsub_calls = 0;

    for name in ["app:orders", "app:{user:1}:cart"] {
        // RLock: uncontended, nested (in the hold's scope and by reenter), inspected, forced
        // open.
        let lock = a.get_lock(name);
        let first = lock.lock().await.unwrap();
        let again = first.scope(lock.lock()).await.unwrap();
        let third = first.reenter().await.unwrap();
        assert_eq!(first.hold_count().await.unwrap(), 3);
        assert_eq!(first.scope(lock.hold_count()).await.unwrap(), 3);
        assert!(lock.remaining_ttl().await.unwrap().is_some());
        third.unlock().await.unwrap();
        again.unlock().await.unwrap();
        first.unlock().await.unwrap();
        assert!(!lock.is_locked().await.unwrap());
        let held = lock.lock_with_lease(Duration::from_secs(20)).await.unwrap();
        assert!(lock.force_unlock().await.unwrap());
        assert!(matches!(held.unlock().await, Err(Error::LockLost { .. })));

        // A waiter of another client, woken by the unlock message.
        let channel = if name.contains('{') {
            format!("redisson_lock__channel:{name}")
        } else {
            format!("redisson_lock__channel:{{{name}}}")
        };
        let held = a.get_lock(name).lock().await.unwrap();
        let other = b.get_lock(name);
        let guard = woken_by_message(
            &server,
            "RLock waiter",
            &channel,
            1,
            async move { other.lock().await.unwrap() },
            async { held.unlock().await.unwrap() },
        )
        .await;
        guard.unlock().await.unwrap();

        // Handover between two waiters of one client (PUBSUB NUMSUB in the release script).
        let (h1, h2, h3) = (a.get_lock(name), a.get_lock(name), a.get_lock(name));
        let held = h1.lock().await.unwrap();
        let w2 = tokio::spawn(async move { h2.lock().await.unwrap() });
        let w3 = tokio::spawn(async move { h3.lock().await.unwrap() });
        server.wait_subscribers(&channel, 1).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        // From here to the handovers' end the test sends no PUBSUB of its own: Redis 6.2 counts
        // every PUBSUB subcommand as `pubsub`, 7 and Valkey as `pubsub|numsub` and so on.
        server.reset_stats().await;
        held.unlock().await.unwrap();
        let mut waiters = vec![w2, w3];
        for handover in 1..=2 {
            let done = || {
                let done = waiters.iter().any(|w| w.is_finished());
                async move { done }
            };
            assert!(
                support::eventually(BY_MESSAGE, done).await,
                "handover {handover} never came"
            );
            let i = waiters.iter().position(|w| w.is_finished()).unwrap();
            let guard = waiters.remove(i).await.unwrap();
            guard.unlock().await.unwrap();
        }
        numsub_calls += server.calls("pubsub|numsub").await + server.calls("pubsub").await;

        // Fair lock: the first waiter is told on its own channel.
        let fair = a.get_fair_lock(name);
        let held = fair.lock().await.unwrap();
        let other = b.get_fair_lock(name);
        let waiter = tokio::spawn(async move { other.lock().await.unwrap() });
        assert!(
            support::eventually(Duration::from_secs(5), || async {
                let channels: Vec<String> = redis::cmd("PUBSUB")
                    .arg("CHANNELS")
                    .arg(format!("{channel}:*"))
                    .query_async(&mut server.raw().await)
                    .await
                    .unwrap();
                !channels.is_empty()
            })
            .await,
            "the fair waiter subscribes its own channel"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
        let released = Instant::now();
        held.unlock().await.unwrap();
        let guard = join_within(BY_MESSAGE, [waiter], "fair waiter")
            .await
            .pop()
            .unwrap();
        eprintln!(
            "fair waiter: woken {:?} after the release",
            released.elapsed()
        );
        guard.unlock().await.unwrap();

        // A fair waiter that gives up leaves the queue, and the one behind it moves up.
        let queue = channel.replace("redisson_lock__channel", "redisson_lock_queue");
        let queued = |n: i64| {
            let (server, queue) = (&server, &queue);
            async move {
                support::eventually(Duration::from_secs(5), || async {
                    let mut raw = server.raw().await;
                    raw.llen::<_, i64>(queue).await.unwrap() == n
                })
                .await
            }
        };
        let held = fair.lock().await.unwrap();
        let quitter = b.get_fair_lock(name);
        let quits = tokio::spawn(async move {
            quitter
                .try_lock_for(Duration::from_millis(1500), None)
                .await
                .unwrap()
        });
        assert!(queued(1).await);
        let other = b.get_fair_lock(name);
        let waiter = tokio::spawn(async move { other.lock().await.unwrap() });
        assert!(queued(2).await);
        let gave_up = join_within(Duration::from_secs(5), [quits], "quitter").await;
        assert!(gave_up[0].is_none());
        assert!(queued(1).await, "the waiter that gave up left the queue");
        held.unlock().await.unwrap();
        let guard = join_within(BY_MESSAGE, [waiter], "fair waiter behind")
            .await
            .pop()
            .unwrap();
        guard.unlock().await.unwrap();

        // Read-write lock: a reader waits for the writer; readers share; a writer waits for them.
        let rw_channel = channel.replace("redisson_lock__channel", "redisson_rwlock");
        let writer = a.get_read_write_lock(name);
        let write = writer.write_lock().lock().await.unwrap();
        let reader = b.get_read_write_lock(name);
        let read_b = woken_by_message(
            &server,
            "reader",
            &rw_channel,
            1,
            async move { reader.read_lock().lock().await.unwrap() },
            async { write.unlock().await.unwrap() },
        )
        .await;
        let read_a = writer.read_lock().lock().await.unwrap();
        read_a.unlock().await.unwrap();
        let writer_b = b.get_read_write_lock(name);
        let write_b = woken_by_message(
            &server,
            "writer",
            &rw_channel,
            1,
            async move { writer_b.write_lock().lock().await.unwrap() },
            async { read_b.unlock().await.unwrap() },
        )
        .await;
        write_b.unlock().await.unwrap();

        // Fenced lock: Redisson's per-name counter too.
        let fenced = a.get_fenced_lock(name);
        let (token, guard) = fenced.lock_and_get_token().await.unwrap();
        assert_eq!(fenced.token().await.unwrap(), Some(token));
        guard.unlock().await.unwrap();

        // Mutex.
        let mutex = a.get_mutex(name);
        let held = mutex.lock().await.unwrap();
        let other = b.get_mutex(name);
        let guard = woken_by_message(
            &server,
            "mutex waiter",
            &channel,
            1,
            async move { other.lock().await.unwrap() },
            async { held.unlock().await.unwrap() },
        )
        .await;
        guard.unlock().await.unwrap();

        // Semaphore: a waiter woken by the release message; the acquire records.
        let sem_name = format!("{name}:sem");
        let sem_channel = if name.contains('{') {
            format!("redisson_sc:{sem_name}")
        } else {
            format!("redisson_sc:{{{sem_name}}}")
        };
        let semaphore = a.get_semaphore(&sem_name);
        assert!(semaphore.try_set_permits(1).await.unwrap());
        semaphore.acquire(1).await.unwrap();
        let other = b.get_semaphore(&sem_name);
        woken_by_message(
            &server,
            "semaphore waiter",
            &sem_channel,
            1,
            async move { other.acquire(1).await.unwrap() },
            async { semaphore.release(1).await.unwrap() },
        )
        .await;
        let semaphore = a.get_semaphore(&sem_name);
        assert!(!semaphore.try_acquire(1).await.unwrap());
        assert_eq!(semaphore.add_permits(2).await.unwrap(), 2);
        assert!(
            semaphore
                .try_acquire_for(1, Duration::from_secs(1))
                .await
                .unwrap()
        );
        assert_eq!(semaphore.available_permits().await.unwrap(), 1);
        assert_eq!(semaphore.drain_permits().await.unwrap(), 1);

        // Permit-expirable semaphore: a waiter woken by the release message, renewal,
        // release by id, and revocation heard by message.
        let permit_name = format!("{name}:permits");
        let braced = |prefix: &str| {
            if name.contains('{') {
                format!("{prefix}:{permit_name}")
            } else {
                format!("{prefix}:{{{permit_name}}}")
            }
        };
        let permits = a.get_permit_expirable_semaphore(&permit_name);
        assert!(permits.try_set_permits(2).await.unwrap());
        let held = permits.acquire_many(2).await.unwrap();
        let other = b.get_permit_expirable_semaphore(&permit_name);
        let got = woken_by_message(
            &server,
            "permit waiter",
            &braced("redisson_sc"),
            1,
            async move { other.acquire().await.unwrap() },
            async { held.release().await.unwrap() },
        )
        .await;
        let revoke_channel = braced("ferrisson_revoke");
        let asker = a.get_permit_expirable_semaphore(&permit_name);
        let got = woken_by_message(
            &server,
            "revocation listener",
            &revoke_channel,
            1,
            async move {
                got.revocation_requested().await;
                got
            },
            async { assert_eq!(asker.request_revocation().await.unwrap(), 1) },
        )
        .await;
        let id = got.ids()[0].clone();
        permits.release_by_id(&id).await.unwrap();
        assert!(matches!(got.release().await, Err(Error::PermitLost { .. })));
        assert_eq!(permits.available_permits().await.unwrap(), 2);

        // A writer that readers must let in (writer preference).
        let rw_name = format!("{name}:prefer");
        let prefer = ferrisson::RwPolicy::PreferWriters;
        let reader = a.get_read_write_lock_with(&rw_name, prefer).read_lock();
        let read = reader.lock().await.unwrap();
        let writer = b.get_read_write_lock_with(&rw_name, prefer).write_lock();
        let waiting = tokio::spawn(async move {
            writer
                .try_lock_for(Duration::from_secs(10), None)
                .await
                .unwrap()
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        // A new reader of another task, or of this one outside the read's scope, is held back;
        // a read nested in the read's scope re-enters past the waiting writer.
        let late =
            support::Elsewhere::new(a.get_read_write_lock_with(&rw_name, prefer).read_lock());
        assert!(
            late.try_lock().await.unwrap().is_none(),
            "a waiting writer holds readers back"
        );
        assert!(reader.try_lock().await.unwrap().is_none());
        let nested = read
            .scope(reader.try_lock())
            .await
            .unwrap()
            .expect("a nested read re-enters past the waiting writer");
        nested.unlock().await.unwrap();
        read.unlock().await.unwrap();
        let write = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("the writer got in")
            .unwrap()
            .expect("within its wait");
        write.unlock().await.unwrap();

        // MultiLock over kinds of both clients.
        let multi = MultiLock::new([
            a.get_lock(name),
            b.get_fair_lock(&format!("{name}:fair")),
            a.get_read_write_lock(&format!("{name}:rw")).write_lock(),
            (*b.get_fenced_lock(&format!("{name}:fenced"))).clone(),
        ]);
        let guard = multi.lock().await.unwrap();
        assert!(!guard.is_lost());
        guard.unlock().await.unwrap();
    }

    // Latch (a name with its own hash tag is refused for latches).
    let latch = a.get_count_down_latch("app:batch");
    assert!(latch.try_set_count(1).await.unwrap());
    assert_eq!(latch.get_count().await.unwrap(), 1);
    let other = b.get_count_down_latch("app:batch");
    woken_by_message(
        &server,
        "latch waiter",
        "redisson_countdownlatch__channel__{app:batch}",
        1,
        async move { assert!(other.await_for(Duration::from_secs(60)).await.unwrap()) },
        async { assert_eq!(latch.count_down().await.unwrap(), 0) },
    )
    .await;
    let latch = a.get_count_down_latch("app:batch");
    assert!(latch.try_set_count(3).await.unwrap());
    assert!(latch.delete().await.unwrap());

    // The watchdog renews under the user too.
    let renewed = builder_for(&url_of(&server, USER))
        .watchdog_timeout(Duration::from_millis(300))
        .build()
        .await
        .unwrap();
    let lock = renewed.get_lock("app:renewed");
    let guard = lock.lock().await.unwrap();
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(!guard.is_lost(), "the watchdog's renewals were refused");
    guard.unlock().await.unwrap();

    assert!(numsub_calls > 0, "the handover's subscriber count ran");
    // Each client's identity was written, refreshed all along, and reads back under the user.
    let me = a.identity_of(a.id()).await.unwrap().expect("a's identity");
    assert!(me.age >= Duration::from_secs(2), "{me:?}");
    assert!(b.identity_of(b.id()).await.unwrap().is_some());
    let refusals = acl_log(&server).await;
    assert!(refusals.is_empty(), "Redis refused: {refusals:?}");
    let keys: Vec<String> = admin.keys("*").await.unwrap();
    eprintln!("keys left: {keys:?}");
}

/// Connecting, a lock taken and released, a waiter (the pub/sub connection) and calls after an
/// emptied script cache (EVAL) leave nothing in `ACL LOG`: no command the client sends unasked (the redis crate's `CLIENT SETINFO` on every
/// new connection, which Redis 7.2 and newer and Valkey know and the rule does not grant) is
/// refused. An auditor reads every refusal there as an attempt to do what the user may not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connecting_locking_and_waiting_leave_acl_log_empty() {
    let server = RedisServer::start();
    create_user(&server, USER, &[]).await;
    let client = client_as(&server, USER).await.unwrap();
    let lock = client.get_lock("app:audited");
    let held = lock.lock().await.unwrap();
    let other = client_as(&server, USER)
        .await
        .unwrap()
        .get_lock("app:audited");
    let guard = woken_by_message(
        &server,
        "waiter",
        "redisson_lock__channel:{app:audited}",
        1,
        async move { other.lock().await.unwrap() },
        async { held.unlock().await.unwrap() },
    )
    .await;
    guard.unlock().await.unwrap();
    // An emptied script cache (a restart, a failover): the next calls go again as EVAL, which
    // the rule grants.
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut server.raw().await)
        .await
        .unwrap();
    lock.lock().await.unwrap().unlock().await.unwrap();
    let refusals = acl_log(&server).await;
    assert!(refusals.is_empty(), "Redis refused: {refusals:?}");
}

/// Takeover under the rule: the holder, a process connected as the user, subscribes its
/// presence channel (`&ferrisson_presence:*`) and is killed; the waiter, as the user too, reads
/// and marks the holder's identity from its script and takes the lock over within seconds.
/// Nothing is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holder_is_taken_over_under_the_documented_rule() {
    let server = RedisServer::start();
    create_user(&server, USER, &[]).await;
    let mut holder =
        support::HolderProcess::spawn_url(&url_of(&server, USER), "app:killed", 30_000, "lock");
    let held = holder.locked(Duration::from_secs(10)).await;
    let waiter = client_as(&server, USER)
        .await
        .unwrap()
        .get_lock("app:killed");
    let waiting = tokio::spawn(async move { waiter.lock().await.map(|g| g.fencing_token()) });
    tokio::time::sleep(Duration::from_secs(1)).await;
    holder.kill().await;
    let killed = Instant::now();
    let token = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("taken over")
        .unwrap()
        .unwrap();
    assert!(token > held);
    assert!(
        killed.elapsed() < Duration::from_secs(3),
        "taken over after {:?}",
        killed.elapsed()
    );
    let refusals = acl_log(&server).await;
    assert!(refusals.is_empty(), "Redis refused: {refusals:?}");
}

/// On a Cluster, the README's rule with what the ACL page adds for one (`+cluster|slots`,
/// `+ping`, `+pubsub|shardnumsub`; the sharded pub/sub commands where the servers have them; and
/// `+client|setinfo` where a server takes it, which Redis 7.0 does not), on every node: a lock
/// taken, waited for (woken by message) and released, and nothing in any node's `ACL LOG`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_runs_under_the_rule_with_the_cluster_additions() {
    let cluster = support::cluster::RedisCluster::start().await;
    for port in cluster.running_ports() {
        let mut node = cluster.raw_node(port).await;
        for line in readme_rule() {
            let () = redis::cmd("ACL")
                .arg("SETUSER")
                .arg(USER)
                .arg(line)
                .query_async(&mut node)
                .await
                .expect("ACL SETUSER");
        }
        let () = redis::cmd("ACL")
            .arg("SETUSER")
            .arg(USER)
            .arg(&["+cluster|slots", "+pubsub|shardnumsub", "+ping"][..])
            .query_async(&mut node)
            .await
            .expect("the cluster additions");
        // Redis 6.2 refuses the sharded commands in a rule (it has none), 7.0 `CLIENT SETINFO`.
        for extra in [
            &["+ssubscribe", "+sunsubscribe", "+spublish"][..],
            &["+client|setinfo"][..],
        ] {
            let taken: redis::RedisResult<()> = redis::cmd("ACL")
                .arg("SETUSER")
                .arg(USER)
                .arg(extra)
                .query_async(&mut node)
                .await;
            eprintln!("node {port}: {extra:?}: {taken:?}");
        }
    }
    let urls: Vec<String> = cluster
        .running_ports()
        .into_iter()
        .map(|port| format!("redis://{USER}:{PASSWORD}@127.0.0.1:{port}/"))
        .collect();
    let client = || {
        ferrisson::Client::builder()
            .cluster(urls.clone())
            .connection_timeout(Duration::from_secs(2))
            .response_timeout(Duration::from_secs(2))
            .recheck_interval(Duration::from_secs(60))
            .build()
    };
    let (a, b) = (client().await.unwrap(), client().await.unwrap());
    let held = a.get_lock("app:clustered").lock().await.unwrap();
    let other = b.get_lock("app:clustered");
    let waiter = tokio::spawn(async move { other.lock().await.unwrap() });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiter.is_finished(), "the waiter did not wait");
    held.unlock().await.unwrap();
    let guard = join_within(BY_MESSAGE, [waiter], "cluster waiter")
        .await
        .pop()
        .unwrap();
    guard.unlock().await.unwrap();
    for port in cluster.running_ports() {
        let mut node = cluster.raw_node(port).await;
        let entries: Vec<redis::Value> = redis::cmd("ACL")
            .arg("LOG")
            .query_async(&mut node)
            .await
            .unwrap();
        assert!(entries.is_empty(), "node {port} refused: {entries:?}");
    }
}

/// The commands every script in `lua/` calls (`pubsub|numsub` for `PUBSUB NUMSUB`).
fn script_commands() -> BTreeSet<String> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("lua");
    let mut commands = BTreeSet::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let source = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        for call in ["redis.call('", "redis.pcall('"] {
            for (at, _) in source.match_indices(call) {
                let rest = &source[at + call.len()..];
                let name = &rest[..rest.find('\'').unwrap()];
                let name = if name == "pubsub" {
                    let sub = rest[name.len() + 1..].trim_start_matches([',', ' ', '\'']);
                    format!("pubsub|{}", &sub[..sub.find('\'').unwrap()])
                } else {
                    name.to_owned()
                };
                commands.insert(name.to_lowercase());
            }
        }
    }
    commands
}

#[test]
fn the_rule_grants_exactly_the_commands_the_client_and_its_scripts_send() {
    let granted: BTreeSet<String> = readme_rule()
        .into_iter()
        .flatten()
        .filter_map(|t| t.strip_prefix('+').map(str::to_owned))
        .collect();
    let mut needed = script_commands();
    assert!(needed.contains("time") && needed.contains("pubsub|numsub"));
    // Sent by the client itself (seen with MONITOR): scripts, their loading, the same scripts
    // as EVAL after NOSCRIPT (tests/noscript.rs), the plain reads, the pub/sub connection's
    // requests, and its identity's refresh and removal (tests/identities.rs).
    for own in [
        "evalsha",
        "eval",
        "script|load",
        "get",
        "hmget",
        "subscribe",
        "unsubscribe",
        "pexpire",
        "del",
    ] {
        needed.insert(own.to_owned());
    }
    let missing: Vec<_> = needed.difference(&granted).collect();
    let extra: Vec<_> = granted.difference(&needed).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "the README's rule lacks {missing:?} and grants {extra:?} that nothing sends"
    );
}

/// What an operation under a user without some permission answered, within [`REFUSED_WITHIN`].
async fn refused<T: std::fmt::Debug>(
    what: &str,
    fut: impl Future<Output = Result<T, Error>>,
) -> (String, String) {
    let (result, took) = timed(REFUSED_WITHIN, what, fut).await;
    eprintln!("{what}: refused after {took:?}: {result:?}");
    match result {
        Err(Error::PermissionDenied { what, reason }) => (what, reason),
        other => panic!("{what}: expected PermissionDenied, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_evalsha_an_operation_is_refused_naming_its_script() {
    let server = RedisServer::start();
    create_user(&server, "no-evalsha", &["+evalsha"]).await;
    // Its identity's script would be refused as the client connects (see
    // `without_the_identity_pattern_the_client_does_not_connect`).
    let client = builder_as(&server, "no-evalsha")
        .identity(false)
        .build()
        .await
        .unwrap();
    let (what, reason) = refused("lock", client.get_lock("app:orders").lock()).await;
    assert!(
        what.contains("lock_acquire") && what.contains("app:orders"),
        "{what}"
    );
    assert!(!reason.is_empty());
    assert_logged(&server, "command", "evalsha").await;
    let (what, _) = refused(
        "latch",
        client.get_count_down_latch("app:gate").count_down(),
    )
    .await;
    assert!(what.contains("latch_count_down"), "{what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_get_a_script_s_refused_read_is_not_taken_for_a_wrong_type() {
    let server = RedisServer::start();
    create_user(&server, "no-get", &["+get"]).await;
    let client = client_as(&server, "no-get").await.unwrap();
    let (what, reason) = refused("fair lock", client.get_fair_lock("app:fair").lock()).await;
    assert!(what.contains("fair_acquire"), "{what}");
    assert!(!reason.is_empty());
    assert_logged(&server, "command", "get").await;
    let semaphore = client.get_semaphore("app:sem");
    let (what, _) = refused("try_set_permits", semaphore.try_set_permits(1)).await;
    assert!(what.contains("semaphore_set"), "{what}");
    let (what, _) = refused("a plain GET", client.get_fenced_lock("app:fenced").token()).await;
    assert_eq!(what, "GET redisson_lock_token:{app:fenced}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_script_load_the_client_does_not_connect() {
    let server = RedisServer::start();
    create_user(&server, "no-load", &["+script|load"]).await;
    let (what, reason) = refused("connect", client_as(&server, "no-load")).await;
    assert_eq!(what, "SCRIPT LOAD");
    assert!(!reason.is_empty());
    assert_logged(&server, "command", "script").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_identity_pattern_the_client_does_not_connect() {
    let server = RedisServer::start();
    create_user(&server, "no-identity", &["~ferrisson_client:*"]).await;
    let (what, reason) = refused("connect", client_as(&server, "no-identity")).await;
    assert!(
        what.contains("client_identity") && what.contains("ferrisson_client:{"),
        "{what}"
    );
    assert!(!reason.is_empty());
    assert_logged(&server, "key", "ferrisson_client:{").await;
    // Turned off, the client needs no such key, and locks.
    let client = builder_as(&server, "no-identity")
        .identity(false)
        .build()
        .await
        .unwrap();
    let guard = client.get_lock("app:orders").lock().await.unwrap();
    guard.unlock().await.unwrap();
}

/// Listing every client needs `SCAN`, which the rule leaves out (it lists every key name of
/// the database, whatever the key patterns say); one client's identity needs nothing more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_the_clients_needs_scan_which_the_rule_leaves_out() {
    let server = RedisServer::start();
    create_user(&server, USER, &[]).await;
    let client = client_as(&server, USER).await.unwrap();
    assert!(client.identity_of(client.id()).await.unwrap().is_some());
    let (what, _) = refused("clients", client.clients()).await;
    assert!(what.contains("SCAN"), "{what}");
    assert_logged(&server, "command", "scan").await;
    let () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg(USER)
        .arg("+scan")
        .query_async(&mut server.raw().await)
        .await
        .unwrap();
    let listed = client.clients().await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].id, client.id());

    // Listing objects with `+scan`: SCAN names keys outside the rule too (another
    // application's lock, a session); those are left out, not an error.
    let mut admin = server.raw().await;
    let _: () = admin.set("session:1", "x").await.unwrap();
    let _: () = admin
        .hset("billing:run", "0c4a6f52-2f43-4d4b-9d3a-2f0e8c1b7a11:1", 1)
        .await
        .unwrap();
    let mine = client.get_lock("app:jobs").lock().await.unwrap();
    let found = client.inspect_matching("*").await.unwrap();
    let names: Vec<&str> = found.iter().map(|s| s.name()).collect();
    assert_eq!(names, ["app:jobs"], "{found:#?}");
    mine.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_token_counters_nothing_is_granted() {
    let server = RedisServer::start();
    create_user(&server, "no-tokens", &["~ferrisson_token:*"]).await;
    let client = client_as(&server, "no-tokens").await.unwrap();
    let (what, reason) = refused("lock", client.get_lock("app:orders").lock()).await;
    assert!(what.contains("ferrisson_token:{"), "{what}");
    assert!(!reason.is_empty());
    assert_logged(&server, "key", "ferrisson_token:{").await;
    let mut admin = server.raw().await;
    assert!(!admin.exists::<_, bool>("app:orders").await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_braced_prefix_derived_keys_are_refused() {
    let server = RedisServer::start();
    create_user(&server, "no-braces", &["~{app:*"]).await;
    let client = client_as(&server, "no-braces").await.unwrap();
    let rw = client.get_read_write_lock("app:doc");
    let (what, _) = refused("read lock", rw.read_lock().lock()).await;
    assert!(
        what.contains("rwlock_read_acquire") && what.contains("{app:doc}:"),
        "{what}"
    );
    let semaphore = client.get_semaphore("app:sem");
    assert!(semaphore.try_set_permits(1).await.unwrap());
    let (what, _) = refused("semaphore", semaphore.acquire(1)).await;
    assert!(what.contains("{app:sem}:ferrisson_sc_request:"), "{what}");
    // A plain lock needs none of them.
    client
        .get_lock("app:lock")
        .lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_time_the_fair_lock_is_refused_before_it_queues() {
    let server = RedisServer::start();
    create_user(&server, "no-time", &["+time"]).await;
    // Its identity's script reads the server's clock as the client connects.
    let client = builder_as(&server, "no-time")
        .identity(false)
        .build()
        .await
        .unwrap();
    let (what, reason) = refused("fair lock", client.get_fair_lock("app:fair").lock()).await;
    assert!(what.contains("fair_acquire"), "{what}");
    assert!(!reason.is_empty());
    assert_logged(&server, "command", "time").await;
    let mut admin = server.raw().await;
    let keys: Vec<String> = admin.keys("*").await.unwrap();
    assert!(keys.is_empty(), "left behind: {keys:?}");
}

/// Makes `name` held by a foreign owner for `ttl`, as another client would.
async fn held_elsewhere(server: &RedisServer, name: &str, ttl: Duration) {
    let mut admin = server.raw().await;
    let () = admin.hset(name, "elsewhere:1", 1).await.unwrap();
    let _: bool = admin.pexpire(name, ttl.as_millis() as i64).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_channel_fails_its_waiters_and_spares_the_other_channels() {
    let server = RedisServer::start();
    create_user(
        &server,
        "no-lock-channel",
        &["&redisson_lock__channel:{app:*"],
    )
    .await;
    let client = client_as(&server, "no-lock-channel").await.unwrap();

    // A semaphore waiter of the same client listens on a channel it may use.
    let semaphore = client.get_semaphore("app:sem");
    assert!(semaphore.try_set_permits(1).await.unwrap());
    semaphore.acquire(1).await.unwrap();
    let waiting = client.get_semaphore("app:sem");
    let waiter = tokio::spawn(async move { waiting.acquire(1).await });
    server.wait_subscribers("redisson_sc:{app:sem}", 1).await;

    held_elsewhere(&server, "app:orders", Duration::from_secs(30)).await;
    let lock = client.get_lock("app:orders");
    let (what, reason) = refused("lock()", lock.lock()).await;
    // The lock's channel, or (the waiter starves by now) its own channel of that lock.
    assert!(
        what.starts_with("SUBSCRIBE redisson_lock__channel:{app:orders}"),
        "{what}"
    );
    assert!(!reason.is_empty());
    assert_logged(&server, "channel", "redisson_lock__channel:{app:orders}").await;
    let (what, _) = refused(
        "try_lock_for",
        lock.try_lock_for(Duration::from_secs(60), None),
    )
    .await;
    // The lock's channel, or (the waiter starves by now) its own channel of that lock.
    assert!(
        what.starts_with("SUBSCRIBE redisson_lock__channel:{app:orders}"),
        "{what}"
    );
    // A fair waiter's own channel is refused the same way.
    held_elsewhere(&server, "app:fair", Duration::from_secs(30)).await;
    let (what, _) = refused("fair lock()", client.get_fair_lock("app:fair").lock()).await;
    assert!(
        what.starts_with("SUBSCRIBE redisson_lock__channel:{app:fair}:"),
        "{what}"
    );
    let mut admin = server.raw().await;
    let queued: i64 = admin.llen("redisson_lock_queue:{app:fair}").await.unwrap();
    assert_eq!(queued, 0, "the refused fair waiter left the queue");

    // The semaphore's subscription lived on: its waiter wakes by message.
    let released = Instant::now();
    semaphore.release(1).await.unwrap();
    let acquired = join_within(BY_MESSAGE, [waiter], "semaphore waiter").await;
    acquired.into_iter().next().unwrap().unwrap();
    eprintln!(
        "semaphore waiter woken {:?} after the release",
        released.elapsed()
    );

    // An uncontended lock is granted, but its release cannot publish: the release says so.
    let free = client.get_lock("app:free");
    let guard = free.lock().await.unwrap();
    let (what, reason) = refused("unlock", guard.unlock()).await;
    assert!(what.contains("lock_release"), "{what}");
    assert!(!reason.is_empty());
    assert_logged(&server, "channel", "redisson_lock__channel:{app:free}").await;
    // Redis stopped the script at the PUBLISH and kept its DEL: the lock is free.
    assert!(!admin.exists::<_, bool>("app:free").await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_refused_while_waiting_ends_the_wait() {
    let server = RedisServer::start();
    create_user(&server, USER, &[]).await;
    let client = client_as(&server, USER).await.unwrap();
    let semaphore = client.get_semaphore("app:sem");
    assert!(semaphore.try_set_permits(1).await.unwrap());
    semaphore.acquire(1).await.unwrap();
    let waiting = client.get_semaphore("app:sem");
    let sem_waiter = tokio::spawn(async move { waiting.acquire(1).await });
    held_elsewhere(&server, "app:orders", Duration::from_secs(30)).await;
    let lock = client.get_lock("app:orders");
    let lock_waiter = tokio::spawn(async move { lock.lock().await });
    server
        .wait_subscribers("redisson_lock__channel:{app:orders}", 1)
        .await;
    tokio::time::sleep(Duration::from_millis(200)).await;

    // The operator takes the lock channels away: Redis drops the subscribed connection, and
    // the client's new one is refused that channel.
    let mut admin = server.raw().await;
    let () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg(USER)
        .arg("resetchannels")
        .arg("&redisson_sc:{app:*")
        .query_async(&mut admin)
        .await
        .unwrap();
    let (what, reason) = refused("the waiting lock()", async { lock_waiter.await.unwrap() }).await;
    // The lock's channel, or (the waiter starves by now) its own channel of that lock.
    assert!(
        what.starts_with("SUBSCRIBE redisson_lock__channel:{app:orders}"),
        "{what}"
    );
    assert!(!reason.is_empty());
    assert_logged(&server, "channel", "redisson_lock__channel:{app:orders}").await;

    // The semaphore's channel is subscribed again on the new connection: woken by message.
    server.wait_subscribers("redisson_sc:{app:sem}", 1).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    semaphore.release(1).await.unwrap();
    let acquired = join_within(BY_MESSAGE, [sem_waiter], "semaphore waiter").await;
    acquired.into_iter().next().unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_subscribe_waiters_are_refused_naming_the_channel() {
    let server = RedisServer::start();
    create_user(&server, "no-subscribe", &["+subscribe"]).await;
    let client = client_as(&server, "no-subscribe").await.unwrap();
    held_elsewhere(&server, "app:orders", Duration::from_secs(30)).await;
    let (what, reason) = refused("lock()", client.get_lock("app:orders").lock()).await;
    // The lock's channel, or (the waiter starves by now) its own channel of that lock.
    assert!(
        what.starts_with("SUBSCRIBE redisson_lock__channel:{app:orders}"),
        "{what}"
    );
    assert!(!reason.is_empty());
    assert_logged(&server, "command", "subscribe").await;
    let latch = client.get_count_down_latch("app:gate");
    assert!(latch.try_set_count(1).await.unwrap());
    let (what, _) = refused("latch", latch.await_for(Duration::from_secs(60))).await;
    assert_eq!(
        what,
        "SUBSCRIBE redisson_countdownlatch__channel__{app:gate}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_pubsub_numsub_a_handover_is_refused() {
    let server = RedisServer::start();
    create_user(&server, "no-numsub", &["+pubsub|numsub"]).await;
    // A short lease: the refused release leaves the lock to it.
    let client = builder_for(&url_of(&server, "no-numsub"))
        .recheck_interval(Duration::from_secs(60))
        .watchdog_timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    let (holder, waiting) = (client.get_lock("app:orders"), client.get_lock("app:orders"));
    let held = holder.lock().await.unwrap();
    let waiter =
        tokio::spawn(async move { waiting.try_lock_for(Duration::from_secs(40), None).await });
    server
        .wait_subscribers("redisson_lock__channel:{app:orders}", 1)
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (what, reason) = refused("unlock", held.unlock()).await;
    assert!(what.contains("lock_handover"), "{what}");
    assert!(!reason.is_empty());
    assert_logged(&server, "command", "pubsub").await;
    // The lock stays the holder's until its lease runs out; then the waiter gets it.
    let started = Instant::now();
    let outcome = join_within(Duration::from_secs(10), [waiter], "the waiter")
        .await
        .pop()
        .unwrap();
    eprintln!(
        "the waiter got the lock {:?} after the refused release",
        started.elapsed()
    );
    let guard = outcome.unwrap().expect("the lock once its lease ran out");
    // Once nobody listens (the granted waiter's subscription goes in the background), a
    // release reaches no subscriber and counts none.
    server
        .wait_subscribers("redisson_lock__channel:{app:orders}", 0)
        .await;
    guard.unlock().await.unwrap();
}
