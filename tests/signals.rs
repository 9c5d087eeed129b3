//! A process holding a lock (with the default 30 s watchdog lease) that is stopped with SIGINT
//! or SIGTERM gives the lock back on its way out when it called `close_on_signal`: with a zero
//! drain grace (the drain itself is tests/drain.rs'), another process takes it within a
//! second, and the holder ends with status 130 or 143. The same for the blocking client, whose
//! holding thread only sleeps. With `on_signal` the holds go back and
//! the process goes on, until a second signal. Without either, the lock waits for its lease.

mod support;

use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

use support::{RedisServer, client};

/// The default watchdog timeout: what a lock left behind costs.
const LEASE_MS: u64 = 30_000;

/// A `ferrisson-test-holder` process of `kind` holding lock `name`.
struct Holder {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Holder {
    async fn locked(server: &RedisServer, name: &str, kind: &str) -> Holder {
        let mut child = Command::new(support::holder_binary())
            .args([&server.url(), name, &LEASE_MS.to_string(), kind])
            // No drain (tests/drain.rs has it): the holds go back at the signal.
            .env("FERRISSON_TEST_DRAIN_MS", "0")
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the holder process starts");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut holder = Holder {
            child,
            lines: BufReader::new(stdout).lines(),
        };
        let line = holder.line().await;
        assert!(line.starts_with("LOCKED "), "{kind}: {line}");
        holder
    }

    async fn line(&mut self) -> String {
        tokio::time::timeout(Duration::from_secs(10), self.lines.next_line())
            .await
            .expect("the holder prints in time")
            .expect("its stdout")
            .expect("a line")
    }

    /// Sends `signal` (`INT`, `TERM`) with the kill command, as a shell user would.
    fn signal(&self, signal: &str) {
        let pid = self.child.id().expect("the holder runs").to_string();
        let status = std::process::Command::new("kill")
            .args([&format!("-{signal}"), &pid])
            .status()
            .expect("the kill command runs");
        assert!(status.success(), "kill -{signal} {pid}");
    }

    /// The exit status; `None` when a signal's default action ended the process.
    async fn exit_code(&mut self, within: Duration) -> Option<i32> {
        tokio::time::timeout(within, self.child.wait())
            .await
            .expect("the holder exits in time")
            .expect("its status")
            .code()
    }
}

/// Another client takes `name` within a second of `since`.
async fn taken_within_a_second(lock: &ferrisson::RLock, since: Instant, what: &str) {
    let guard = lock
        .try_lock_for(Duration::from_secs(1), None)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("{what}: the lock is still held 1 s after the signal"));
    eprintln!("{what}: taken {:?} after the signal", since.elapsed());
    assert!(since.elapsed() < Duration::from_millis(1500), "{what}");
    guard.unlock().await.unwrap();
}

