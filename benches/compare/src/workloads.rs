//! The workloads, generic over a library adapter. Every critical section goes through `Inside`,
//! a shared in-process counter that must be 0 on entry: an overlap panics the task, and the
//! harness reports the library as FAILED (and exits non-zero at the end).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, bail};
use tokio::task::JoinHandle;

use crate::libs::{Lib, Owner};
use crate::server::{CmdStats, commandstats, commandstats_by_name, cpu_now};

/// Calls and Redis µs of every command, by name (INFO commandstats).
pub type ByName = std::collections::BTreeMap<String, (u64, u64)>;

/// Where workloads 1 and 4 read Redis's counters and CPU time: one server (the harness's admin
/// connection to it, and its process), or every master of a cluster (`cluster::Masters`).
pub trait Meter: Clone + Send + Sync + 'static {
    /// INFO stats and commandstats, summed over the servers asked.
    fn stats(&mut self) -> impl Future<Output = Result<CmdStats>> + Send;
    /// INFO commandstats by command, summed over the servers asked.
    fn stats_by_name(&mut self) -> impl Future<Output = Result<ByName>> + Send;
    /// CPU ms, now, of this process, of the servers asked, and of the servers not asked that
    /// run for them (a cluster's replicas; NaN when there are none).
    fn cpu(&self) -> (f64, f64, f64);
    /// Socket reads one `stats` call adds to the counters it reads (its own INFO, one per server).
    fn own_reads(&self) -> u64 {
        1
    }
}

impl Meter for redis::aio::MultiplexedConnection {
    async fn stats(&mut self) -> Result<CmdStats> {
        commandstats(self).await
    }
    async fn stats_by_name(&mut self) -> Result<ByName> {
        commandstats_by_name(self).await
    }
    fn cpu(&self) -> (f64, f64, f64) {
        let (client, server) = cpu_now();
        (client, server, f64::NAN)
    }
}

/// Holders inside a critical section right now; entering past `limit` (1 for a lock, the
/// permits for a semaphore) panics the task.
pub struct Inside {
    now: AtomicUsize,
    limit: usize,
    /// The most holders seen inside at once.
    peak: AtomicUsize,
}

/// What an overlap's panic says for a semaphore (a lock's says MUTUAL EXCLUSION VIOLATED).
pub const SEMAPHORE_VIOLATED: &str = "SEMAPHORE LIMIT VIOLATED";

impl Inside {
    /// For a lock: one holder at a time.
    pub fn new() -> Arc<Inside> {
        Inside::with_limit(1)
    }
    /// For a semaphore of `limit` permits taken one at a time: at most `limit` holders at once.
    pub fn with_limit(limit: usize) -> Arc<Inside> {
        Arc::new(Inside {
            now: AtomicUsize::new(0),
            limit,
            peak: AtomicUsize::new(0),
        })
    }
    pub fn enter(&self, who: &str) {
        let before = self.now.fetch_add(1, Ordering::SeqCst);
        self.peak.fetch_max(before + 1, Ordering::SeqCst);
        if before >= self.limit {
            if self.limit == 1 {
                panic!(
                    "MUTUAL EXCLUSION VIOLATED ({who}): {before} other holder(s) inside the critical section"
                );
            }
            panic!(
                "{SEMAPHORE_VIOLATED} ({who}): {before} other holders inside a section of {} permits",
                self.limit
            );
        }
    }
    pub fn exit(&self) {
        self.now.fetch_sub(1, Ordering::SeqCst);
    }
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::SeqCst)
    }
}

/// Async libraries: a tokio task. Sync libraries: a blocking thread that drives the (blocking)
/// future to completion with the runtime's handle, i.e. plain `spawn_blocking`.
pub fn spawn_task<L: Lib, F, T>(fut: F) -> JoinHandle<T>
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    if L::SYNC {
        let handle = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || handle.block_on(fut))
    } else {
        tokio::spawn(fut)
    }
}

pub async fn join<T>(h: JoinHandle<Result<T>>) -> Result<T> {
    match h.await {
        Ok(r) => r,
        Err(err) if err.is_panic() => {
            let p = err.into_panic();
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".into());
            Err(anyhow!("PANIC: {msg}"))
        }
        Err(err) => Err(anyhow!("task failed: {err}")),
    }
}

