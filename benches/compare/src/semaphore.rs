//! Workload 7: a counting semaphore of SEM_PERMITS permits shared by SEM_TASKS tasks on one
//! client, each task taking one permit, holding it SEM_HOLD and giving it back, for SEM_DURATION.
//! Every holder goes through `Inside::with_limit(SEM_PERMITS)`: a fifth holder at once panics
//! the task and the library shows as FAILED.
//!
//! Only libraries with a Redis-backed counting semaphore take part (`sem_entries`), plus a raw
//! redis-rs floor: one script that checks the count and DECRBYs it, INCRBY to give back, and a
//! short sleep between failed attempts.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, bail};
use distributed_lock_core::traits::{DistributedSemaphore, LockHandle, SemaphoreProvider};

use crate::Kind;
use crate::libs::{RETRY, TTL, e};
use crate::server::{CmdStats, commandstats, cpu_now};
use crate::workloads::{Inside, join, pct};

pub const SEM_PERMITS: u32 = 4;
pub const SEM_TASKS: usize = 16;
/// How long a task holds its permit. Long enough that the four permits are busy and twelve tasks
/// wait, so the rate measures how fast a released permit reaches a waiter (with 0 the task that
/// released mostly takes its permit straight back), and an overlap has a whole millisecond to
/// show; short enough that the handoff, not the hold, is what differs between libraries.
pub const SEM_HOLD: Duration = Duration::from_millis(1);
pub const SEM_DURATION: Duration = Duration::from_secs(3);
/// Runs per library, interleaved across the libraries (as workloads 1 and 2).
pub const SEM_ROUNDS: usize = 3;
pub const SEM_KEY: &str = "bench_sem";
/// The raw floor's sleep between failed attempts.
pub const RAW_SEM_RETRY: Duration = Duration::from_millis(1);
/// A run whose last grant came this long before the end counts as stalled.
const STALL: Duration = Duration::from_millis(500);
/// How long an acquire pending at the end may still take before it is dropped.
const DRAIN: Duration = Duration::from_secs(5);

/// One task's view of the semaphore: `acquire()` waits for one permit, `release()` gives one back.
pub trait SemHolder: Send + 'static {
    fn acquire(&mut self) -> impl Future<Output = Result<()>> + Send;
    fn release(&mut self) -> impl Future<Output = Result<()>> + Send;
}

pub trait SemLib: Send + Sync + Sized + 'static {
    type H: SemHolder;
    const NAME: &'static str;
    const KIND: Kind;
    /// Connects, and sets the semaphore up with `permits` (the server was just flushed).
    fn connect(url: &str, permits: u32) -> impl Future<Output = Result<Self>> + Send;
    fn holder(self: &Arc<Self>) -> impl Future<Output = Result<Self::H>> + Send;
    /// Permits free now, read through the library where it can tell (else from its key). With
    /// every holder gone it must be the permits set up: less means permits were lost.
    fn free_permits(
        self: &Arc<Self>,
        admin: &mut redis::aio::MultiplexedConnection,
    ) -> impl Future<Output = Result<i64>> + Send;
    /// How the library is driven, for the notes under the table.
    fn config() -> String;
}

// ---------------------------------------------------------------------------------------------
// The rows of the table.

type SemRunner = fn(String) -> std::pin::Pin<Box<dyn Future<Output = Result<SemRun>> + Send>>;

pub struct SemEntry {
    pub name: &'static str,
    pub kind: Kind,
    pub config: String,
    pub run: SemRunner,
}

pub fn sem_entry<L: SemLib>() -> SemEntry {
    SemEntry {
        name: L::NAME,
        kind: L::KIND,
        config: L::config(),
        run: |url| Box::pin(run::<L>(url)),
    }
}

