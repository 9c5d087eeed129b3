//! A Java Redisson client's `RLock`, as a test or the fairness benchmark plays it through
//! `redisson_lock.lua`: Redisson's waiting loop written from its described behaviour, not its
//! code. One [`JavaClient`] is one JVM: one pub/sub connection, subscribed to the lock's channel
//! (`redisson_lock__channel:{name}`) for as long as it lives, and one wake-up semaphore per
//! lock that every unlock message `0` adds one permit to (`1`, a read unlock, adds one per
//! waiter). A thread's `lock()` tries; refused, it waits for a permit at most the holder's TTL
//! (for ever without one) and tries again, until it gets the lock.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;
use redis::aio::MultiplexedConnection;

/// The emulated Redisson script.
fn script() -> &'static redis::Script {
    static SCRIPT: std::sync::OnceLock<redis::Script> = std::sync::OnceLock::new();
    SCRIPT.get_or_init(|| redis::Script::new(include_str!("redisson_lock.lua")))
}

/// Redisson's default lease for `lock()` (its watchdog's `lockWatchdogTimeout`): a hold shorter
/// than a third of it is never renewed, so none is emulated.
pub const JAVA_LEASE: Duration = Duration::from_secs(30);

/// One Java client (a JVM) waiting on one lock.
pub struct JavaClient {
    conn: MultiplexedConnection,
    id: String,
    name: String,
    channel: String,
    wakeups: Arc<tokio::sync::Semaphore>,
    waiting: Arc<AtomicUsize>,
    listener: tokio::task::JoinHandle<()>,
    /// How much later than this process's own tasks the emulated JVM retries after an unlock
    /// message (`FERRISSON_JAVA_REACTION_US`; none by default): a real JVM's netty thread and
    /// parked thread add a wake-up or two that a Tokio task does not pay.
    reaction: Option<Duration>,
}

impl Drop for JavaClient {
    fn drop(&mut self) {
        self.listener.abort();
    }
}

impl JavaClient {
    /// Connects to `url` and subscribes to the channel of the lock `name`; acts on a message
    /// `FERRISSON_JAVA_REACTION_US` µs late, if that is set.
    pub async fn connect(url: &str, name: &str) -> redis::RedisResult<Arc<JavaClient>> {
        let reaction = std::env::var("FERRISSON_JAVA_REACTION_US")
            .ok()
            .and_then(|us| us.parse().ok())
            .map(Duration::from_micros);
        Self::connect_reacting(url, name, reaction).await
    }

    /// As [`connect`](Self::connect), acting on a message `reaction` late.
    pub async fn connect_reacting(
        url: &str,
        name: &str,
        reaction: Option<Duration>,
    ) -> redis::RedisResult<Arc<JavaClient>> {
        let client = redis::Client::open(url)?;
        let conn = client.get_multiplexed_async_connection().await?;
        let channel = format!("redisson_lock__channel:{{{name}}}");
        let mut pubsub = client.get_async_pubsub().await?;
        pubsub.subscribe(&channel).await?;
        let wakeups = Arc::new(tokio::sync::Semaphore::new(0));
        let waiting = Arc::new(AtomicUsize::new(0));
        let listener = tokio::spawn({
            let (wakeups, waiting) = (wakeups.clone(), waiting.clone());
            async move {
                let mut messages = pubsub.into_on_message();
                while let Some(message) = messages.next().await {
                    let payload: Vec<u8> = message.get_payload_bytes().to_vec();
                    let permits = match payload.as_slice() {
                        b"0" => 1,
                        b"1" => waiting.load(Ordering::Relaxed).max(1),
                        _ => 0,
                    };
                    wakeups.add_permits(permits);
                }
            }
        });
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        Ok(Arc::new(JavaClient {
            conn,
            id: format!("java-{:x}-{nanos:x}", std::process::id()),
            name: name.to_owned(),
            channel,
            wakeups,
            waiting,
            listener,
            reaction,
        }))
    }

    /// Thread `thread` of this client.
    pub fn thread(self: &Arc<Self>, thread: u64) -> JavaThread {
        JavaThread {
            client: self.clone(),
            conn: self.conn.clone(),
            owner: format!("{}:{thread}", self.id),
        }
    }
}

/// One Java thread's handle on the lock.
pub struct JavaThread {
    client: Arc<JavaClient>,
    conn: MultiplexedConnection,
    owner: String,
}

impl JavaThread {
    /// The hash field this thread holds the lock under.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// One try: `None` taken, else the holder's TTL in ms.
    pub async fn try_lock(&mut self) -> redis::RedisResult<Option<i64>> {
        script()
            .key(&self.client.name)
            .arg("lock")
            .arg(&self.owner)
            .arg(JAVA_LEASE.as_millis() as u64)
            .invoke_async(&mut self.conn)
            .await
    }

    /// Redisson's `lock()`: try; refused, wait for an unlock message (at most the TTL) and try
    /// again.
    pub async fn lock(&mut self) -> redis::RedisResult<()> {
        let Some(mut ttl) = self.try_lock().await? else {
            return Ok(());
        };
        self.client.waiting.fetch_add(1, Ordering::Relaxed);
        let client = self.client.clone();
        let result = loop {
            let wakeup = client.wakeups.acquire();
            let waited = if ttl >= 0 {
                tokio::time::timeout(Duration::from_millis(ttl.max(1) as u64), wakeup)
                    .await
                    .ok()
            } else {
                Some(wakeup.await)
            };
            if let Some(Ok(permit)) = waited {
                permit.forget();
                if let Some(delay) = client.reaction {
                    // A JVM slower to act on the message than this process (see `reaction`).
                    let until = std::time::Instant::now() + delay;
                    while std::time::Instant::now() < until {
                        tokio::task::yield_now().await;
                    }
                }
            }
            match self.try_lock().await {
                Ok(None) => break Ok(()),
                Ok(Some(left)) => ttl = left,
                Err(e) => break Err(e),
            }
        };
        self.client.waiting.fetch_sub(1, Ordering::Relaxed);
        result
    }

    /// Gives back one hold: `None` not held, `Some(true)` released and published.
    pub async fn unlock(&mut self) -> redis::RedisResult<Option<bool>> {
        let reply: Option<i64> = script()
            .key(&self.client.name)
            .key(&self.client.channel)
            .arg("unlock")
            .arg(&self.owner)
            .arg(JAVA_LEASE.as_millis() as u64)
            .invoke_async(&mut self.conn)
            .await?;
        Ok(reply.map(|n| n == 1))
    }
}