async fn given_back_on(kind: &str, signal: &str, status: i32) {
    let what = format!("{kind} on SIG{signal}");
    let server = RedisServer::start();
    let other = client(&server).await;
    let lock = other.get_lock("job");
    let mut holder = Holder::locked(&server, "job", kind).await;
    holder.signal(signal);
    let sent = Instant::now();
    taken_within_a_second(&lock, sent, &what).await;
    assert_eq!(
        holder.exit_code(Duration::from_secs(10)).await,
        Some(status),
        "{what}: the conventional exit status"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_holder_gives_the_lock_back_on_sigint() {
    given_back_on("signal", "INT", 130).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_holder_gives_the_lock_back_on_sigterm() {
    given_back_on("signal", "TERM", 143).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_holder_gives_the_lock_back_on_sigint() {
    given_back_on("blocking-signal", "INT", 130).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_holder_gives_the_lock_back_on_sigterm() {
    given_back_on("blocking-signal", "TERM", 143).await;
}

/// `on_signal`: the lock is back, the guard (still alive) knows it is lost, the process goes
/// on with its own shutdown; a second signal ends it.
async fn told_then_ended_by_a_second_signal(kind: &str, first: &str, second: &str) {
    let server = RedisServer::start();
    let other = client(&server).await;
    let lock = other.get_lock("job");
    let mut holder = Holder::locked(&server, "job", kind).await;
    holder.signal(first);
    let sent = Instant::now();
    taken_within_a_second(&lock, sent, kind).await;
    assert_eq!(holder.line().await, format!("SIGNALLED SIG{first} lost"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        holder.child.try_wait().unwrap().is_none(),
        "{kind}: the process goes on after the first signal"
    );
    holder.signal(second);
    let status = if second == "INT" { 130 } else { 143 };
    assert_eq!(holder.exit_code(Duration::from_secs(5)).await, Some(status));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_signal_gives_back_and_leaves_the_process_to_its_shutdown() {
    told_then_ended_by_a_second_signal("on-signal", "TERM", "INT").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_on_signal_gives_back_and_leaves_the_process_to_its_shutdown() {
    told_then_ended_by_a_second_signal("blocking-on-signal", "INT", "TERM").await;
}

/// The old behaviour, and what `close_on_signal` spares: SIGINT's default action ends the
/// process with no destructor run, and the lock waits for its 30 s lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_helper_the_lock_waits_for_its_lease() {
    let server = RedisServer::start();
    let other = client(&server).await;
    let lock = other.get_lock("job");
    let mut holder = Holder::locked(&server, "job", "lock").await;
    holder.signal("INT");
    assert_eq!(
        holder.exit_code(Duration::from_secs(10)).await,
        None,
        "ended by the signal itself"
    );
    let still = lock
        .try_lock_for(Duration::from_secs(1), None)
        .await
        .unwrap();
    assert!(still.is_none(), "nobody gave the lock back");
    let ttl = lock.remaining_ttl().await.unwrap().expect("a lease");
    assert!(ttl > Duration::from_secs(25), "left to its lease: {ttl:?}");
}

/// A panic that unwinds out of `main` drops the guard and the client on its way: the lock is
/// back at once (status 101, Rust's for a panic).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_main_gives_the_lock_back() {
    let server = RedisServer::start();
    let other = client(&server).await;
    let lock = other.get_lock("job");
    let mut holder = Holder::locked(&server, "job", "panic-holding").await;
    assert_eq!(holder.exit_code(Duration::from_secs(10)).await, Some(101));
    let ended = Instant::now();
    taken_within_a_second(&lock, ended, "panic-holding").await;
}

/// A Redis that does not answer does not keep a Ctrl-C'd process alive: it ends within about
/// twice its response timeout (3 s by default), leaving the lock to its lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_redis_does_not_keep_the_process_alive() {
    let server = RedisServer::start();
    let mut holder = Holder::locked(&server, "job", "signal").await;
    server.pause();
    holder.signal("INT");
    let sent = Instant::now();
    let status = holder.exit_code(Duration::from_secs(15)).await;
    let took = sent.elapsed();
    server.resume();
    assert_eq!(status, Some(130));
    assert!(took < Duration::from_secs(10), "ended after {took:?}");
}

/// In this process: `on_signal`, then SIGINT to itself. Every kind of hold its guards stand for
/// goes back (two nested holds of one acquisition, a fair lock, each side of a read-write lock,
/// a fixed lease, permits), the live guards learn they are lost, and the client takes on no
/// new acquire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_hold_goes_back_and_its_guards_learn_it() {
    let server = RedisServer::start();
    let client = support::builder(&server)
        .drain_grace(Duration::ZERO)
        .build()
        .await
        .unwrap();
    let stop = client.on_signal().unwrap();
    let outer = client.get_lock("plain").lock().await.unwrap();
    let nested = outer.reenter().await.unwrap();
    let fair = client.get_fair_lock("fair").lock().await.unwrap();
    let read = client.get_read_write_lock("rw-read").read_lock();
    let read = read.lock().await.unwrap();
    let write = client.get_read_write_lock("rw-write").write_lock();
    let write = write.lock().await.unwrap();
    let fixed = client.get_lock("fixed");
    let fixed = fixed
        .lock_with_lease(Duration::from_secs(60))
        .await
        .unwrap();
    let semaphore = client.get_permit_expirable_semaphore("slots");
    semaphore.try_set_permits(2).await.unwrap();
    let permit = semaphore.acquire().await.unwrap();
    assert_eq!(stop.received(), None);

    let status = std::process::Command::new("kill")
        .args(["-INT", &std::process::id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let signal = tokio::time::timeout(Duration::from_secs(5), stop)
        .await
        .expect("the holds are given back in time");
    assert_eq!(signal, ferrisson::Signal::Interrupt);

    let lost = [
        outer.is_lost(),
        nested.is_lost(),
        fair.is_lost(),
        read.is_lost(),
        write.is_lost(),
        fixed.is_lost(),
        permit.is_lost(),
    ];
    assert_eq!(lost, [true; 7], "every live guard learns its hold is gone");
    let other = support::client(&server).await;
    let mut taken = Vec::new();
    for lock in [
        other.get_lock("plain"),
        other.get_fair_lock("fair"),
        other.get_read_write_lock("rw-read").write_lock(),
        other.get_read_write_lock("rw-write").write_lock(),
        other.get_lock("fixed"),
    ] {
        let guard = lock.try_lock().await.unwrap();
        taken.push(guard.unwrap_or_else(|| panic!("{} is still taken", lock.name())));
    }
    let slots = other.get_permit_expirable_semaphore("slots");
    assert_eq!(slots.available_permits().await.unwrap(), 2);
    assert!(matches!(
        client.get_lock("new").try_lock().await,
        Err(ferrisson::Error::Closed)
    ));
    // Dropping the guards now sends nothing that could touch the new holders' locks.
    drop((outer, nested, fair, read, write, fixed, permit));
    tokio::time::sleep(Duration::from_millis(200)).await;
    for guard in taken {
        assert!(
            !guard.is_lost(),
            "{} is still the new holder's",
            guard.name()
        );
        guard.unlock().await.unwrap();
    }
}