pub fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let idx = ((p / 100.0) * (sorted.len() as f64 - 1.0)).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

// ---------------------------------------------------------------------------------------------

pub struct Sequential {
    pub cycles: usize,
    /// Median over the runs of each run's cycles/s.
    pub ops_per_s: f64,
    /// Lowest and highest run.
    pub ops_range: (f64, f64),
    /// Over every measured cycle of every run.
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Every command Redis ran, including those inside scripts.
    pub cmds_per_cycle: f64,
    pub scripts_per_cycle: f64,
    pub script_exec_us_per_cycle: f64,
    /// Requests (server socket reads) per cycle: round trips.
    pub reads_per_cycle: f64,
    pub client_us_per_cycle: f64,
    pub server_us_per_cycle: f64,
    /// Of the servers that run for those measured (a cluster's replicas; NaN on one server).
    pub replica_us_per_cycle: f64,
    pub capped: bool,
}

/// One run of sequential cycles.
pub struct SeqRun {
    lat: Vec<f64>,
    secs: f64,
    before: CmdStats,
    after: CmdStats,
    /// Socket reads each INFO of `after` added (one per server asked).
    info_reads: u64,
    cpu0: (f64, f64, f64),
    cpu1: (f64, f64, f64),
    capped: bool,
}

pub const SEQ_WARMUP: usize = 200;
pub const SEQ_CYCLES: usize = 9000;
/// The current-thread measurement is split in this many runs, interleaved across libraries.
pub const SEQ_ROUNDS: usize = 9;
pub const SEQ_CAP: Duration = Duration::from_secs(10);

pub fn aggregate(runs: &[SeqRun]) -> Sequential {
    let mut lat: Vec<f64> = runs.iter().flat_map(|r| r.lat.iter().copied()).collect();
    lat.sort_by(|a, b| a.total_cmp(b));
    let n = lat.len().max(1) as f64;
    let mut rates: Vec<f64> = runs.iter().map(|r| r.lat.len() as f64 / r.secs).collect();
    rates.sort_by(|a, b| a.total_cmp(b));
    let sum = |f: &dyn Fn(&SeqRun) -> f64| runs.iter().map(f).sum::<f64>() / n;
    Sequential {
        cycles: lat.len(),
        ops_per_s: pct(&rates, 50.0),
        ops_range: (rates[0], rates[rates.len() - 1]),
        p50_ms: pct(&lat, 50.0),
        p99_ms: pct(&lat, 99.0),
        cmds_per_cycle: sum(&|r| (r.after.total - r.before.total) as f64),
        scripts_per_cycle: sum(&|r| (r.after.scripts - r.before.scripts) as f64),
        script_exec_us_per_cycle: sum(&|r| (r.after.script_usec - r.before.script_usec) as f64),
        // minus the read of the second INFO itself (one per server)
        reads_per_cycle: sum(&|r| (r.after.reads - r.before.reads - r.info_reads) as f64),
        client_us_per_cycle: sum(&|r| (r.cpu1.0 - r.cpu0.0) * 1000.0),
        server_us_per_cycle: sum(&|r| (r.cpu1.1 - r.cpu0.1) * 1000.0),
        replica_us_per_cycle: sum(&|r| (r.cpu1.2 - r.cpu0.2) * 1000.0),
        capped: runs.iter().any(|r| r.capped),
    }
}

/// On the shared multi-thread runtime (a tokio task, or a blocking thread for sync libraries).
pub async fn sequential<L: Lib>(
    lib: Arc<L>,
    admin: redis::aio::MultiplexedConnection,
) -> Result<Sequential> {
    let run = join(spawn_task::<L, _, _>(sequential_run(
        lib, admin, SEQ_CYCLES,
    )))
    .await?;
    Ok(aggregate(&[run]))
}

/// On a fresh OS thread with its own current-thread runtime: the library connects there, so its
/// connection tasks and the loop share one thread and no cycle waits for another thread's wake-up.
pub async fn sequential_current_thread<L: Lib>(url: String, cycles: usize) -> Result<SeqRun> {
    on_own_thread(move || async move {
        let lib = Arc::new(L::connect(&url).await?);
        let admin = redis::Client::open(url.as_str())?
            .get_multiplexed_async_connection()
            .await?;
        sequential_run(lib, admin, cycles).await
    })
    .await
}

