//! One adapter per library: how to connect, and one `Owner` (one contender) per task with a
//! waiting `lock()` and an `unlock()`. Each adapter uses the library's documented API; where a
//! library polls, its retry interval is set to `RETRY` (10 ms) instead of its default (noted per
//! library), so the numbers measure the library rather than a long sleep.

use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Result, anyhow, bail};

/// Poll interval given to every library that waits by polling and lets it be configured.
pub const RETRY: Duration = Duration::from_millis(10);
/// Lease (TTL) for libraries that take one per call; long enough never to expire in a run.
pub const TTL: Duration = Duration::from_secs(30);

pub fn e<E: Debug>(err: E) -> anyhow::Error {
    anyhow!("{err:?}")
}

/// One contender for one key. `lock()` waits until acquired; `unlock()` releases that hold.
pub trait Owner: Send + 'static {
    fn lock(&mut self) -> impl Future<Output = Result<()>> + Send;
    fn unlock(&mut self) -> impl Future<Output = Result<()>> + Send;
}

pub trait Lib: Send + Sync + Sized + 'static {
    type O: Owner;
    const NAME: &'static str;
    /// `Some(reason)` when the library cannot wait for a held lock (so workloads 2 and 3 are n/a).
    const NO_WAIT: Option<&'static str> = None;
    /// Sync-only library: every task runs on its own blocking thread (`spawn_blocking`).
    const SYNC: bool = false;
    /// Needs `notify-keyspace-events KA` on the server (set only during this library's turn).
    const KEYSPACE_EVENTS: bool = false;
    fn connect(url: &str) -> impl Future<Output = Result<Self>> + Send;
    fn owner(self: &Arc<Self>, key: &str) -> impl Future<Output = Result<Self::O>> + Send;
    /// How the library is configured here, for the notes under the tables.
    fn config() -> String;
    /// From now on, a library that cannot wait (the raw baseline) retries a busy key after
    /// 1 ms instead of failing (the skewed many-keys workload contends on its hot keys).
    fn retry_when_busy(&self) {}
}

// ---------------------------------------------------------------------------------------------
// raw baseline: SET key token NX PX + compare-and-delete script by EVALSHA, redis-rs directly.

pub const RAW_UNLOCK_LUA: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

pub struct Raw {
    conn: redis::aio::MultiplexedConnection,
    script: redis::Script,
    tokens: AtomicU64,
    retry: std::sync::atomic::AtomicBool,
}

pub struct RawOwner {
    lib: Arc<Raw>,
    conn: redis::aio::MultiplexedConnection,
    key: String,
    token: Option<String>,
}

impl Lib for Raw {
    type O = RawOwner;
    const NAME: &'static str = "raw SET NX PX + EVALSHA";
    const NO_WAIT: Option<&'static str> = Some("n/a: baseline has no wait");
    async fn connect(url: &str) -> Result<Self> {
        let client = redis::Client::open(url)?;
        let conn = client.get_multiplexed_async_connection().await?;
        Ok(Raw {
            conn,
            script: redis::Script::new(RAW_UNLOCK_LUA),
            tokens: AtomicU64::new(0),
            retry: std::sync::atomic::AtomicBool::new(false),
        })
    }
    async fn owner(self: &Arc<Self>, key: &str) -> Result<RawOwner> {
        Ok(RawOwner {
            lib: self.clone(),
            conn: self.conn.clone(),
            key: key.to_owned(),
            token: None,
        })
    }
    fn config() -> String {
        "one multiplexed connection; 2 round trips per cycle (in the skewed many-keys workload, \
         a busy key is asked again after 1 ms)"
            .into()
    }
    fn retry_when_busy(&self) {
        self.retry.store(true, Ordering::Relaxed);
    }
}