/// The rows of workload 7, in table order: the raw floor, ferrisson, then the peers.
///
/// The table computes "vs ferrisson" against the first ferrisson row (`RSemaphore`), so the
/// second (`RPermitExpirableSemaphore`) reads as the cost of owned, expiring permits.
pub fn sem_entries() -> Vec<SemEntry> {
    vec![
        sem_entry::<RawSem>(),
        sem_entry::<FerrissonSem>(),
        sem_entry::<FerrissonPermits>(),
        sem_entry::<RedissonSem>(),
        sem_entry::<DlrSem>(),
    ]
}

/// Crates looked at that have no Redis-backed counting semaphore, for the notes.
pub const NOT_INCLUDED: &str = "distkit 0.7.1 (counters, `Mutex`, `RwLock` and rate limiting; no semaphore), \
     rslock 0.10.0, rlock 0.2.0, async-redis-lock 0.4.0, redis-lock 0.5.1, redlock 2.0.0 and rdlock \
     1.0.3 (locks only)";

// ---------------------------------------------------------------------------------------------
// The measurement.

/// One run of one library.
pub struct SemRun {
    cycles: usize,
    secs: f64,
    /// Acquire latencies, sorted.
    lat: Vec<f64>,
    per_task: Vec<usize>,
    hold_ms_mean: f64,
    peak: usize,
    before: CmdStats,
    after: CmdStats,
    cpu0: (f64, f64),
    cpu1: (f64, f64),
    /// Seconds from the start to the last grant, when that was STALL or more before the end.
    stalled_at: Option<f64>,
    /// Permits free once every task has released.
    free_after: i64,
}

/// Several runs of one library: the median run (by rate) for everything but the range, the
/// per-task counts (every run) and the peak (the highest of any run).
pub struct Semaphore {
    pub runs: usize,
    pub cycles_per_s: f64,
    pub range: (f64, f64),
    pub acq_p50_ms: f64,
    pub acq_p99_ms: f64,
    pub per_task_min: usize,
    pub per_task_max: usize,
    pub hold_ms_mean: f64,
    pub peak: usize,
    pub reads_per_cycle: f64,
    pub scripts_per_cycle: f64,
    pub script_exec_us_per_cycle: f64,
    pub cmds_per_cycle: f64,
    pub client_us_per_cycle: f64,
    pub server_us_per_cycle: f64,
    /// Runs that stalled, and when (s after the start) the first of them granted last.
    pub stalled: Option<(usize, f64)>,
    /// Permits free after each run, every holder gone (SEM_PERMITS when none was lost).
    pub free_after: Vec<i64>,
}

impl Semaphore {
    /// Cycles/s if a released permit reached a waiter at no cost: permits ÷ hold.
    pub fn ceiling(&self) -> f64 {
        SEM_PERMITS as f64 / (self.hold_ms_mean / 1000.0)
    }
}

pub fn aggregate(mut runs: Vec<SemRun>) -> Option<Semaphore> {
    if runs.is_empty() {
        return None;
    }
    let rate = |r: &SemRun| r.cycles as f64 / r.secs;
    runs.sort_by(|a, b| rate(a).total_cmp(&rate(b)));
    let count = runs.len();
    let range = (rate(&runs[0]), rate(&runs[count - 1]));
    let per_task: Vec<usize> = runs
        .iter()
        .flat_map(|r| r.per_task.iter().copied())
        .collect();
    let peak = runs.iter().map(|r| r.peak).max().unwrap_or(0);
    let stalled_runs: Vec<f64> = runs.iter().filter_map(|r| r.stalled_at).collect();
    let stalled = stalled_runs.first().map(|&at| (stalled_runs.len(), at));
    let free_after = runs.iter().map(|r| r.free_after).collect();
    let m = runs.swap_remove(count / 2);
    let per = |x: f64| x / m.cycles.max(1) as f64;
    Some(Semaphore {
        runs: count,
        cycles_per_s: rate(&m),
        range,
        acq_p50_ms: pct(&m.lat, 50.0),
        acq_p99_ms: pct(&m.lat, 99.0),
        per_task_min: per_task.iter().copied().min().unwrap_or(0),
        per_task_max: per_task.iter().copied().max().unwrap_or(0),
        hold_ms_mean: m.hold_ms_mean,
        peak,
        // minus the read of the second INFO itself
        reads_per_cycle: per((m.after.reads - m.before.reads - 1) as f64),
        scripts_per_cycle: per((m.after.scripts - m.before.scripts) as f64),
        script_exec_us_per_cycle: per((m.after.script_usec - m.before.script_usec) as f64),
        cmds_per_cycle: per((m.after.total - m.before.total) as f64),
        client_us_per_cycle: per((m.cpu1.0 - m.cpu0.0) * 1000.0),
        server_us_per_cycle: per((m.cpu1.1 - m.cpu0.1) * 1000.0),
        stalled,
        free_after,
    })
}

