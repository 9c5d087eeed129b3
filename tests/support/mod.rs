//! The test harness: real servers, clients with test-sized timeouts, and the mutual-exclusion
//! checker.

#![allow(dead_code, unreachable_pub)]

pub mod chaos;
pub mod checker;
pub mod cluster;
pub mod elsewhere;
pub mod proxy;
pub mod redisson;
pub mod redisson_lock;
pub mod sentinel;
pub mod server;
pub mod warnings;

use std::time::Duration;

#[allow(unused_imports)]
pub use checker::Checker;
#[allow(unused_imports)]
pub use elsewhere::Elsewhere;
#[allow(unused_imports)]
pub use proxy::{Mode, Proxy};
pub use server::RedisServer;

/// A client of `server` with timeouts sized for tests.
pub async fn client(server: &RedisServer) -> ferrisson::Client {
    builder(server)
        .build()
        .await
        .expect("client connects to the test server")
}

/// A builder for `server` with timeouts sized for tests; adjust and build.
pub fn builder(server: &RedisServer) -> ferrisson::ClientBuilder {
    builder_for(&server.url())
}

/// As [`builder`], for any URL (a proxy in front of a server, say).
pub fn builder_for(url: &str) -> ferrisson::ClientBuilder {
    ferrisson::Client::builder()
        .url(url)
        .response_timeout(Duration::from_millis(800))
        .connection_timeout(Duration::from_millis(800))
}

/// A client of `server` whose waiters, within a test's time, wake only by message: its re-check
/// interval (the fallback for a lost message) is 30 s, and starvation mode (whose waiters ask
/// once more when they start to starve) is off.
pub async fn message_only_client(server: &RedisServer) -> ferrisson::Client {
    builder(server)
        .recheck_interval(Duration::from_secs(30))
        .lock_starvation_threshold(None)
        .build()
        .await
        .expect("client connects to the test server")
}

/// A raw subscriber to one channel, as a Java client would be.
pub struct Listener {
    messages: futures::stream::BoxStream<'static, redis::Msg>,
}

impl Listener {
    /// Subscribes to `channel` on `server` (subscribed when this returns).
    pub async fn on(server: &RedisServer, channel: &str) -> Listener {
        let mut pubsub = redis::Client::open(server.url())
            .unwrap()
            .get_async_pubsub()
            .await
            .expect("pub/sub connection to the test server");
        pubsub.subscribe(channel).await.unwrap();
        Listener {
            messages: Box::pin(pubsub.into_on_message()),
        }
    }

    /// The next message's payload, waiting at most `within`; `None` when none came.
    pub async fn next_within(&mut self, within: Duration) -> Option<String> {
        use futures::StreamExt;
        let msg = tokio::time::timeout(within, self.messages.next())
            .await
            .ok()??;
        Some(msg.get_payload().expect("a text payload"))
    }

    /// The next message's payload; panics when none comes within 2 s.
    pub async fn next(&mut self) -> String {
        self.next_within(Duration::from_secs(2))
            .await
            .expect("a message within 2 s")
    }
}

/// Polls `check` every 10 ms until it is true or `within` has passed.
pub async fn eventually<F, Fut>(within: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `fut`, which must end within `within` (a deadlock fails the test instead of hanging it).
pub async fn within<T>(
    within: Duration,
    what: &str,
    fut: impl std::future::Future<Output = T>,
) -> T {
    tokio::time::timeout(within, fut)
        .await
        .unwrap_or_else(|_| panic!("{what}: not done within {within:?}"))
}

/// Waits (at most 10 s) until `lock` is free. A waiter that gave up after it started to starve
/// leaves in the background, and a release just before may hand it the lock for a moment.
pub async fn freed(lock: &ferrisson::RLock) {
    let free = eventually(Duration::from_secs(10), || async {
        !lock.is_locked().await.unwrap()
    });
    assert!(free.await, "{} stays locked", lock.name());
}

/// Awaits every task, each within `within`, and returns their outputs in order; panics with
/// `what` when one does not finish in time and with the task's own panic when it failed.
pub async fn join_within<T>(
    within: Duration,
    tasks: impl IntoIterator<Item = tokio::task::JoinHandle<T>>,
    what: &str,
) -> Vec<T> {
    let mut outputs = Vec::new();
    for task in tasks {
        let joined = tokio::time::timeout(within, task)
            .await
            .unwrap_or_else(|_| panic!("{what}: a task did not finish within {within:?}"));
        outputs.push(joined.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic())));
    }
    outputs
}

/// The `ferrisson-test-holder` executable, built with the `test-holder` feature (which
/// `cargo test --all-features` turns on); a test that needs it without fails saying so.
pub fn holder_binary() -> &'static str {
    option_env!("CARGO_BIN_EXE_ferrisson-test-holder").unwrap_or_else(|| {
        panic!(
            "this test starts ferrisson-test-holder processes, built with the test-holder \
             feature only: run it with --all-features (or --features test-holder)"
        )
    })
}

/// A `ferrisson-test-holder` process: it takes the lock `name` of `kind` (lock, read, write,
/// fair) with `ms` as its watchdog and fair queue timeout. Killed on drop.
pub struct HolderProcess {
    child: tokio::process::Child,
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
}