impl Owner for RawOwner {
    async fn lock(&mut self) -> Result<()> {
        let token = format!("t{}", self.lib.tokens.fetch_add(1, Ordering::Relaxed));
        loop {
            let ok: Option<String> = redis::cmd("SET")
                .arg(&self.key)
                .arg(&token)
                .arg("NX")
                .arg("PX")
                .arg(TTL.as_millis() as u64)
                .query_async(&mut self.conn)
                .await?;
            if ok.is_some() {
                break;
            }
            if !self.lib.retry.load(Ordering::Relaxed) {
                bail!("raw baseline found {} held (it never waits)", self.key);
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        self.token = Some(token);
        Ok(())
    }
    async fn unlock(&mut self) -> Result<()> {
        let token = self.token.take().ok_or_else(|| anyhow!("not held"))?;
        let n: i64 = self
            .lib
            .script
            .key(&self.key)
            .arg(&token)
            .invoke_async(&mut self.conn)
            .await?;
        if n != 1 {
            bail!("raw unlock deleted {n} keys");
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// ferrisson

pub struct Ferrisson {
    pub client: ferrisson::Client,
}

pub struct FerrissonOwner {
    lock: ferrisson::RLock,
    guard: Option<ferrisson::LockGuard>,
}

impl Lib for Ferrisson {
    type O = FerrissonOwner;
    const NAME: &'static str = "ferrisson";
    async fn connect(url: &str) -> Result<Self> {
        Ok(Ferrisson {
            client: ferrisson::Client::connect(url).await.map_err(e)?,
        })
    }
    async fn owner(self: &Arc<Self>, key: &str) -> Result<FerrissonOwner> {
        Ok(FerrissonOwner {
            lock: self.client.get_lock(key),
            guard: None,
        })
    }
    fn config() -> String {
        "one Client; `get_lock` per task; `lock()` (watchdog lease, 30 s) / `guard.unlock()`; waits by pub/sub".into()
    }
}

impl FerrissonOwner {
    pub fn new(lock: ferrisson::RLock) -> Self {
        FerrissonOwner { lock, guard: None }
    }
}

/// ferrisson with group commit off (`group_commit(false)`): every operation its own script call,
/// to show what group commit changes, in the same run.
pub struct FerrissonSolo {
    pub client: ferrisson::Client,
}

impl Lib for FerrissonSolo {
    type O = FerrissonOwner;
    const NAME: &'static str = "ferrisson (group commit off)";
    async fn connect(url: &str) -> Result<Self> {
        let client = ferrisson::Client::builder()
            .url(url)
            .group_commit(false)
            .build()
            .await
            .map_err(e)?;
        Ok(FerrissonSolo { client })
    }
    async fn owner(self: &Arc<Self>, key: &str) -> Result<FerrissonOwner> {
        Ok(FerrissonOwner::new(self.client.get_lock(key)))
    }
    fn config() -> String {
        "as ferrisson, with `group_commit(false)`".into()
    }
}

/// ferrisson with starvation mode off (`lock_starvation_threshold(None)`): the unfair policy
/// alone, for workload 9.
pub struct FerrissonUnfair {
    pub client: ferrisson::Client,
}

impl Lib for FerrissonUnfair {
    type O = FerrissonOwner;
    const NAME: &'static str = "ferrisson (starvation mode off)";
    async fn connect(url: &str) -> Result<Self> {
        let client = ferrisson::Client::builder()
            .url(url)
            .lock_starvation_threshold(None)
            .build()
            .await
            .map_err(e)?;
        Ok(FerrissonUnfair { client })
    }
    async fn owner(self: &Arc<Self>, key: &str) -> Result<FerrissonOwner> {
        Ok(FerrissonOwner::new(self.client.get_lock(key)))
    }
    fn config() -> String {
        "as ferrisson, with `lock_starvation_threshold(None)`".into()
    }
}

impl Owner for FerrissonOwner {
    async fn lock(&mut self) -> Result<()> {
        self.guard = Some(self.lock.lock().await.map_err(e)?);
        Ok(())
    }
    async fn unlock(&mut self) -> Result<()> {
        let g = self.guard.take().ok_or_else(|| anyhow!("not held"))?;
        g.unlock().await.map_err(e)
    }
}

/// ferrisson on a Redis Cluster (workload 8): `connect` takes the seed URLs joined by commas.
pub struct FerrissonCluster {
    pub client: ferrisson::Client,
}

impl Lib for FerrissonCluster {
    type O = FerrissonOwner;
    const NAME: &'static str = "ferrisson (cluster)";
    async fn connect(seeds: &str) -> Result<Self> {
        let client = ferrisson::Client::builder()
            .cluster(seeds.split(','))
            .build()
            .await
            .map_err(e)?;
        Ok(FerrissonCluster { client })
    }
    async fn owner(self: &Arc<Self>, key: &str) -> Result<FerrissonOwner> {
        Ok(FerrissonOwner {
            lock: self.client.get_lock(key),
            guard: None,
        })
    }
    fn config() -> String {
        "one Client built with `.cluster(seeds)` (every node a seed); otherwise as ferrisson".into()
    }
}

// ---------------------------------------------------------------------------------------------
// rslock 0.10: LockManager::acquire (loops over lock(); lock() does SET NX PX, and on failure the
// unlock script, then sleeps a random 0..retry_delay) / LockGuard::release.

pub struct Rslock {
    pub mgr: rslock::LockManager,
}

pub struct RslockOwner {
    mgr: rslock::LockManager,
    key: Vec<u8>,
    guard: Option<rslock::LockGuard>,
}

impl Lib for Rslock {
    type O = RslockOwner;
    const NAME: &'static str = "rslock 0.10.0";
    async fn connect(url: &str) -> Result<Self> {
        let mut mgr = rslock::LockManager::new(vec![url.to_owned()]);
        mgr.set_retry(3, RETRY);
        Ok(Rslock { mgr })
    }
    async fn owner(self: &Arc<Self>, key: &str) -> Result<RslockOwner> {
        Ok(RslockOwner {
            mgr: self.mgr.clone(),
            key: key.as_bytes().to_vec(),
            guard: None,
        })
    }
    fn config() -> String {
        format!(
            "one LockManager (one multiplexed connection); `acquire(key, 30 s)` / `release()`; polls: \
             retry delay random 0..{} ms (default 0..200 ms); no renewal on this path",
            RETRY.as_millis()
        )
    }
}

impl Owner for RslockOwner {
    async fn lock(&mut self) -> Result<()> {
        self.guard = Some(self.mgr.acquire(&self.key[..], TTL).await.map_err(e)?);
        Ok(())
    }
    async fn unlock(&mut self) -> Result<()> {
        let g = self.guard.take().ok_or_else(|| anyhow!("not held"))?;
        g.release().await; // best effort, returns ()
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// rlock 0.2 (async API): RLock::acquire_mutex_with_options / RLockGuard::release.

pub struct Rlock {
    pub mgr: rlock::async_lock::RLock,
    opts: rlock::AcquireOptions,
}

pub struct RlockOwner {
    lib: Arc<Rlock>,
    key: String,
    guard: Option<rlock::async_lock::RLockGuard>,
}

impl Lib for Rlock {
    type O = RlockOwner;
    const NAME: &'static str = "rlock 0.2.0";
    async fn connect(url: &str) -> Result<Self> {
        let mgr = rlock::async_lock::RLock::new(url).await?;
        let opts = rlock::AcquireOptions::builder()
            .retry_interval(RETRY)
            .build()
            .map_err(e)?;
        Ok(Rlock { mgr, opts })
    }
    async fn owner(self: &Arc<Self>, key: &str) -> Result<RlockOwner> {
        Ok(RlockOwner {
            lib: self.clone(),
            key: key.to_owned(),
            guard: None,
        })
    }
    fn config() -> String {
        format!(
            "one RLock manager (ConnectionManager); `acquire_mutex_with_options` / `release()`; \
             default 10 s TTL with auto renewal; polls every {} ms (default 100 ms)",
            RETRY.as_millis()
        )
    }
}

impl Owner for RlockOwner {
    async fn lock(&mut self) -> Result<()> {
        let g = self
            .lib
            .mgr
            .acquire_mutex_with_options(&self.key, self.lib.opts.clone())
            .await
            .map_err(e)?;
        self.guard = Some(g);
        Ok(())
    }
    async fn unlock(&mut self) -> Result<()> {
        let mut g = self.guard.take().ok_or_else(|| anyhow!("not held"))?;
        g.release().await.map_err(e)
    }
}

// ---------------------------------------------------------------------------------------------
// async-redis-lock 0.4: Locker::acquire_with_options / Lock::release.

pub struct AsyncRedisLock {
    pub locker: async_redis_lock::Locker,
    opts: async_redis_lock::Options,
}

pub struct AsyncRedisLockOwner {
    lib: Arc<AsyncRedisLock>,
    key: String,
    guard: Option<async_redis_lock::Lock>,
}

impl Lib for AsyncRedisLock {
    type O = AsyncRedisLockOwner;
    const NAME: &'static str = "async-redis-lock 0.4.0";
    async fn connect(url: &str) -> Result<Self> {
        let locker = async_redis_lock::Locker::from_redis_url(url)
            .await
            .map_err(e)?;
        let opts = async_redis_lock::Options::new().retry(RETRY).timeout(None);
        Ok(AsyncRedisLock { locker, opts })
    }
    async fn owner(self: &Arc<Self>, key: &str) -> Result<AsyncRedisLockOwner> {
        Ok(AsyncRedisLockOwner {
            lib: self.clone(),
            key: key.to_owned(),
            guard: None,
        })
    }
    fn config() -> String {
        format!(
            "one Locker (ConnectionManager); `acquire_with_options` / `release()`; default 3 s TTL \
             extended every 1 s; polls every {} ms (default 100 ms), no acquire timeout (default 1 s)",
            RETRY.as_millis()
        )
    }
}

impl Owner for AsyncRedisLockOwner {
    async fn lock(&mut self) -> Result<()> {
        self.guard = Some(
            self.lib
                .locker
                .acquire_with_options(&self.lib.opts, &self.key)
                .await
                .map_err(e)?,
        );
        Ok(())
    }
    async fn unlock(&mut self) -> Result<()> {
        let g = self.guard.take().ok_or_else(|| anyhow!("not held"))?;
        g.release().await.map_err(e)
    }
}

// ---------------------------------------------------------------------------------------------
// redis-lock 0.5: MultiResourceLock (the README API): setup() loads its Redis function library;
// acquire(resources, expiration, timeout, sleep) / release(lock_id). Each call opens a new
// multiplexed connection, and release SCANs every `lock:*` key: both are the library's own design.

pub struct RedisLock {
    client: redis027::Client,
}

pub struct RedisLockOwner {
    lock: redis_lock::MultiResourceLock,
    resources: Vec<String>,
    id: Option<String>,
}

impl Lib for RedisLock {
    type O = RedisLockOwner;
    const NAME: &'static str = "redis-lock 0.5.1";
    async fn connect(url: &str) -> Result<Self> {
        let client = redis027::Client::open(url)?;
        redis_lock::setup(&client)
            .await
            .map_err(|err| anyhow!("{err}"))?;
        Ok(RedisLock { client })
    }
    async fn owner(self: &Arc<Self>, key: &str) -> Result<RedisLockOwner> {
        Ok(RedisLockOwner {
            lock: redis_lock::MultiResourceLock::new(self.client.clone())?,
            resources: vec![key.to_owned()],
            id: None,
        })
    }
    fn config() -> String {
        format!(
            "MultiResourceLock per task over one redis::Client; `acquire(&[key], 30 s, 1 h, {} ms)` \
             (no default sleep for acquire; DEFAULT_SLEEP is 1 s) / `release(id)`; opens a connection per call",
            RETRY.as_millis()
        )
    }
}

impl Owner for RedisLockOwner {
    async fn lock(&mut self) -> Result<()> {
        let id = self
            .lock
            .acquire(&self.resources, TTL, Duration::from_secs(3600), RETRY)
            .await?
            .ok_or_else(|| anyhow!("redis-lock acquire timed out"))?;
        self.id = Some(id);
        Ok(())
    }
    async fn unlock(&mut self) -> Result<()> {
        let id = self.id.take().ok_or_else(|| anyhow!("not held"))?;
        let n = self.lock.release(&id).await?;
        if n != 1 {
            bail!("redis-lock release removed {n} keys");
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// distkit 0.7 (feature "lock"): Mutex::new(LockOptions) per owner; lock() / MutexGuard::release.

pub struct Distkit {
    conn: redis::aio::ConnectionManager,
}

pub struct DistkitOwner {
    mutex: Arc<distkit::lock::Mutex>,
    guard: Option<distkit::lock::MutexGuard>,
}

impl Lib for Distkit {
    type O = DistkitOwner;
    const NAME: &'static str = "distkit 0.7.1";
    async fn connect(url: &str) -> Result<Self> {
        let client = redis::Client::open(url)?;
        let conn = client.get_connection_manager().await?;
        Ok(Distkit { conn })
    }
    async fn owner(self: &Arc<Self>, key: &str) -> Result<DistkitOwner> {
        let key = distkit::DistkitRedisKey::try_from(key.to_owned()).map_err(e)?;
        let opts = distkit::lock::LockOptions::builder(key, self.conn.clone())
            .retry_interval(RETRY)
            .build();
        Ok(DistkitOwner {
            mutex: distkit::lock::Mutex::new(opts),
            guard: None,
        })
    }
    fn config() -> String {
        format!(
            "one ConnectionManager; a `Mutex` per task; `lock()` / `release()`; 30 s TTL renewed every \
             10 s (always on); polls every {} ms (default 50 ms)",
            RETRY.as_millis()
        )
    }
}

impl Owner for DistkitOwner {
    async fn lock(&mut self) -> Result<()> {
        self.guard = Some(self.mutex.lock().await.map_err(e)?);
        Ok(())
    }
    async fn unlock(&mut self) -> Result<()> {
        let g = self.guard.take().ok_or_else(|| anyhow!("not held"))?;
        g.release().await.map_err(e)?;
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// redlock 2.0: synchronous (its `acquire_async` only wraps the blocking calls); every SET and
// every unlock opens a new TCP connection. Run on blocking threads, one per task.

pub struct Redlock {
    rl: redlock::RedLock,
}

pub struct RedlockOwner {
    lib: Arc<Redlock>,
    key: Vec<u8>,
    held: Option<Vec<u8>>,
}

impl Lib for Redlock {
    type O = RedlockOwner;
    const NAME: &'static str = "redlock 2.0.0";
    const SYNC: bool = true;
    async fn connect(url: &str) -> Result<Self> {
        let mut rl = redlock::RedLock::new(vec![url.to_owned()]);
        rl.set_retry(3, RETRY.as_millis() as u32);
        Ok(Redlock { rl })
    }
    async fn owner(self: &Arc<Self>, key: &str) -> Result<RedlockOwner> {
        Ok(RedlockOwner {
            lib: self.clone(),
            key: key.as_bytes().to_vec(),
            held: None,
        })
    }
    fn config() -> String {
        format!(
            "sync only: each task on its own blocking thread (`spawn_blocking`); `lock(key, 30 s)` in a \
             loop (what `acquire` does) / `unlock`; random 0..{} ms retry sleep (default 0..200 ms); \
             a new TCP connection per command",
            RETRY.as_millis()
        )
    }
}

impl Owner for RedlockOwner {
    // Blocking inside the future on purpose: these futures only ever run on blocking threads.
    async fn lock(&mut self) -> Result<()> {
        loop {
            if let Some(l) = self.lib.rl.lock(&self.key, TTL.as_millis() as usize)? {
                self.held = Some(l.val.clone());
                return Ok(());
            }
        }
    }
    async fn unlock(&mut self) -> Result<()> {
        let val = self.held.take().ok_or_else(|| anyhow!("not held"))?;
        let l = redlock::Lock {
            resource: self.key.clone(),
            val,
            validity_time: 0,
            lock_manager: &self.lib.rl,
        };
        self.lib.rl.unlock(&l);
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// redisson 0.1 (async feature): AsyncRedissonClient::get_lock per task; lock() / unlock().

pub struct Redisson {
    client: redisson::AsyncRedissonClient,
}

pub struct RedissonOwner {
    lock: redisson::AsyncRLock,
}

impl Lib for Redisson {
    type O = RedissonOwner;
    const NAME: &'static str = "redisson 0.1.0";
    async fn connect(url: &str) -> Result<Self> {
        let config = redisson::RedissonConfig::single_server(url).with_pool_size(64);
        Ok(Redisson {
            client: redisson::AsyncRedissonClient::new(config)
                .await
                .map_err(e)?,
        })
    }
    async fn owner(self: &Arc<Self>, key: &str) -> Result<RedissonOwner> {
        Ok(RedissonOwner {
            lock: self.client.get_lock(key),
        })
    }
    fn config() -> String {
        "one AsyncRedissonClient, pool size 64 (default 10) so 64 tasks are not capped by the pool; \
         `get_lock` per task; `lock()` / `unlock()` (whose `false` answer is ignored: it answers false for \
         every full release); polls every 100 ms (fixed, not configurable)"
            .into()
    }
}

impl Owner for RedissonOwner {
    async fn lock(&mut self) -> Result<()> {
        self.lock.lock().await.map_err(e)
    }
    async fn unlock(&mut self) -> Result<()> {
        // unlock() answers Ok(false) after a full release too: its script returns 0 for "released"
        // and the crate reads only > 0 as success. A release that did not happen would show as
        // the next contender never getting the lock.
        self.lock.unlock().await.map_err(e)?;
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// rdlock 1.0: BasicLock per task; lock() waits on keyspace notifications (needs
// notify-keyspace-events KA, set only while rdlock runs); release() is a plain DEL.

pub struct Rdlock {
    mgr: rdlock::RdLockConnectionManager,
}

pub struct RdlockOwner {
    lock: rdlock::lock::BasicLock,
}

impl Lib for Rdlock {
    type O = RdlockOwner;
    const NAME: &'static str = "rdlock 1.0.3";
    const KEYSPACE_EVENTS: bool = true;
    async fn connect(url: &str) -> Result<Self> {
        Ok(Rdlock {
            mgr: rdlock::RdLockConnectionManager::new(url).await.map_err(e)?,
        })
    }
    async fn owner(self: &Arc<Self>, key: &str) -> Result<RdlockOwner> {
        Ok(RdlockOwner {
            lock: self.mgr.new_basic_lock(key, TTL.as_secs()),
        })
    }
    fn config() -> String {
        "one RdLockConnectionManager; `new_basic_lock(key, 30 s)` per task; `lock()` / `release()` \
         (a plain DEL, no owner check); each waiting call opens its own pub/sub connection and PSUBSCRIBEs; server runs \
         with notify-keyspace-events KA during rdlock's turn only"
            .into()
    }
}

impl Owner for RdlockOwner {
    async fn lock(&mut self) -> Result<()> {
        self.lock.lock().await.map_err(e)
    }
    async fn unlock(&mut self) -> Result<()> {
        self.lock.release().await.map_err(e)
    }
}