/// One run on the shared 2-worker runtime: connect and set the permits, one warm-up cycle per
/// task, then SEM_TASKS tasks cycle until SEM_DURATION is over. An acquire still waiting then is
/// let finish (up to DRAIN) and given back, not counted; the measured time ends with the last
/// counted release, the Redis and CPU readings once every task is done.
pub async fn run<L: SemLib>(url: String) -> Result<SemRun> {
    let mut admin = redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let lib = Arc::new(L::connect(&url, SEM_PERMITS).await?);
    let inside = Inside::with_limit(SEM_PERMITS as usize);
    let barrier = Arc::new(tokio::sync::Barrier::new(SEM_TASKS));
    // Taken by one task between two barriers, while every task waits: exactly before the run.
    let before = Arc::new(tokio::sync::OnceCell::<(CmdStats, (f64, f64), Instant)>::new());
    let last_grant = Arc::new(Mutex::new(None::<Instant>));
    let mut handles = Vec::new();
    for _ in 0..SEM_TASKS {
        let (lib, inside, barrier, before, last_grant, admin) = (
            lib.clone(),
            inside.clone(),
            barrier.clone(),
            before.clone(),
            last_grant.clone(),
            admin.clone(),
        );
        handles.push(tokio::spawn(async move {
            let mut h = lib.holder().await?;
            // Warm-up: connections, scripts and subscriptions in place.
            h.acquire().await?;
            h.release().await?;
            if barrier.wait().await.is_leader() {
                let mut admin = admin;
                before
                    .get_or_try_init(|| async {
                        let s = commandstats(&mut admin).await?;
                        Ok::<_, anyhow::Error>((s, cpu_now(), Instant::now()))
                    })
                    .await?;
            }
            barrier.wait().await;
            let start = before
                .get()
                .ok_or_else(|| anyhow!("no commandstats before the run"))?
                .2;
            let deadline = start + SEM_DURATION;
            let (mut lat, mut holds) = (Vec::new(), Vec::new());
            let mut last_end = start;
            while Instant::now() < deadline {
                let t = Instant::now();
                // An acquire pending at the deadline may finish (and give its permit straight
                // back, uncounted): cancelling it could lose a permit in a library that is not
                // cancel-safe, which "free after" would then blame on the library.
                match tokio::time::timeout_at((deadline + DRAIN).into(), h.acquire()).await {
                    Ok(r) => r?,
                    Err(_) => break, // stuck: not counted, the permit count may be off
                }
                let got = Instant::now();
                if got >= deadline {
                    h.release().await?;
                    break;
                }
                *last_grant.lock().unwrap() = Some(got);
                inside.enter(L::NAME);
                tokio::time::sleep(SEM_HOLD).await;
                holds.push(got.elapsed().as_secs_f64() * 1000.0);
                inside.exit();
                h.release().await?;
                last_end = Instant::now();
                lat.push((got - t).as_secs_f64() * 1000.0);
            }
            Ok::<_, anyhow::Error>((lat, holds, last_end))
        }));
    }
    let mut lat = Vec::new();
    let mut holds = Vec::new();
    let mut per_task = Vec::new();
    let mut end = None::<Instant>;
    let mut first_err = None;
    for h in handles {
        match join(h).await {
            Ok((l, hs, t)) => {
                per_task.push(l.len());
                lat.extend(l);
                holds.extend(hs);
                end = Some(end.map_or(t, |e| e.max(t)));
            }
            Err(err) => {
                first_err.get_or_insert(err);
            }
        }
    }
    let cpu1 = cpu_now();
    let after = commandstats(&mut admin).await?;
    if let Some(err) = first_err {
        return Err(err);
    }
    let free_after = lib.free_permits(&mut admin).await?;
    let (before, cpu0, start) = *before
        .get()
        .ok_or_else(|| anyhow!("no commandstats before the run"))?;
    let end = end.unwrap_or_else(Instant::now);
    let stalled_at = match *last_grant.lock().unwrap() {
        Some(g) if g + STALL < start + SEM_DURATION => {
            Some(g.saturating_duration_since(start).as_secs_f64())
        }
        Some(_) => None,
        None => Some(0.0),
    };
    lat.sort_by(|a, b| a.total_cmp(b));
    Ok(SemRun {
        cycles: lat.len(),
        secs: (end - start).as_secs_f64(),
        lat,
        per_task,
        hold_ms_mean: holds.iter().sum::<f64>() / holds.len().max(1) as f64,
        peak: inside.peak(),
        before,
        after,
        cpu0,
        cpu1,
        stalled_at,
        free_after,
    })
}