impl HolderProcess {
    pub fn spawn(server: &RedisServer, name: &str, ms: u64, kind: &str) -> Self {
        Self::spawn_url(&server.url(), name, ms, kind)
    }

    /// As [`spawn`](Self::spawn), with the URL given (comma-separated for `redlock`).
    pub fn spawn_url(url: &str, name: &str, ms: u64, kind: &str) -> Self {
        use tokio::io::AsyncBufReadExt;
        let mut child = tokio::process::Command::new(holder_binary())
            .args([url, name, &ms.to_string(), kind])
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the holder process starts");
        let stdout = child.stdout.take().expect("piped stdout");
        HolderProcess {
            child,
            lines: tokio::io::BufReader::new(stdout).lines(),
        }
    }

    /// Waits (at most `within`) until the process holds the lock; returns its fencing token.
    pub async fn locked(&mut self, within: Duration) -> u64 {
        let line = tokio::time::timeout(within, self.lines.next_line())
            .await
            .expect("the holder process locks in time")
            .expect("its stdout")
            .expect("a LOCKED line");
        line.strip_prefix("LOCKED ")
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("unexpected line from the holder: {line}"))
    }

    /// The process's next line of output (at most `within`).
    pub async fn line(&mut self, within: Duration) -> String {
        tokio::time::timeout(within, self.lines.next_line())
            .await
            .expect("the holder process prints in time")
            .expect("its stdout")
            .expect("a line")
    }

    /// Waits (at most `within`) until the process exits; returns its exit code.
    pub async fn exit_code(&mut self, within: Duration) -> Option<i32> {
        tokio::time::timeout(within, self.child.wait())
            .await
            .expect("the holder process exits in time")
            .expect("its status")
            .code()
    }

    /// SIGSTOP: the process hangs, its connections stay open (a host that stopped answering).
    pub fn stop(&self) {
        let pid = self.child.id().expect("the holder runs").to_string();
        let status = std::process::Command::new("kill")
            .args(["-STOP", &pid])
            .status()
            .expect("the kill command runs");
        assert!(status.success(), "SIGSTOP the holder");
    }

    /// SIGCONT: a process stopped with [`stop`](Self::stop) runs again.
    pub fn resume(&self) {
        let pid = self.child.id().expect("the holder runs").to_string();
        let status = std::process::Command::new("kill")
            .args(["-CONT", &pid])
            .status()
            .expect("the kill command runs");
        assert!(status.success(), "SIGCONT the holder");
    }

    /// The process's id.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// SIGKILL, and wait until it is gone.
    pub async fn kill(&mut self) {
        self.child.start_kill().expect("kill the holder");
        self.child.wait().await.expect("reap the holder");
    }
}

/// Tasks that loop taking and releasing one lock until stopped, recording when each grant
/// came: for failover tests, which check that grants resume and that no call hangs.
pub struct Contenders {
    tasks: Vec<tokio::task::JoinHandle<Duration>>,
    granted: std::sync::Arc<std::sync::Mutex<Vec<std::time::Instant>>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Contenders {
    /// Four tasks on `client`'s lock `name`, each asking with `try_lock_for(300 ms)`.
    pub fn start(client: &ferrisson::Client, name: &str) -> Contenders {
        use std::sync::atomic::Ordering;
        let granted = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut tasks = Vec::new();
        for _ in 0..4 {
            let lock = client.get_lock(name);
            let (granted, stop) = (granted.clone(), stop.clone());
            tasks.push(tokio::spawn(async move {
                let mut longest = Duration::ZERO;
                while !stop.load(Ordering::SeqCst) {
                    let asked = std::time::Instant::now();
                    let result = lock.try_lock_for(Duration::from_millis(300), None).await;
                    longest = longest.max(asked.elapsed());
                    match result {
                        Ok(Some(guard)) => {
                            granted.lock().unwrap().push(std::time::Instant::now());
                            tokio::time::sleep(Duration::from_millis(2)).await;
                            let _ = guard.unlock().await;
                        }
                        Ok(None) => {}
                        Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                    }
                }
                longest
            }));
        }
        Contenders {
            tasks,
            granted,
            stop,
        }
    }

    /// How many grants so far.
    pub fn grants(&self) -> usize {
        self.granted.lock().unwrap().len()
    }

    /// How long after `since` the first grant came (waits for one, at most 15 s).
    pub async fn resumed_after(&self, since: std::time::Instant) -> Duration {
        loop {
            if let Some(at) = self.granted.lock().unwrap().iter().find(|at| **at > since) {
                return *at - since;
            }
            assert!(
                since.elapsed() < Duration::from_secs(15),
                "no grant within 15 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops the tasks (each must end within 10 s) and returns the longest call any made.
    pub async fn stop(self) -> Duration {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let mut longest = Duration::ZERO;
        for task in self.tasks {
            let took = tokio::time::timeout(Duration::from_secs(10), task)
                .await
                .expect("a contender hung")
                .unwrap();
            longest = longest.max(took);
        }
        longest
    }
}
