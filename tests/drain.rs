//! A rolling deploy drains instead of cutting work: a process that called `close_on_signal` and
//! gets SIGTERM 0.4 s into 2 s of work in `with_lock` finishes that work (its lease renewed
//! meanwhile: the watchdog timeout is 1 s), refuses a new acquisition with `Error::Draining`,
//! gives the lock back as the work ends (another process takes it within 100 ms), and exits
//! with 143. A second signal ends the drain at once and frees the lock; a drain grace that
//! runs out gives the holds back and ends the process. The same for the blocking client.

mod support;

use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

use support::{RedisServer, client};

/// The holder's watchdog timeout: shorter than its 2 s of work, so the work keeps its hold
/// only if the watchdog goes on renewing during the drain.
const LEASE_MS: u64 = 1000;

/// A `ferrisson-test-holder` of kind `drain` or `blocking-drain`, inside its work.
struct Worker {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Worker {
    /// Starts one with drain grace `grace_ms` (`None`: the default) and waits until its work
    /// holds the lock `job`.
    async fn working(server: &RedisServer, kind: &str, grace_ms: Option<u64>) -> Worker {
        let mut command = Command::new(support::holder_binary());
        command
            .args([&server.url(), "job", &LEASE_MS.to_string(), kind])
            .stdout(Stdio::piped())
            .kill_on_drop(true);
        if let Some(ms) = grace_ms {
            command.env("FERRISSON_TEST_DRAIN_MS", ms.to_string());
        }
        let mut child = command.spawn().expect("the holder process starts");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut worker = Worker {
            child,
            lines: BufReader::new(stdout).lines(),
        };
        let line = worker.line(Duration::from_secs(10)).await;
        assert!(line.starts_with("LOCKED "), "{kind}: {line}");
        worker
    }

    /// The next line, or `None` once the process closed its output.
    async fn next(&mut self, within: Duration) -> Option<String> {
        tokio::time::timeout(within, self.lines.next_line())
            .await
            .expect("the holder prints in time")
            .expect("its stdout")
    }

    async fn line(&mut self, within: Duration) -> String {
        self.next(within).await.expect("a line")
    }

    fn sigterm(&self) {
        self.signal("TERM");
    }

    /// Sends `signal` (`INT`, `TERM`) with the kill command.
    fn signal(&self, signal: &str) {
        let pid = self.child.id().expect("the holder runs").to_string();
        let status = std::process::Command::new("kill")
            .args([&format!("-{signal}"), &pid])
            .status()
            .expect("the kill command runs");
        assert!(status.success(), "kill -{signal} {pid}");
    }

    async fn exit_code(&mut self, within: Duration) -> Option<i32> {
        tokio::time::timeout(within, self.child.wait())
            .await
            .expect("the holder exits in time")
            .expect("its status")
            .code()
    }
}

/// Takes `lock` as soon as it is free (at most `within`); returns when.
async fn taken(lock: &ferrisson::RLock, within: Duration) -> Instant {
    let guard = lock
        .try_lock_for(within, None)
        .await
        .unwrap()
        .expect("the lock is given back in time");
    let at = Instant::now();
    guard.unlock().await.unwrap();
    at
}

async fn the_work_finishes_and_the_lock_follows_at_once(kind: &str) {
    let server = RedisServer::start();
    let other = client(&server).await;
    let lock = other.get_lock("job");
    let mut worker = Worker::working(&server, kind, None).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    worker.sigterm();
    let signalled = Instant::now();
    // Waiting for the lock from now on: it must come only when the work ends.
    let waiter = tokio::spawn(async move { taken(&lock, Duration::from_secs(10)).await });
    let new = worker.line(Duration::from_secs(5)).await;
    assert!(
        new.starts_with("NEW Draining { signal: Terminate }"),
        "{kind}: a new acquisition during the drain is refused: {new}"
    );
    assert_eq!(worker.line(Duration::from_secs(5)).await, "DONE", "{kind}");
    let done = Instant::now();
    let result = worker.line(Duration::from_secs(5)).await;
    assert_eq!(result, "RESULT ok", "{kind}: the work keeps its lease");
    let taken_at = waiter.await.unwrap();
    let after_work = taken_at.saturating_duration_since(done);
    eprintln!(
        "{kind}: work done {:?} after SIGTERM; lock taken by another process {after_work:?} after the work's end",
        done - signalled
    );
    assert!(
        done - signalled > Duration::from_millis(1200),
        "{kind}: the work ran to its end ({:?} after the signal)",
        done - signalled
    );
    assert!(
        taken_at > done - Duration::from_millis(50),
        "{kind}: the lock stayed the worker's while it worked"
    );
    assert!(
        after_work < Duration::from_millis(100),
        "{kind}: taken {after_work:?} after the work's end"
    );
    assert_eq!(
        worker.exit_code(Duration::from_secs(5)).await,
        Some(143),
        "{kind}"
    );
    eprintln!("{kind}: exited {:?} after the work's end", done.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_with_lock_work_finish_then_exits() {
    the_work_finishes_and_the_lock_follows_at_once("drain").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_sigterm_lets_with_lock_work_finish_then_exits() {
    the_work_finishes_and_the_lock_follows_at_once("blocking-drain").await;
}

/// A second signal during the drain (Ctrl-C after SIGTERM) ends it at once: the lock is free
/// well before the work would have ended, the work never printed its end, and the status is
/// the second signal's.
async fn a_second_signal_ends_at_once(kind: &str) {
    let server = RedisServer::start();
    let other = client(&server).await;
    let lock = other.get_lock("job");
    let mut worker = Worker::working(&server, kind, None).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    worker.sigterm();
    tokio::time::sleep(Duration::from_millis(200)).await;
    worker.signal("INT");
    let second = Instant::now();
    let taken_at = taken(&lock, Duration::from_secs(3)).await;
    eprintln!(
        "{kind}: taken {:?} after the second signal",
        taken_at - second
    );
    assert!(taken_at - second < Duration::from_millis(700), "{kind}");
    assert_eq!(worker.exit_code(Duration::from_secs(5)).await, Some(130));
    while let Some(line) = worker.next(Duration::from_secs(1)).await {
        assert_ne!(line, "DONE", "{kind}: the work was cut");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_signal_gives_back_at_once() {
    a_second_signal_ends_at_once("drain").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_a_second_signal_gives_back_at_once() {
    a_second_signal_ends_at_once("blocking-drain").await;
}

/// A drain grace of 500 ms, shorter than the work: the holds are given back when it runs
/// out, and the process ends, without the work's end.
async fn the_grace_running_out_gives_back(kind: &str) {
    let server = RedisServer::start();
    let other = client(&server).await;
    let lock = other.get_lock("job");
    let mut worker = Worker::working(&server, kind, Some(500)).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    worker.sigterm();
    let signalled = Instant::now();
    let taken_at = taken(&lock, Duration::from_secs(3)).await;
    let after = taken_at - signalled;
    eprintln!("{kind}: taken {after:?} after the signal (grace 500 ms)");
    assert!(
        after > Duration::from_millis(400),
        "{kind}: held through the grace: {after:?}"
    );
    assert!(after < Duration::from_millis(1100), "{kind}: {after:?}");
    assert_eq!(worker.exit_code(Duration::from_secs(5)).await, Some(143));
    while let Some(line) = worker.next(Duration::from_secs(1)).await {
        assert_ne!(line, "DONE", "{kind}: the work was cut");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grace_running_out_gives_the_holds_back() {
    the_grace_running_out_gives_back("drain").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_the_grace_running_out_gives_the_holds_back() {
    the_grace_running_out_gives_back("blocking-drain").await;
}