// ---------------------------------------------------------------------------------------------
// raw floor: one script checks the count and DECRBYs it; INCRBY gives back; failed attempts
// sleep RAW_SEM_RETRY and ask again. Correct (the check and the take are one script) and as
// cheap as a semaphore on a counter gets: one round trip to take, one to give back.

pub const RAW_SEM_ACQUIRE_LUA: &str = "local free = tonumber(redis.call('get', KEYS[1]) or '0') \
     if free >= tonumber(ARGV[1]) then return redis.call('decrby', KEYS[1], ARGV[1]) end \
     return -1";

pub struct RawSem {
    conn: redis::aio::MultiplexedConnection,
    acquire: redis::Script,
}

pub struct RawSemHolder {
    lib: Arc<RawSem>,
    conn: redis::aio::MultiplexedConnection,
}

impl SemLib for RawSem {
    type H = RawSemHolder;
    const NAME: &'static str = "raw DECRBY script + INCRBY";
    const KIND: Kind = Kind::Raw;
    async fn connect(url: &str, permits: u32) -> Result<Self> {
        let mut conn = redis::Client::open(url)?
            .get_multiplexed_async_connection()
            .await?;
        let _: () = redis::cmd("SET")
            .arg(SEM_KEY)
            .arg(permits)
            .query_async(&mut conn)
            .await?;
        Ok(RawSem {
            conn,
            acquire: redis::Script::new(RAW_SEM_ACQUIRE_LUA),
        })
    }
    async fn holder(self: &Arc<Self>) -> Result<RawSemHolder> {
        Ok(RawSemHolder {
            lib: self.clone(),
            conn: self.conn.clone(),
        })
    }
    async fn free_permits(
        self: &Arc<Self>,
        admin: &mut redis::aio::MultiplexedConnection,
    ) -> Result<i64> {
        let free: Option<i64> = redis::cmd("GET").arg(SEM_KEY).query_async(admin).await?;
        Ok(free.unwrap_or(0))
    }
    fn config() -> String {
        format!(
            "one multiplexed connection; acquire: a script that DECRBYs the count if enough are free \
             (EVALSHA), else sleep {} ms and ask again; release: INCRBY. No wake-up, no record of \
             holders",
            RAW_SEM_RETRY.as_millis()
        )
    }
}

