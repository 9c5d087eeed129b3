//! A Java Redisson client's fair lock, played by a test through `redisson_fair.lua` (an emulation
//! written from Redisson's described behaviour, not Redisson's code): owners `<uuid>:<threadId>`,
//! turn timeouts from the Java client's own clock, the thread wait time W subtracted from every
//! waiter on each grant.

use std::time::Duration;

use redis::aio::MultiplexedConnection;

use super::RedisServer;

/// Redisson's default thread wait time (`threadWaitTime`), 5 minutes.
pub const REDISSON_THREAD_WAIT: Duration = Duration::from_secs(300);

/// The emulated Redisson scripts.
fn script() -> redis::Script {
    redis::Script::new(include_str!("redisson_fair.lua"))
}

/// One Java thread's handle on a fair lock, as Redisson's `RFairLock` drives it.
pub struct JavaFairLock {
    conn: MultiplexedConnection,
    name: String,
    owner: String,
    lease: Duration,
    thread_wait: Duration,
    /// How far the Java host's clock is ahead of the Redis server's (negative: behind).
    skew_ms: i64,
}

impl JavaFairLock {
    /// Thread `thread` of a fresh Java client, with a 30 s lease, Redisson's default thread
    /// wait time and a clock in step with the server's.
    pub async fn new(server: &RedisServer, name: &str, thread: u64) -> Self {
        JavaFairLock {
            conn: server.raw().await,
            name: name.to_owned(),
            owner: format!("{}:{thread}", uuid::Uuid::new_v4()),
            lease: Duration::from_secs(30),
            thread_wait: REDISSON_THREAD_WAIT,
            skew_ms: 0,
        }
    }

    /// The same, with another thread wait time (the Java side's `threadWaitTime`).
    pub fn thread_wait(mut self, wait: Duration) -> Self {
        self.thread_wait = wait;
        self
    }

    /// The owner string Redis sees: `<uuid>:<threadId>`.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The channel this thread is told on when it is first at a free lock.
    pub fn channel(&self) -> String {
        format!("redisson_lock__channel:{{{}}}:{}", self.name, self.owner)
    }

    /// The Java host's clock: the server's time plus the skew.
    pub async fn now_ms(&mut self) -> i64 {
        server_time_ms(&mut self.conn).await + self.skew_ms
    }

    async fn run(&mut self, op: &str) -> Option<i64> {
        let now = self.now_ms().await;
        script()
            .key(&self.name)
            .key(format!("redisson_lock_queue:{{{}}}", self.name))
            .key(format!("redisson_lock_timeout:{{{}}}", self.name))
            .arg(op)
            .arg(&self.owner)
            .arg(self.lease.as_millis() as u64)
            .arg(self.thread_wait.as_millis() as u64)
            .arg(now)
            .arg(format!("redisson_lock__channel:{{{}}}", self.name))
            .invoke_async(&mut self.conn)
            .await
            .expect("the emulated Redisson script runs")
    }

    /// One attempt of a waiting `tryLock`/`lock`: `None` granted, else how long to wait (ms);
    /// joins the queue when refused.
    pub async fn acquire(&mut self) -> Option<i64> {
        self.run("acquire").await
    }

    /// `tryLock()` without waiting: true when granted; never queues.
    pub async fn try_lock(&mut self) -> bool {
        self.run("try").await.is_none()
    }

    /// `unlock()`: 1 released, 0 holds remain, `None` held nothing.
    pub async fn release(&mut self) -> Option<i64> {
        self.run("release").await
    }

    /// The waiter stops waiting (its wait timed out or it was interrupted).
    pub async fn give_up(&mut self) {
        self.run("give_up").await;
    }

    /// Waits as a Java `lock()` does, calling again every few ms (a Java thread wakes on its
    /// channel or when the ttl it was told runs out; polling gives it the same turns sooner).
    /// Panics when not granted within `within`.
    pub async fn lock(&mut self, within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        while let Some(ttl) = self.acquire().await {
            assert!(
                tokio::time::Instant::now() < deadline,
                "Java waiter {} not granted within {within:?}",
                self.owner
            );
            let nap = u64::try_from(ttl).unwrap_or(0).clamp(1, 20);
            tokio::time::sleep(Duration::from_millis(nap)).await;
        }
    }
}

/// The server's clock (`TIME`) in ms.
pub async fn server_time_ms(raw: &mut MultiplexedConnection) -> i64 {
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query_async(raw).await.unwrap();
    secs * 1000 + micros / 1000
}