/// Runs `work` on a fresh OS thread with its own current-thread runtime; a panic there is an error.
pub async fn on_own_thread<T, F, Fut>(work: F) -> Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = Result<T>>,
{
    let h = std::thread::spawn(move || -> Result<T> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(work())
    });
    tokio::task::spawn_blocking(move || {
        h.join().unwrap_or_else(|p| {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".into());
            Err(anyhow!("PANIC: {msg}"))
        })
    })
    .await?
}

/// Workload 1's loop: `cycles` lock+unlock cycles of one owner after `SEQ_WARMUP`, measured
/// through `meter`.
pub async fn sequential_run<L: Lib, M: Meter>(
    lib: Arc<L>,
    mut meter: M,
    cycles: usize,
) -> Result<SeqRun> {
    let inside = Inside::new();
    let mut o = lib.owner("bench_seq").await?;
    for _ in 0..SEQ_WARMUP {
        o.lock().await?;
        inside.enter(L::NAME);
        inside.exit();
        o.unlock().await?;
    }
    let before: CmdStats = meter.stats().await?;
    let cpu0 = meter.cpu();
    let mut lat = Vec::with_capacity(cycles);
    let start = Instant::now();
    let mut capped = false;
    for _ in 0..cycles {
        let t = Instant::now();
        o.lock().await?;
        inside.enter(L::NAME);
        inside.exit();
        o.unlock().await?;
        lat.push(ms(t.elapsed()));
        if start.elapsed() > SEQ_CAP {
            capped = true;
            break;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let cpu1 = meter.cpu();
    let after = meter.stats().await?;
    Ok(SeqRun {
        lat,
        secs,
        before,
        after,
        info_reads: meter.own_reads(),
        cpu0,
        cpu1,
        capped,
    })
}

// ---------------------------------------------------------------------------------------------

pub struct Contention {
    pub acquisitions: usize,
    /// The median run's rate (one run: its rate).
    pub ops_per_s: f64,
    /// Slowest..fastest run.
    pub ops_range: (f64, f64),
    pub runs: usize,
    pub acq_p50_ms: f64,
    pub acq_p99_ms: f64,
    pub per_task: Vec<usize>,
    pub capped: bool,
    /// Per counted acquisition (the whole run, so failed attempts and wake-ups are included).
    pub requests_per_acq: f64,
    pub scripts_per_acq: f64,
    pub client_us_per_acq: f64,
    pub server_us_per_acq: f64,
}

pub const CONT_TASKS: usize = 8;
/// Contention runs per library, interleaved across the libraries.
pub const CONT_ROUNDS: usize = 9;
pub const CONT_TOTAL: i64 = 2000;
pub const CONT_CAP: Duration = Duration::from_secs(15);

pub async fn contention<L: Lib>(
    lib: Arc<L>,
    mut admin: redis::aio::MultiplexedConnection,
) -> Result<Contention> {
    let s0 = commandstats(&mut admin).await?;
    let cpu0 = cpu_now();
    let inside = Inside::new();
    let remaining = Arc::new(AtomicI64::new(CONT_TOTAL));
    let barrier = Arc::new(tokio::sync::Barrier::new(CONT_TASKS));
    let start = Arc::new(std::sync::OnceLock::<Instant>::new());
    let last = Arc::new(std::sync::Mutex::new(None::<Instant>));
    let mut handles = Vec::new();
    for _ in 0..CONT_TASKS {
        let (lib, inside, remaining, barrier, start, last) = (
            lib.clone(),
            inside.clone(),
            remaining.clone(),
            barrier.clone(),
            start.clone(),
            last.clone(),
        );
        handles.push(spawn_task::<L, _, _>(async move {
            let mut o = lib.owner("bench_contend").await?;
            barrier.wait().await;
            let start = *start.get_or_init(Instant::now);
            let mut lat = Vec::new();
            let mut capped = false;
            loop {
                let t = Instant::now();
                o.lock().await?;
                let waited = ms(t.elapsed());
                inside.enter(L::NAME);
                let ticket = remaining.fetch_sub(1, Ordering::SeqCst);
                if ticket == 1 {
                    *last.lock().unwrap() = Some(Instant::now());
                }
                inside.exit();
                o.unlock().await?;
                if ticket <= 0 {
                    break;
                }
                lat.push(waited);
                if start.elapsed() > CONT_CAP {
                    capped = true;
                    // Let the others finish too: nobody takes another ticket.
                    remaining.store(i64::MIN / 2, Ordering::SeqCst);
                    break;
                }
            }
            Ok::<_, anyhow::Error>((lat, capped))
        }));
    }
    let mut all = Vec::new();
    let mut per_task = Vec::new();
    let mut capped = false;
    let mut first_err = None;
    for h in handles {
        match join(h).await {
            Ok((lat, c)) => {
                per_task.push(lat.len());
                all.extend(lat);
                capped |= c;
            }
            Err(err) => {
                first_err.get_or_insert(err);
            }
        }
    }
    let cpu1 = cpu_now();
    let s1 = commandstats(&mut admin).await?;
    if let Some(err) = first_err {
        return Err(err);
    }
    let start = *start.get().unwrap();
    let end = last.lock().unwrap().unwrap_or_else(Instant::now);
    all.sort_by(|a, b| a.total_cmp(b));
    let n = all.len();
    let per = |x: f64| x / n.max(1) as f64;
    Ok(Contention {
        requests_per_acq: per((s1.reads - s0.reads - 1) as f64),
        scripts_per_acq: per((s1.scripts - s0.scripts) as f64),
        client_us_per_acq: per((cpu1.0 - cpu0.0) * 1000.0),
        server_us_per_acq: per((cpu1.1 - cpu0.1) * 1000.0),
        acquisitions: n,
        ops_per_s: n as f64 / (end - start).as_secs_f64(),
        ops_range: (
            n as f64 / (end - start).as_secs_f64(),
            n as f64 / (end - start).as_secs_f64(),
        ),
        runs: 1,
        acq_p50_ms: pct(&all, 50.0),
        acq_p99_ms: pct(&all, 99.0),
        per_task,
        capped,
    })
}

/// Workload 2 on a fresh OS thread with its own current-thread runtime, as workload 1: the eight
/// tasks, the library's connection tasks and the loop share one thread. (A synchronous library's
/// tasks still run on blocking threads.)
pub async fn contention_current_thread<L: Lib>(url: String) -> Result<Contention> {
    on_own_thread(move || async move {
        let lib = Arc::new(L::connect(&url).await?);
        let admin = redis::Client::open(url.as_str())?
            .get_multiplexed_async_connection()
            .await?;
        contention(lib, admin).await
    })
    .await
}

/// Several contention runs of one library as one result: the median run (by rate) for the rate,
/// latencies and costs; every run's per-task counts, so the spread check sees the worst run.
pub fn aggregate_contention(mut runs: Vec<Contention>) -> Option<Contention> {
    if runs.is_empty() {
        return None;
    }
    runs.sort_by(|a, b| a.ops_per_s.total_cmp(&b.ops_per_s));
    let range = (runs[0].ops_per_s, runs[runs.len() - 1].ops_per_s);
    let count = runs.len();
    let per_task: Vec<usize> = runs
        .iter()
        .flat_map(|r| r.per_task.iter().copied())
        .collect();
    let capped = runs.iter().any(|r| r.capped);
    let mut median = runs.swap_remove(count / 2);
    median.ops_range = range;
    median.runs = count;
    median.per_task = per_task;
    median.capped = capped;
    Some(median)
}

// ---------------------------------------------------------------------------------------------

pub struct Handoff {
    /// From A's release call starting to B's lock() returning.
    pub start_p50_ms: f64,
    pub start_p99_ms: f64,
    /// From A's release call returning to B's lock() returning (negative: B got it first).
    pub ret_p50_ms: f64,
    pub ret_p99_ms: f64,
}

pub const HANDOFF_ROUNDS: usize = 50;
/// How long B's lock() call is left pending before A releases.
pub const HANDOFF_PENDING: Duration = Duration::from_millis(15);

/// A on `lib_a`, B on `lib_b`: pass the same library instance twice for two owners of one
/// client, or two connected instances for two clients.
pub async fn handoff<L: Lib>(lib_a: Arc<L>, lib_b: Arc<L>) -> Result<Handoff> {
    let inside = Inside::new();
    let h = spawn_task::<L, _, _>(async move {
        let mut a = lib_a.owner("bench_handoff").await?;
        let mut b = Some(lib_b.owner("bench_handoff").await?);
        let mut from_start = Vec::new();
        let mut from_ret = Vec::new();
        // one warm-up round, not measured
        for round in 0..=HANDOFF_ROUNDS {
            a.lock().await?;
            inside.enter(L::NAME);
            let mut bo = b.take().unwrap();
            let ib = inside.clone();
            let hb = spawn_task::<L, _, _>(async move {
                bo.lock().await?;
                let got = Instant::now();
                ib.enter(L::NAME);
                ib.exit();
                bo.unlock().await?;
                Ok::<_, anyhow::Error>((bo, got))
            });
            tokio::time::sleep(HANDOFF_PENDING).await;
            if hb.is_finished() {
                inside.exit();
                a.unlock().await?;
                let _ = join(hb).await;
                bail!("B acquired while A held the lock");
            }
            inside.exit();
            let rs = Instant::now();
            a.unlock().await?;
            let re = Instant::now();
            let (bo, got) = join(hb).await?;
            b = Some(bo);
            if round > 0 {
                from_start.push(ms(got - rs));
                from_ret.push(if got >= re {
                    ms(got - re)
                } else {
                    -ms(re - got)
                });
            }
        }
        from_start.sort_by(|x, y| x.total_cmp(y));
        from_ret.sort_by(|x, y| x.total_cmp(y));
        Ok(Handoff {
            start_p50_ms: pct(&from_start, 50.0),
            start_p99_ms: pct(&from_start, 99.0),
            ret_p50_ms: pct(&from_ret, 50.0),
            ret_p99_ms: pct(&from_ret, 99.0),
        })
    });
    join(h).await
}

// ---------------------------------------------------------------------------------------------

pub struct ManyKeys {
    pub cycles_per_s: f64,
    pub per_task_min: usize,
    pub per_task_max: usize,
    /// CPU over the run, in % of one core.
    pub client_cpu_pct: f64,
    pub server_cpu_pct: f64,
    pub client_us_per_cycle: f64,
    pub server_us_per_cycle: f64,
    /// Of the servers that run for those measured (a cluster's replicas; NaN on one server).
    pub replica_us_per_cycle: f64,
    /// Socket reads of the server(s) per cycle (`total_reads_processed`): one read often
    /// brings several tasks' requests, so this shows how well a connection batches.
    pub reads_per_cycle: f64,
    /// Over every cycle of every task (lock call to unlock return).
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Redis time executing scripts per cycle, and as a share of the wall time.
    pub script_exec_us_per_cycle: f64,
    pub script_exec_pct: f64,
}

pub const MANY_TASKS: usize = 64;
pub const MANY_DURATION: Duration = Duration::from_secs(3);
/// The skewed many-keys workload: this many tasks on one client, each picking a key from
/// `ZIPF_KEYS` by a Zipf law of exponent `ZIPF_S` for every cycle.
pub const ZIPF_TASKS: usize = 1000;
pub const ZIPF_KEYS: usize = 10_000;
pub const ZIPF_S: f64 = 1.0;

/// How the tasks of a many-keys run pick their keys.
#[derive(Clone, Copy)]
enum Keys {
    /// Task i cycles key i for the whole run, through one owner.
    Own,
    /// Every cycle, a key drawn from `ZIPF_KEYS` by Zipf(`ZIPF_S`), through a new owner.
    Zipf,
}

/// Workload 4: `MANY_TASKS` tasks, each cycling its own key.
pub async fn many_keys<L: Lib, M: Meter>(lib: Arc<L>, admin: M) -> Result<ManyKeys> {
    keyed_cycles(lib, admin, MANY_TASKS, Keys::Own).await
}

/// Workload 4b: `ZIPF_TASKS` tasks over `ZIPF_KEYS` keys, skewed: the hot keys are contended,
/// the tail mostly not. A library that cannot wait (the raw baseline) retries a busy key after
/// 1 ms.
pub async fn zipf_keys<L: Lib, M: Meter>(lib: Arc<L>, admin: M) -> Result<ManyKeys> {
    lib.retry_when_busy();
    keyed_cycles(lib, admin, ZIPF_TASKS, Keys::Zipf).await
}

/// The cumulative Zipf(`ZIPF_S`) distribution over `ZIPF_KEYS` keys (key 0 the hottest).
fn zipf_cdf() -> Arc<Vec<f64>> {
    let weights: Vec<f64> = (1..=ZIPF_KEYS).map(|k| (k as f64).powf(-ZIPF_S)).collect();
    let sum: f64 = weights.iter().sum();
    let mut acc = 0.0;
    Arc::new(
        weights
            .iter()
            .map(|w| {
                acc += w / sum;
                acc
            })
            .collect(),
    )
}

/// A small per-task random source (xorshift64*), enough to draw keys.
struct Rng(u64);

impl Rng {
    fn next_f64(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }
    fn pick(&mut self, cdf: &[f64]) -> usize {
        let x = self.next_f64();
        cdf.partition_point(|&c| c < x).min(cdf.len() - 1)
    }
}

async fn keyed_cycles<L: Lib, M: Meter>(
    lib: Arc<L>,
    mut admin: M,
    tasks: usize,
    keys: Keys,
) -> Result<ManyKeys> {
    let barrier = Arc::new(tokio::sync::Barrier::new(tasks));
    let start = Arc::new(std::sync::OnceLock::<Instant>::new());
    let cpu0 = Arc::new(std::sync::OnceLock::<(f64, f64, f64)>::new());
    // Taken by one task between two barriers, while every task waits: exactly before the run.
    let stats0 = Arc::new(tokio::sync::OnceCell::<(CmdStats, ByName)>::new());
    let by_key: Arc<Vec<Arc<Inside>>> = Arc::new(match keys {
        Keys::Own => (0..tasks).map(|_| Inside::new()).collect(),
        Keys::Zipf => (0..ZIPF_KEYS).map(|_| Inside::new()).collect(),
    });
    let cdf = zipf_cdf();
    let prefix = match keys {
        Keys::Own => "bench_many_",
        Keys::Zipf => "bench_zipf_",
    };
    let mut handles = Vec::new();
    for i in 0..tasks {
        let (lib, barrier, start, cpu0, stats0, admin, by_key, cdf) = (
            lib.clone(),
            barrier.clone(),
            start.clone(),
            cpu0.clone(),
            stats0.clone(),
            admin.clone(),
            by_key.clone(),
            cdf.clone(),
        );
        handles.push(spawn_task::<L, _, _>(async move {
            let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ ((i as u64 + 1) * 0xD1B5_4A32_D192_ED03));
            let meter = admin.clone();
            let mut o = lib.owner(&format!("{prefix}{i}")).await?;
            o.lock().await?; // warm-up cycle (connections, scripts)
            o.unlock().await?;
            if barrier.wait().await.is_leader() {
                let mut admin = admin;
                let _ = stats0
                    .get_or_try_init(|| async {
                        let total = admin.stats().await?;
                        let named = admin.stats_by_name().await?;
                        Ok::<_, anyhow::Error>((total, named))
                    })
                    .await;
            }
            barrier.wait().await;
            let start = *start.get_or_init(|| {
                cpu0.get_or_init(|| meter.cpu());
                Instant::now()
            });
            let deadline = start + MANY_DURATION;
            let mut n = 0usize;
            let mut lat = Vec::new();
            while Instant::now() < deadline {
                let t = Instant::now();
                let key = match keys {
                    Keys::Own => i,
                    Keys::Zipf => {
                        let k = rng.pick(&cdf);
                        o = lib.owner(&format!("{prefix}{k}")).await?;
                        k
                    }
                };
                o.lock().await?;
                by_key[key].enter(L::NAME);
                by_key[key].exit();
                o.unlock().await?;
                lat.push(ms(t.elapsed()));
                n += 1;
            }
            Ok::<_, anyhow::Error>((n, Instant::now(), lat))
        }));
    }
    let mut counts = Vec::new();
    let mut lat = Vec::new();
    let mut end = None::<Instant>;
    let mut first_err = None;
    for h in handles {
        match join(h).await {
            Ok((n, t, l)) => {
                counts.push(n);
                lat.extend(l);
                end = Some(end.map_or(t, |e| e.max(t)));
            }
            Err(err) => {
                first_err.get_or_insert(err);
            }
        }
    }
    lat.sort_by(|a, b| a.total_cmp(b));
    let cpu1 = admin.cpu();
    let stats1 = admin.stats().await?;
    let named1 = admin.stats_by_name().await?;
    if let Some(err) = first_err {
        return Err(err);
    }
    let start = *start.get().unwrap();
    let cpu0 = *cpu0.get().unwrap();
    let (stats0, named0) = stats0
        .get()
        .ok_or_else(|| anyhow!("no commandstats before the run"))?;
    let script_us = (stats1.script_usec - stats0.script_usec) as f64;
    let total: usize = counts.iter().sum();
    if std::env::var("COMPARE_CMDSTATS").is_ok() {
        // Per cycle: calls and Redis µs of each command (those run inside scripts included).
        let mut line = format!("cmdstats per cycle, {} ({prefix}):", L::NAME);
        for (name, (calls, usec)) in &named1 {
            let (c0, u0) = named0.get(name).copied().unwrap_or((0, 0));
            if name == "info" || *calls == c0 {
                continue;
            }
            line.push_str(&format!(
                " {name} {:.2} calls {:.2} us;",
                (calls - c0) as f64 / total as f64,
                (usec - u0) as f64 / total as f64
            ));
        }
        eprintln!("{line}");
    }
    let wall_ms = (end.unwrap() - start).as_secs_f64() * 1000.0;
    Ok(ManyKeys {
        cycles_per_s: total as f64 / (end.unwrap() - start).as_secs_f64(),
        client_cpu_pct: (cpu1.0 - cpu0.0) / wall_ms * 100.0,
        server_cpu_pct: (cpu1.1 - cpu0.1) / wall_ms * 100.0,
        client_us_per_cycle: (cpu1.0 - cpu0.0) * 1000.0 / total as f64,
        server_us_per_cycle: (cpu1.1 - cpu0.1) * 1000.0 / total as f64,
        replica_us_per_cycle: (cpu1.2 - cpu0.2) * 1000.0 / total as f64,
        reads_per_cycle: (stats1.reads - stats0.reads - admin.own_reads()) as f64 / total as f64,
        p50_ms: pct(&lat, 50.0),
        p99_ms: pct(&lat, 99.0),
        script_exec_us_per_cycle: script_us / total as f64,
        script_exec_pct: script_us / 1000.0 / wall_ms * 100.0,
        per_task_min: *counts.iter().min().unwrap(),
        per_task_max: *counts.iter().max().unwrap(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_inside_panics() {
        let inside = Inside::new();
        inside.enter("test");
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| inside.enter("test")));
        assert!(r.is_err());
    }

    #[test]
    fn a_semaphore_section_lets_in_its_permits_and_no_more() {
        let inside = Inside::with_limit(4);
        for _ in 0..4 {
            inside.enter("test");
        }
        assert_eq!(inside.peak(), 4);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| inside.enter("test")));
        let msg = *r.unwrap_err().downcast::<String>().unwrap();
        assert!(msg.contains(SEMAPHORE_VIOLATED), "{msg}");
    }

    #[tokio::test]
    async fn an_overlap_in_a_task_becomes_a_loud_error() {
        let inside = Inside::new();
        inside.enter("test");
        let i2 = inside.clone();
        let err = join(tokio::spawn(async move {
            i2.enter("test");
            Ok::<_, anyhow::Error>(())
        }))
        .await
        .unwrap_err();
        assert!(
            err.to_string().contains("MUTUAL EXCLUSION VIOLATED"),
            "{err}"
        );
    }

    #[test]
    fn zipf_draws_favour_the_first_keys() {
        let cdf = zipf_cdf();
        assert!((cdf[ZIPF_KEYS - 1] - 1.0).abs() < 1e-9);
        let mut rng = Rng(42);
        let draws: Vec<usize> = (0..100_000).map(|_| rng.pick(&cdf)).collect();
        let hot = draws.iter().filter(|&&k| k == 0).count() as f64 / draws.len() as f64;
        // Zipf(1) over 10,000 keys gives key 0 about 1 / H(10000) ≈ 10.2 % of the draws.
        assert!((0.09..0.115).contains(&hot), "{hot}");
        assert!(draws.iter().all(|&k| k < ZIPF_KEYS));
    }

    #[test]
    fn percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(pct(&v, 50.0), 51.0);
        assert_eq!(pct(&v, 99.0), 99.0);
        assert!(pct(&[], 50.0).is_nan());
    }
}