impl SemHolder for RawSemHolder {
    async fn acquire(&mut self) -> Result<()> {
        loop {
            let left: i64 = self
                .lib
                .acquire
                .key(SEM_KEY)
                .arg(1)
                .invoke_async(&mut self.conn)
                .await?;
            if left >= 0 {
                return Ok(());
            }
            tokio::time::sleep(RAW_SEM_RETRY).await;
        }
    }
    async fn release(&mut self) -> Result<()> {
        let _: i64 = redis::cmd("INCRBY")
            .arg(SEM_KEY)
            .arg(1)
            .query_async(&mut self.conn)
            .await?;
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// ferrisson RSemaphore: try_set_permits once; acquire(1) / release(1) through a handle per task.

pub struct FerrissonSem {
    client: ferrisson::Client,
}

pub struct FerrissonSemHolder {
    sem: ferrisson::RSemaphore,
}

impl SemLib for FerrissonSem {
    type H = FerrissonSemHolder;
    const NAME: &'static str = "ferrisson RSemaphore";
    const KIND: Kind = Kind::Ferrisson;
    async fn connect(url: &str, permits: u32) -> Result<Self> {
        let client = ferrisson::Client::connect(url).await.map_err(e)?;
        if !client
            .get_semaphore(SEM_KEY)
            .try_set_permits(permits.into())
            .await
            .map_err(e)?
        {
            bail!("{SEM_KEY} already had permits");
        }
        Ok(FerrissonSem { client })
    }
    async fn holder(self: &Arc<Self>) -> Result<FerrissonSemHolder> {
        Ok(FerrissonSemHolder {
            sem: self.client.get_semaphore(SEM_KEY),
        })
    }
    async fn free_permits(
        self: &Arc<Self>,
        _: &mut redis::aio::MultiplexedConnection,
    ) -> Result<i64> {
        self.client
            .get_semaphore(SEM_KEY)
            .available_permits()
            .await
            .map_err(e)
    }
    fn config() -> String {
        "one Client; `get_semaphore` per task, `try_set_permits(4)` once; `acquire(1)` / \
         `release(1)`; waiters wake on the release's pub/sub message"
            .into()
    }
}

impl SemHolder for FerrissonSemHolder {
    async fn acquire(&mut self) -> Result<()> {
        self.sem.acquire(1).await.map_err(e)
    }
    async fn release(&mut self) -> Result<()> {
        self.sem.release(1).await.map_err(e)
    }
}

// ---------------------------------------------------------------------------------------------
// ferrisson RPermitExpirableSemaphore: each permit is owned (an id with a lease in a zset),
// renewed by the watchdog while its guard lives, released by id.

pub struct FerrissonPermits {
    client: ferrisson::Client,
}

pub struct FerrissonPermitsHolder {
    sem: ferrisson::RPermitExpirableSemaphore,
    held: Option<ferrisson::PermitGuard>,
}

impl SemLib for FerrissonPermits {
    type H = FerrissonPermitsHolder;
    const NAME: &'static str = "ferrisson RPermitExpirableSemaphore";
    const KIND: Kind = Kind::Ferrisson;
    async fn connect(url: &str, permits: u32) -> Result<Self> {
        let client = ferrisson::Client::connect(url).await.map_err(e)?;
        if !client
            .get_permit_expirable_semaphore(SEM_KEY)
            .try_set_permits(permits.into())
            .await
            .map_err(e)?
        {
            bail!("{SEM_KEY} already had permits");
        }
        Ok(FerrissonPermits { client })
    }
    async fn holder(self: &Arc<Self>) -> Result<FerrissonPermitsHolder> {
        Ok(FerrissonPermitsHolder {
            sem: self.client.get_permit_expirable_semaphore(SEM_KEY),
            held: None,
        })
    }
    async fn free_permits(
        self: &Arc<Self>,
        _: &mut redis::aio::MultiplexedConnection,
    ) -> Result<i64> {
        self.client
            .get_permit_expirable_semaphore(SEM_KEY)
            .available_permits()
            .await
            .map_err(e)
    }
    fn config() -> String {
        "one Client; `get_permit_expirable_semaphore` per task, `try_set_permits(4)` once; \
         `acquire()` (watchdog lease) / `guard.release()`; waiters wake on the release's pub/sub \
         message or at the first permit's expiry"
            .into()
    }
}

impl SemHolder for FerrissonPermitsHolder {
    async fn acquire(&mut self) -> Result<()> {
        self.held = Some(self.sem.acquire().await.map_err(e)?);
        Ok(())
    }
    async fn release(&mut self) -> Result<()> {
        match self.held.take() {
            Some(guard) => guard.release().await.map_err(e),
            None => bail!("release without a permit"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// redisson 0.1 AsyncRSemaphore: a sorted set of permits plus a `:max` key. It has no waiting
// acquire (`acquire()` is `try_acquire(1, 0)`, one attempt whose permit is already expired), so
// the holder polls `try_acquire(1, 30 s)` every RETRY. `release(1)` trims expired permits, reads
// the lowest-scored one and ZREMs it: three commands, not atomic, and not the caller's permit.

pub struct RedissonSem {
    client: redisson::AsyncRedissonClient,
    permits: usize,
}

pub struct RedissonSemHolder {
    sem: redisson::AsyncRSemaphore,
}

impl SemLib for RedissonSem {
    type H = RedissonSemHolder;
    const NAME: &'static str = "redisson 0.1.0 AsyncRSemaphore";
    const KIND: Kind = Kind::Peer;
    async fn connect(url: &str, permits: u32) -> Result<Self> {
        let config = redisson::RedissonConfig::single_server(url).with_pool_size(64);
        let client = redisson::AsyncRedissonClient::new(config)
            .await
            .map_err(e)?;
        let permits = permits as usize;
        // Sets `bench_sem:max` when absent.
        client.get_semaphore(SEM_KEY, permits).await;
        Ok(RedissonSem { client, permits })
    }
    async fn holder(self: &Arc<Self>) -> Result<RedissonSemHolder> {
        Ok(RedissonSemHolder {
            sem: self.client.get_semaphore(SEM_KEY, self.permits).await,
        })
    }
    async fn free_permits(
        self: &Arc<Self>,
        _: &mut redis::aio::MultiplexedConnection,
    ) -> Result<i64> {
        let sem = self.client.get_semaphore(SEM_KEY, self.permits).await;
        Ok(sem.available_permits().await.map_err(e)? as i64)
    }
    fn config() -> String {
        format!(
            "one AsyncRedissonClient, pool size 64 (default 10); `get_semaphore(name, 4)` per task; \
             polls `try_acquire(1, 30 s)` every {} ms (it has no waiting acquire, and its `acquire()` \
             takes a permit that is expired at once) / `release(1)` (ZREMRANGEBYSCORE of expired \
             permits, ZRANGE 0 0, ZREM: three commands, removes the oldest permit, not the caller's)",
            RETRY.as_millis()
        )
    }
}

impl SemHolder for RedissonSemHolder {
    async fn acquire(&mut self) -> Result<()> {
        loop {
            if self.sem.try_acquire(1, TTL).await.map_err(e)? {
                return Ok(());
            }
            tokio::time::sleep(RETRY).await;
        }
    }
    async fn release(&mut self) -> Result<()> {
        self.sem.release(1).await.map_err(e)
    }
}

// ---------------------------------------------------------------------------------------------
// distributed-lock-redis 0.2 (over fred 9): RedisLockProvider::create_semaphore per task;
// `acquire(None)` polls its acquire script with a backoff of 10 ms doubling to 200 ms (not
// configurable); every handle starts a task that extends its ticket, the first time right away.

pub struct DlrSem {
    provider: distributed_lock_redis::RedisLockProvider,
    permits: u32,
}

pub struct DlrSemHolder {
    sem: distributed_lock_redis::RedisDistributedSemaphore,
    handle: Option<distributed_lock_redis::RedisSemaphoreHandle>,
}

impl SemLib for DlrSem {
    type H = DlrSemHolder;
    const NAME: &'static str = "distributed-lock-redis 0.2.0";
    const KIND: Kind = Kind::Peer;
    async fn connect(url: &str, permits: u32) -> Result<Self> {
        let provider = distributed_lock_redis::RedisLockProvider::new(url)
            .await
            .map_err(e)?;
        Ok(DlrSem { provider, permits })
    }
    async fn holder(self: &Arc<Self>) -> Result<DlrSemHolder> {
        Ok(DlrSemHolder {
            sem: self.provider.create_semaphore(SEM_KEY, self.permits),
            handle: None,
        })
    }
    /// It has no call that counts free tickets: permits minus the live tickets in its sorted set.
    async fn free_permits(
        self: &Arc<Self>,
        admin: &mut redis::aio::MultiplexedConnection,
    ) -> Result<i64> {
        let key = format!("distributed-lock:semaphore:{SEM_KEY}");
        let ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_millis() as u64;
        let live: i64 = redis::cmd("ZCOUNT")
            .arg(&key)
            .arg(format!("({ms}"))
            .arg("+inf")
            .query_async(admin)
            .await?;
        Ok(self.permits as i64 - live)
    }
    fn config() -> String {
        "one RedisLockProvider (one fred client); `create_semaphore(name, 4)` per task; \
         `acquire(None)` (a sorted set of tickets with a 30 s expiry; by EVAL, the script sent in \
         full every time; on a full semaphore it sleeps 10 ms, doubling up to 200 ms, not \
         configurable) / `handle.release()`; each held ticket has a task that extends it every \
         10 s, the first time as it starts"
            .into()
    }
}

impl SemHolder for DlrSemHolder {
    async fn acquire(&mut self) -> Result<()> {
        self.handle = Some(self.sem.acquire(None).await.map_err(e)?);
        Ok(())
    }
    async fn release(&mut self) -> Result<()> {
        let h = self.handle.take().ok_or_else(|| anyhow!("not held"))?;
        h.release().await.map_err(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sem_run(cycles: usize, secs: f64, stalled_at: Option<f64>) -> SemRun {
        let s = |reads, scripts| CmdStats {
            total: 0,
            scripts,
            script_usec: 0,
            reads,
        };
        SemRun {
            cycles,
            secs,
            lat: (1..=cycles).map(|i| i as f64).collect(),
            per_task: vec![cycles / 2, cycles - cycles / 2],
            hold_ms_mean: 1.25,
            peak: 4,
            before: s(10, 0),
            after: s(11 + 2 * cycles as u64, cycles as u64),
            cpu0: (0.0, 0.0),
            cpu1: (1.0, 2.0),
            stalled_at,
            free_after: 4,
        }
    }

    #[test]
    fn the_median_run_speaks_and_a_stall_is_kept() {
        let runs = vec![
            sem_run(300, 3.0, None),
            sem_run(100, 3.0, Some(0.4)),
            sem_run(200, 3.0, None),
        ];
        let s = aggregate(runs).unwrap();
        assert_eq!(s.runs, 3);
        assert!((s.cycles_per_s - 66.7).abs() < 0.1, "{}", s.cycles_per_s);
        assert!((s.range.0 - 33.3).abs() < 0.1 && (s.range.1 - 100.0).abs() < 0.1);
        assert_eq!((s.per_task_min, s.per_task_max), (50, 150));
        assert_eq!(s.reads_per_cycle, 2.0);
        assert_eq!(s.scripts_per_cycle, 1.0);
        assert_eq!(s.stalled, Some((1, 0.4)));
        assert_eq!(s.free_after, vec![4, 4, 4]);
        assert_eq!(s.ceiling(), 3200.0);
        assert!(aggregate(Vec::new()).is_none());
    }
}
