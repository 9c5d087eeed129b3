//! ferrisson against the other Redis lock crates, a raw redis-rs baseline and the redis-benchmark
//! limit, on one redis-server this program starts and stops. Prints Markdown tables and the
//! PASS/MISS of each target, and rewrites BENCHMARKS.md at the repository root.
//!
//!   cargo run --release --manifest-path benches/compare/Cargo.toml
//!
//! Environment, for working on one part (any of them but the last leaves BENCHMARKS.md alone):
//! COMPARE_ONLY=ferrisson,rlock (library name substrings), COMPARE_WORKLOADS=seq,cont,hand,many,zipf,wd,mem,sem,cluster,fair,
//! COMPARE_SKIP_LIMIT=1 (no redis-benchmark), COMPARE_SEQ_CYCLES=N (cycles per sequential run, e.g.
//! for `perf record`), COMPARE_NO_WRITE=1 (print only), COMPARE_CMDSTATS=1 (print every command's
//! calls and Redis µs per cycle of workloads 4 and 4b, from INFO commandstats).
//!
//! `--server PATH` (or `FERRISSON_SERVER=PATH`) runs it all against that `redis-server` or
//! `valkey-server` binary instead of `redis-server` from `PATH`, and then writes nothing.
//!
//! Exits 2 when any library let two holders into a critical section at once (or, in the
//! semaphore workload, more holders than permits).

mod cluster;
mod fairness;
mod libs;
mod memory;
mod semaphore;
mod server;
mod watchdog;
mod workloads;

use std::fmt::Write as _;
use std::future::Future;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use libs::*;
use memory::Memory;
use server::{RedisServer, redis_benchmark};
use watchdog::Watchdog;
use workloads::*;

/// BENCHMARKS.md keeps everything from this line on when the harness rewrites it.
pub const NOTES_MARKER: &str =
    "<!-- notes: written by hand; benches/compare keeps them when it rewrites this file -->";

pub const COMMAND: &str = "cargo run --release --manifest-path benches/compare/Cargo.toml";

enum Outcome<T> {
    Ok(T),
    Na(String),
    Failed(String),
}

impl<T> Outcome<T> {
    fn from(r: Result<T>) -> Outcome<T> {
        match r {
            Ok(v) => Outcome::Ok(v),
            Err(err) => Outcome::Failed(format!("{err:#}").replace('\n', " ").replace('|', "/")),
        }
    }
    fn ok(&self) -> Option<&T> {
        match self {
            Outcome::Ok(v) => Some(v),
            _ => None,
        }
    }
    fn cell(&self) -> Option<String> {
        match self {
            Outcome::Ok(_) => None,
            Outcome::Na(r) => Some(r.clone()),
            Outcome::Failed(r) => Some(format!("FAILED: {}", truncate(r, 160))),
        }
    }
    fn violated(&self) -> bool {
        matches!(self, Outcome::Failed(r) if r.contains("MUTUAL EXCLUSION") || r.contains(SEMAPHORE_VIOLATED))
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        format!("{}…", s.chars().take(n).collect::<String>())
    }
}

/// A library's workload-2 result on one runtime flavor.
fn contention_of(r: &LibResult, current_thread: bool) -> &Outcome<Contention> {
    if current_thread { &r.cont_ct } else { &r.cont }
}

struct LibResult {
    name: &'static str,
    kind: Kind,
    config: String,
    seq: Outcome<Sequential>,
    seq_mt: Outcome<Sequential>,
    /// On the shared 2-worker runtime.
    cont: Outcome<Contention>,
    /// On its own current-thread runtime.
    cont_ct: Outcome<Contention>,
    hand: Outcome<Handoff>,
    /// A and B on two clients (two connections of the library).
    hand2: Outcome<Handoff>,
    many: Outcome<ManyKeys>,
    /// Workload 4b: many tasks over many keys, Zipf-skewed.
    zipf: Outcome<ManyKeys>,
    wd: Outcome<Watchdog>,
    mem: Outcome<Memory>,
}

#[derive(PartialEq, Clone, Copy)]
enum Kind {
    Raw,
    Ferrisson,
    /// ferrisson with a setting changed, shown beside it and compared with nobody.
    Variant,
    Peer,
}

struct Ctx {
    server: RedisServer,
    admin: redis::aio::MultiplexedConnection,
}

impl Ctx {
    async fn flush(&mut self) -> Result<()> {
        let _: () = redis::cmd("FLUSHALL").query_async(&mut self.admin).await?;
        Ok(())
    }
    /// One run of one library on a flushed server, with keyspace events on when it needs them.
    async fn run_one<T>(
        &mut self,
        keyspace: bool,
        limit: Duration,
        run: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        if keyspace {
            let _ = self.config_set("notify-keyspace-events", "KA").await;
        }
        let _ = self.flush().await;
        let r = timed(limit, run).await;
        if keyspace {
            let _ = self.config_set("notify-keyspace-events", "").await;
        }
        r
    }

    async fn config_set(&mut self, k: &str, v: &str) -> Result<()> {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg(k)
            .arg(v)
            .query_async(&mut self.admin)
            .await?;
        Ok(())
    }
}

/// Adds one run's result to a library's runs; its first error replaces them (and stops it).
fn record<T>(slot: &mut std::result::Result<Vec<T>, String>, run: Result<T>) {
    match (slot.as_mut(), run) {
        (Ok(runs), Ok(run)) => runs.push(run),
        (Ok(_), Err(err)) => *slot = Err(format!("{err:#}").replace('\n', " ").replace('|', "/")),
        (Err(_), _) => {}
    }
}

async fn timed<T>(limit: Duration, f: impl Future<Output = Result<T>>) -> Result<T> {
    match tokio::time::timeout(limit, f).await {
        Ok(r) => r,
        Err(_) => Err(anyhow::anyhow!("timed out after {} s", limit.as_secs())),
    }
}

async fn run_lib<L: Lib>(
    ctx: &mut Ctx,
    kind: Kind,
    wd: Option<(Duration, WdHold)>,
    seq: &mut SeqResults,
    cont: &mut ContResults,
) -> LibResult {
    if L::KEYSPACE_EVENTS {
        let _ = ctx.config_set("notify-keyspace-events", "KA").await;
    }
    let r = run_lib_inner::<L>(ctx, kind, wd, seq, cont).await;
    if L::KEYSPACE_EVENTS {
        let _ = ctx.config_set("notify-keyspace-events", "").await;
    }
    r
}

async fn run_lib_inner<L: Lib>(
    ctx: &mut Ctx,
    kind: Kind,
    wd: Option<(Duration, WdHold)>,
    seq: &mut SeqResults,
    cont: &mut ContResults,
) -> LibResult {
    let url = ctx.server.url();
    let t = Instant::now();
    eprintln!("== {}", L::NAME);
    let mut r = LibResult {
        name: L::NAME,
        kind,
        config: L::config(),
        seq: match seq.remove(L::NAME) {
            Some(Ok(runs)) if !runs.is_empty() => Outcome::Ok(aggregate(&runs)),
            Some(Ok(_)) | None => Outcome::Na("not run".into()),
            Some(Err(err)) => Outcome::Failed(err),
        },
        seq_mt: Outcome::Na("not run".into()),
        cont: Outcome::Na("not run".into()),
        cont_ct: Outcome::Na("not run".into()),
        hand: Outcome::Na("not run".into()),
        hand2: Outcome::Na("not run".into()),
        many: Outcome::Na("not run".into()),
        zipf: Outcome::Na("not run".into()),
        wd: Outcome::Na("n/a: no lease renewal".into()),
        mem: Outcome::Na("not run".into()),
    };
    let lib = match timed(Duration::from_secs(20), L::connect(&url)).await {
        Ok(l) => Arc::new(l),
        Err(err) => {
            let f = format!("connect: {err:#}");
            r.seq_mt = Outcome::Failed(f.clone());
            r.cont = Outcome::Failed(f.clone());
            r.cont_ct = Outcome::Failed(f.clone());
            r.hand = Outcome::Failed(f.clone());
            r.hand2 = Outcome::Failed(f.clone());
            r.many = Outcome::Failed(f.clone());
            r.zipf = Outcome::Failed(f.clone());
            r.mem = Outcome::Failed(f);
            return r;
        }
    };
    let _ = ctx.flush().await;
    if workload("seq") {
        r.seq_mt = Outcome::from(
            timed(
                SEQ_CAP + Duration::from_secs(30),
                sequential(lib.clone(), ctx.admin.clone()),
            )
            .await,
        );
    }
    eprintln!("   sequential done ({:.1} s)", t.elapsed().as_secs_f64());
    let _ = ctx.flush().await;
    if let Some(reason) = L::NO_WAIT {
        r.cont = Outcome::Na(reason.into());
        r.cont_ct = Outcome::Na(reason.into());
        r.hand = Outcome::Na(reason.into());
        r.hand2 = Outcome::Na(reason.into());
    } else {
        let mut take = |current_thread| match cont.remove(&(L::NAME, current_thread)) {
            Some(Ok(runs)) => match aggregate_contention(runs) {
                Some(c) => Outcome::Ok(c),
                None => Outcome::Na("not run".into()),
            },
            Some(Err(err)) => Outcome::Failed(err),
            None => Outcome::Na("not run".into()),
        };
        r.cont_ct = take(true);
        r.cont = take(false);
        if workload("hand") {
            r.hand = Outcome::from(
                timed(Duration::from_secs(60), handoff(lib.clone(), lib.clone())).await,
            );
            let _ = ctx.flush().await;
            r.hand2 = Outcome::from(
                timed(Duration::from_secs(80), async {
                    let second = Arc::new(timed(Duration::from_secs(20), L::connect(&url)).await?);
                    handoff(lib.clone(), second).await
                })
                .await,
            );
        }
        eprintln!("   handoff done ({:.1} s)", t.elapsed().as_secs_f64());
    }
    let _ = ctx.flush().await;
    if workload("many") {
        r.many = Outcome::from(
            timed(
                MANY_DURATION + Duration::from_secs(45),
                many_keys(lib.clone(), ctx.admin.clone()),
            )
            .await,
        );
    }
    eprintln!("   many keys done ({:.1} s)", t.elapsed().as_secs_f64());
    let _ = ctx.flush().await;
    if workload("zipf") {
        r.zipf = if L::SYNC {
            Outcome::Na(format!(
                "n/a: sync only, {ZIPF_TASKS} tasks would need as many blocking threads"
            ))
        } else {
            Outcome::from(
                timed(
                    MANY_DURATION + Duration::from_secs(60),
                    zipf_keys(lib.clone(), ctx.admin.clone()),
                )
                .await,
            )
        };
        eprintln!(
            "   skewed many keys done ({:.1} s)",
            t.elapsed().as_secs_f64()
        );
    }
    drop(lib);
    let _ = ctx.flush().await;
    if let Some((interval, hold)) = wd.filter(|_| workload("wd")) {
        let fut = hold(url.clone());
        r.wd = Outcome::from(
            timed(
                Duration::from_secs(120),
                watchdog::measure(fut, interval, ctx.admin.clone()),
            )
            .await,
        );
        eprintln!("   watchdog done ({:.1} s)", t.elapsed().as_secs_f64());
        let _ = ctx.flush().await;
    }
    if workload("mem") {
        r.mem = Outcome::from(
            timed(
                memory::MEM_CAP + memory::MEM_WAIT + Duration::from_secs(60),
                memory::measure::<L>(url.clone(), ctx.admin.clone()),
            )
            .await,
        );
        eprintln!("   memory done ({:.1} s)", t.elapsed().as_secs_f64());
        let _ = ctx.flush().await;
    }
    r
}

type SeqResults = std::collections::HashMap<&'static str, std::result::Result<Vec<SeqRun>, String>>;

type SeqRunner =
    fn(String, usize) -> std::pin::Pin<Box<dyn Future<Output = Result<SeqRun>> + Send>>;

struct SeqEntry {
    name: &'static str,
    keyspace: bool,
    run: SeqRunner,
}

fn seq_entry<L: Lib>() -> SeqEntry {
    SeqEntry {
        name: L::NAME,
        keyspace: L::KEYSPACE_EVENTS,
        run: |url, cycles| Box::pin(sequential_current_thread::<L>(url, cycles)),
    }
}

/// Workload 1, before the others: each library's cycles on its own current-thread runtime, in
/// SEQ_ROUNDS runs interleaved across the libraries so that drift of the machine hits all alike.
async fn sequential_phase(ctx: &mut Ctx) -> SeqResults {
    let entries: Vec<SeqEntry> = vec![
        seq_entry::<Raw>(),
        seq_entry::<Ferrisson>(),
        seq_entry::<FerrissonSolo>(),
        seq_entry::<Rslock>(),
        seq_entry::<Rlock>(),
        seq_entry::<AsyncRedisLock>(),
        seq_entry::<RedisLock>(),
        seq_entry::<Distkit>(),
        seq_entry::<Redlock>(),
        seq_entry::<Redisson>(),
        seq_entry::<Rdlock>(),
    ];
    let mut out = SeqResults::new();
    if !workload("seq") {
        return out;
    }
    let url = ctx.server.url();
    // COMPARE_SEQ_CYCLES (per run) is for profiling; the documented run uses the default.
    let cycles = std::env::var("COMPARE_SEQ_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(SEQ_CYCLES / SEQ_ROUNDS);
    for round in 0..SEQ_ROUNDS {
        eprintln!("sequential round {}/{SEQ_ROUNDS}", round + 1);
        for e in entries.iter().filter(|e| selected(e.name)) {
            let slot = out.entry(e.name).or_insert_with(|| Ok(Vec::new()));
            if slot.is_err() {
                continue;
            }
            let r = ctx
                .run_one(
                    e.keyspace,
                    SEQ_CAP + Duration::from_secs(30),
                    (e.run)(url.clone(), cycles),
                )
                .await;
            record(slot, r);
        }
    }
    let _ = ctx.flush().await;
    out
}

/// Keyed by library name and runtime flavor (true: its own current-thread runtime).
type ContResults =
    std::collections::HashMap<(&'static str, bool), std::result::Result<Vec<Contention>, String>>;

type ContRunner = fn(
    String,
    redis::aio::MultiplexedConnection,
) -> std::pin::Pin<Box<dyn Future<Output = Result<Contention>> + Send>>;

type ContRunnerCt =
    fn(String) -> std::pin::Pin<Box<dyn Future<Output = Result<Contention>> + Send>>;

struct ContEntry {
    name: &'static str,
    keyspace: bool,
    /// On the shared 2-worker runtime.
    run: ContRunner,
    /// On a fresh current-thread runtime of its own.
    run_ct: ContRunnerCt,
}

fn cont_entry<L: Lib>() -> ContEntry {
    ContEntry {
        name: L::NAME,
        keyspace: L::KEYSPACE_EVENTS,
        run: |url, admin| {
            Box::pin(async move {
                let lib = Arc::new(timed(Duration::from_secs(20), L::connect(&url)).await?);
                contention(lib, admin).await
            })
        },
        run_ct: |url| Box::pin(contention_current_thread::<L>(url)),
    }
}

/// Workload 2: CONT_ROUNDS runs per library and runtime flavor, interleaved across the libraries
/// (as workload 1), each with a freshly connected library: once on its own current-thread
/// runtime (as workload 1), once on the shared 2-worker runtime. One run takes well under a
/// second for most libraries, short enough for a slow phase of the machine to decide a lone
/// run.
async fn contention_phase(ctx: &mut Ctx) -> ContResults {
    let entries: Vec<ContEntry> = vec![
        cont_entry::<Ferrisson>(),
        cont_entry::<FerrissonSolo>(),
        cont_entry::<Rslock>(),
        cont_entry::<Rlock>(),
        cont_entry::<AsyncRedisLock>(),
        cont_entry::<RedisLock>(),
        cont_entry::<Distkit>(),
        cont_entry::<Redlock>(),
        cont_entry::<Redisson>(),
        cont_entry::<Rdlock>(),
    ];
    let mut out = ContResults::new();
    if !workload("cont") {
        return out;
    }
    for round in 0..CONT_ROUNDS {
        eprintln!("contention round {}/{CONT_ROUNDS}", round + 1);
        for e in entries.iter().filter(|e| selected(e.name)) {
            for current_thread in [true, false] {
                let slot = out
                    .entry((e.name, current_thread))
                    .or_insert_with(|| Ok(Vec::new()));
                if slot.is_err() {
                    continue;
                }
                let run = if current_thread {
                    (e.run_ct)(ctx.server.url())
                } else {
                    (e.run)(ctx.server.url(), ctx.admin.clone())
                };
                let r = ctx
                    .run_one(e.keyspace, CONT_CAP + Duration::from_secs(45), run)
                    .await;
                record(slot, r);
            }
        }
    }
    let _ = ctx.flush().await;
    out
}

/// One row of workload 7 (a semaphore library, not one of the lock libraries above).
struct SemResult {
    name: &'static str,
    kind: Kind,
    config: String,
    sem: Outcome<semaphore::Semaphore>,
}

/// Workload 7: SEM_ROUNDS runs per semaphore library, interleaved across the libraries, each
/// with a freshly connected library on a flushed server.
async fn semaphore_phase(ctx: &mut Ctx) -> Vec<SemResult> {
    let entries = semaphore::sem_entries();
    let mut runs: Vec<std::result::Result<Vec<semaphore::SemRun>, String>> =
        entries.iter().map(|_| Ok(Vec::new())).collect();
    let on = workload("sem");
    if on {
        for round in 0..semaphore::SEM_ROUNDS {
            eprintln!("semaphore round {}/{}", round + 1, semaphore::SEM_ROUNDS);
            for (e, slot) in entries.iter().zip(runs.iter_mut()) {
                if !selected(e.name) || slot.is_err() {
                    continue;
                }
                let cap = semaphore::SEM_DURATION + Duration::from_secs(30);
                let r = ctx.run_one(false, cap, (e.run)(ctx.server.url())).await;
                record(slot, r);
            }
        }
        let _ = ctx.flush().await;
    }
    entries
        .into_iter()
        .zip(runs)
        .filter(|(e, _)| selected(e.name))
        .map(|(e, r)| SemResult {
            name: e.name,
            kind: e.kind,
            config: e.config,
            sem: match r {
                Ok(runs) => match semaphore::aggregate(runs) {
                    Some(s) => Outcome::Ok(s),
                    None => Outcome::Na("not run".into()),
                },
                Err(err) => Outcome::Failed(err),
            },
        })
        .collect()
}

type WdHold = fn(
    String,
) -> std::pin::Pin<
    Box<dyn Future<Output = Result<Box<dyn std::any::Any + Send>>> + Send>,
>;

/// COMPARE_WORKLOADS=seq,cont,hand,many,zipf,wd,mem,sem,cluster,fair limits the workloads (and then nothing is written).
fn workload(w: &str) -> bool {
    match std::env::var("COMPARE_WORKLOADS") {
        Ok(v) if !v.trim().is_empty() => v.split(',').any(|s| s.trim() == w),
        _ => true,
    }
}

fn selected(name: &str) -> bool {
    match std::env::var("COMPARE_ONLY") {
        Ok(v) if !v.trim().is_empty() => v.split(',').any(|s| {
            !s.trim().is_empty() && name.to_lowercase().contains(&s.trim().to_lowercase())
        }),
        _ => true,
    }
}

struct Limits {
    c1: Result<(f64, f64)>,
    c50: Result<(f64, f64)>,
    /// Informative: 50 clients with 16 requests pipelined each.
    c50p16: Result<(f64, f64)>,
}

fn sh(cmd: &str, args: &[&str]) -> String {
    Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

/// `--server PATH` (or `--server=PATH`): the server binary to run everything against, a
/// `redis-server` or `valkey-server` (Redis 6.2, 7.x, Valkey 8; `.ci/servers` fetches the
/// other two). It sets `FERRISSON_SERVER`, which the test harness's server module (included by
/// `cluster.rs`) reads, so the one server and the cluster of section 8 both run it, with the
/// `redis-cli` / `valkey-cli` beside it. `FERRISSON_SERVER` set by hand does the same.
fn server_flag() -> Result<Option<String>> {
    let mut args = std::env::args().skip(1);
    let mut server = None;
    while let Some(arg) = args.next() {
        if let Some(path) = arg.strip_prefix("--server=") {
            server = Some(path.to_owned());
        } else if arg == "--server" {
            server = Some(args.next().context("--server needs a path")?);
        } else {
            anyhow::bail!(
                "unknown argument {arg:?}; the only flag is --server PATH (the rest is set by \
                 COMPARE_* variables, see src/main.rs)"
            );
        }
    }
    Ok(server)
}

fn main() -> Result<()> {
    if let Some(server) = server_flag()? {
        // SAFETY: no other thread runs yet (the runtime is built below), so nothing reads the
        // environment while it changes.
        unsafe { std::env::set_var(cluster::server::SERVER_VAR, server) };
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async_main())
}

async fn async_main() -> Result<()> {
    let started = Instant::now();
    let server = RedisServer::start()?;
    server::set_server_pid(server.pid());
    let client = redis::Client::open(server.url())?;
    let admin = client.get_multiplexed_async_connection().await?;
    let mut ctx = Ctx { server, admin };
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut ctx.admin)
        .await?;
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.trim().to_owned())
    };
    let redis_version = field("redis_version:").unwrap_or_else(|| "?".into());
    // Valkey answers redis_version 7.2.4 (what it forked from) and its own valkey_version.
    let redis_version = match field("valkey_version:") {
        Some(valkey) => format!("Valkey {valkey} (redis_version {redis_version})"),
        None => redis_version,
    };
    eprintln!(
        "{} {redis_version} on port {}",
        cluster::server::server_binary().display(),
        ctx.server.port
    );

    // The limit: redis-benchmark, EVALSHA of a one-key script (the raw baseline's compare-and-delete).
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(RAW_UNLOCK_LUA)
        .query_async(&mut ctx.admin)
        .await?;
    let port = ctx.server.port;
    let limits = if std::env::var("COMPARE_SKIP_LIMIT").is_ok() {
        let skipped = || Err(anyhow::anyhow!("skipped (COMPARE_SKIP_LIMIT)"));
        Limits {
            c1: skipped(),
            c50: skipped(),
            c50p16: skipped(),
        }
    } else {
        tokio::task::spawn_blocking(move || {
            let args = ["EVALSHA", &sha, "1", "bench_limit", "token"];
            Limits {
                c1: redis_benchmark(port, 1, 20_000, &args),
                c50: redis_benchmark(port, 50, 200_000, &args),
                c50p16: redis_benchmark(
                    port,
                    50,
                    500_000,
                    &["-P", "16"]
                        .iter()
                        .chain(args.iter())
                        .copied()
                        .collect::<Vec<_>>(),
                ),
            }
        })
        .await?
    };
    eprintln!(
        "limit: EVALSHA -c 1 {:?} rps, -c 50 {:?} rps",
        limits.c1.as_ref().map(|x| x.0).ok(),
        limits.c50.as_ref().map(|x| x.0).ok()
    );

    let mut seq = sequential_phase(&mut ctx).await;
    let mut cont = contention_phase(&mut ctx).await;
    let mut results: Vec<LibResult> = Vec::new();
    macro_rules! run {
        ($t:ty, $kind:expr, $wd:expr) => {
            if selected(<$t as Lib>::NAME) {
                results.push(run_lib::<$t>(&mut ctx, $kind, $wd, &mut seq, &mut cont).await);
            }
        };
    }
    run!(Raw, Kind::Raw, None);
    run!(
        Ferrisson,
        Kind::Ferrisson,
        Some((watchdog::WD_INTERVAL, |u| Box::pin(async move {
            watchdog::hold_ferrisson(&u).await
        })))
    );
    run!(FerrissonSolo, Kind::Variant, None);
    run!(
        Rslock,
        Kind::Peer,
        Some((watchdog::WD_INTERVAL, |u| Box::pin(async move {
            watchdog::hold_rslock(&u).await
        })))
    );
    run!(
        Rlock,
        Kind::Peer,
        Some((watchdog::WD_INTERVAL, |u| Box::pin(async move {
            watchdog::hold_rlock(&u).await
        })))
    );
    run!(
        AsyncRedisLock,
        Kind::Peer,
        Some((watchdog::WD_INTERVAL, |u| Box::pin(async move {
            watchdog::hold_async_redis_lock(&u).await
        })))
    );
    run!(RedisLock, Kind::Peer, None);
    run!(
        Distkit,
        Kind::Peer,
        Some((watchdog::WD_INTERVAL, |u| Box::pin(async move {
            watchdog::hold_distkit(&u).await
        })))
    );
    run!(Redlock, Kind::Peer, None);
    run!(Redisson, Kind::Peer, None);
    // rdlock refuses to start without keyspace notifications; they cost every write, so they are
    // on only during rdlock's turns.
    run!(Rdlock, Kind::Peer, None);
    for r in &mut results {
        if r.name.starts_with("redisson") {
            r.wd = Outcome::Na(
                "n/a: its watchdog starts only for a lease under 1 s and then renews every 10 s, after \
                 the lease ran out, so no working renewal to measure"
                    .into(),
            );
        }
        if r.kind == Kind::Raw {
            r.wd = Outcome::Na("n/a: baseline".into());
        }
    }

    let sem = semaphore_phase(&mut ctx).await;

    // Workload 8: starts (and stops) a local cluster of its own; ferrisson only.
    let cl = if workload("cluster") && selected(<Ferrisson as Lib>::NAME) {
        Some(cluster::phase(&mut ctx).await)
    } else {
        None
    };

    // Workload 9: fairness across clients (and next to a Redisson-protocol client).
    let fair = if workload("fair") {
        Some(fairness::phase(&mut ctx).await)
    } else {
        None
    };

    let elapsed = started.elapsed();
    let env = Env {
        nproc: sh("nproc", &[]),
        cpu: std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|c| {
                c.lines().find_map(|l| {
                    l.strip_prefix("model name")
                        .map(|m| m.trim_start_matches([' ', '\t', ':']).to_owned())
                })
            })
            .unwrap_or_else(|| "?".into()),
        redis_version,
        date: sh("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
        rustc: sh("rustc", &["--version"]),
        elapsed,
    };
    let (mut tables, targets) = render(&results, &sem, cl.as_ref(), &limits);
    if let Some(fair) = &fair {
        tables.push('\n');
        tables.push_str(&fairness::render(fair));
    }
    println!("{tables}\n{targets}");
    // A run against a server other than the default `redis-server` prints its tables and
    // leaves BENCHMARKS.md (the reference run's) alone, as a partial run does.
    let partial = [
        "COMPARE_ONLY",
        "COMPARE_WORKLOADS",
        "COMPARE_SKIP_LIMIT",
        "COMPARE_SEQ_CYCLES",
        cluster::server::SERVER_VAR,
    ]
    .iter()
    .any(|k| {
        std::env::var(k)
            .map(|v| !v.trim().is_empty())
            .unwrap_or(false)
    });
    if std::env::var("COMPARE_NO_WRITE").is_err() && !partial {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../BENCHMARKS.md");
        // Hand-written notes after the marker survive the rewrite.
        let notes = std::fs::read_to_string(path)
            .ok()
            .and_then(|old| old.find(NOTES_MARKER).map(|at| old[at..].to_owned()));
        let mut doc = document(&tables, &targets, &results, &env);
        if let Some(notes) = notes {
            doc.push('\n');
            doc.push_str(&notes);
        }
        std::fs::write(path, doc)?;
        eprintln!(
            "wrote {}",
            std::path::Path::new(path).canonicalize()?.display()
        );
    }
    drop(ctx);
    let violated: Vec<String> = results
        .iter()
        .filter(|r| {
            r.seq.violated()
                || r.cont.violated()
                || r.cont_ct.violated()
                || r.hand.violated()
                || r.hand2.violated()
                || r.many.violated()
                || r.zipf.violated()
        })
        .map(|r| r.name)
        .chain(sem.iter().filter(|r| r.sem.violated()).map(|r| r.name))
        .chain(
            cl.iter()
                .filter(|c| c.one.violated() || c.cluster.violated())
                .map(|_| "ferrisson (workload 8)"),
        )
        .map(str::to_owned)
        .chain(fair.iter().flat_map(fairness::Fairness::violated))
        .collect();
    if !violated.is_empty() {
        eprintln!(
            "MUTUAL EXCLUSION (or semaphore limit) VIOLATED by: {}",
            violated.join(", ")
        );
        std::process::exit(2);
    }
    Ok(())
}

struct Env {
    nproc: String,
    cpu: String,
    redis_version: String,
    date: String,
    rustc: String,
    elapsed: Duration,
}

fn f0(x: f64) -> String {
    if x.is_nan() {
        "–".into()
    } else {
        format!("{:.0}", x)
    }
}
fn f1(x: f64) -> String {
    if x.is_nan() {
        "–".into()
    } else {
        format!("{:.1}", x)
    }
}
fn f2(x: f64) -> String {
    if x.is_nan() {
        "–".into()
    } else {
        format!("{:.2}", x)
    }
}
fn f3(x: f64) -> String {
    if x.is_nan() {
        "–".into()
    } else {
        format!("{:.3}", x)
    }
}
fn ratio(a: f64, b: Option<f64>) -> String {
    match b {
        Some(b) if b > 0.0 && !a.is_nan() => format!("{:.2}×", a / b),
        _ => "–".into(),
    }
}

/// The rows of a many-keys table (workloads 4 and 4b).
fn many_rows(
    t: &mut String,
    results: &[LibResult],
    pick: impl Fn(&LibResult) -> &Outcome<ManyKeys>,
    c50: Option<f64>,
) {
    let fer = results
        .iter()
        .find(|r| r.kind == Kind::Ferrisson)
        .and_then(|r| pick(r).ok())
        .map(|s| s.cycles_per_s);
    let _ = writeln!(
        t,
        "| library | cycles/s | lock ops/s | per task min..max | client CPU % | redis CPU % | client µs/cycle | redis µs/cycle | script exec µs/cycle (% of wall) | vs ferrisson | vs limit |"
    );
    let _ = writeln!(t, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in results {
        match (pick(r), pick(r).cell()) {
            (Outcome::Ok(s), _) => {
                let _ = writeln!(
                    t,
                    "| {} | {} | {} | {}..{} | {} | {} | {} | {} | {} ({:.0} %) | {} | {} |",
                    r.name,
                    f0(s.cycles_per_s),
                    f0(2.0 * s.cycles_per_s),
                    s.per_task_min,
                    s.per_task_max,
                    f0(s.client_cpu_pct),
                    f0(s.server_cpu_pct),
                    f0(s.client_us_per_cycle),
                    f0(s.server_us_per_cycle),
                    f1(s.script_exec_us_per_cycle),
                    s.script_exec_pct,
                    ratio(s.cycles_per_s, fer),
                    ratio(2.0 * s.cycles_per_s, c50),
                );
            }
            (_, Some(c)) => {
                let _ = writeln!(t, "| {} | {c} | | | | | | | | | |", r.name);
            }
            _ => {}
        }
    }
}

fn render(
    results: &[LibResult],
    sem: &[SemResult],
    cl: Option<&cluster::ClusterResults>,
    limits: &Limits,
) -> (String, String) {
    let mut t = String::new();
    let fer = results.iter().find(|r| r.kind == Kind::Ferrisson);
    let raw = results.iter().find(|r| r.kind == Kind::Raw);
    let c1 = limits.c1.as_ref().ok().map(|x| x.0);
    let c50 = limits.c50.as_ref().ok().map(|x| x.0);

    // Limits
    let _ = writeln!(
        t,
        "### Limit: redis-benchmark, EVALSHA of a one-key script\n"
    );
    let _ = writeln!(
        t,
        "| clients | requests/s | p50 ms | as lock+unlock cycles/s (÷ 2) |"
    );
    let _ = writeln!(t, "|---|---:|---:|---:|");
    for (c, l) in [
        ("-c 1", &limits.c1),
        ("-c 50", &limits.c50),
        ("-c 50 -P 16 (informative, pipelined)", &limits.c50p16),
    ] {
        match l {
            Ok((rps, p50)) => {
                let _ = writeln!(
                    t,
                    "| {c} | {} | {} | {} |",
                    f0(*rps),
                    f3(*p50),
                    f0(rps / 2.0)
                );
            }
            Err(err) => {
                let _ = writeln!(t, "| {c} | FAILED: {err:#} | | |");
            }
        }
    }
    let _ = writeln!(
        t,
        "\nThe targets use -c 1 and -c 50 (one request in flight per connection). A client that multiplexes \
         many tasks over one connection pipelines them, which the -P 16 row shows Redis serves much faster."
    );

    // 1. Sequential
    let fer_seq = fer.and_then(|r| r.seq.ok()).map(|s| s.ops_per_s);
    let raw_seq = raw.and_then(|r| r.seq.ok()).map(|s| s.ops_per_s);
    let _ = writeln!(
        t,
        "\n### 1. Sequential lock+unlock, one key, one owner ({SEQ_CYCLES} cycles: {SEQ_ROUNDS} runs of {} after {SEQ_WARMUP} warm-up each)\n",
        SEQ_CYCLES / SEQ_ROUNDS
    );
    let _ = writeln!(
        t,
        "Each library runs on its own current-thread tokio runtime (one OS thread, the library connected on \
         it), its {SEQ_ROUNDS} runs interleaved with the other libraries' runs. cycles/s is the median run \
         (range: slowest..fastest run); p50/p99 are over all cycles. The last column is one {SEQ_CYCLES}-cycle \
         run as a task on the shared 2-worker runtime: there, libraries that spawn tasks per lock keep the \
         second worker awake and so skip thread wake-ups, which on this machine moves a cycle by up to 40 %.\n"
    );
    let _ = writeln!(
        t,
        "Limit column: cycles/s ÷ (EVALSHA -c 1 requests/s ÷ 2), i.e. against two of the cheapest one-key \
         script round trips per cycle.\n"
    );
    let _ = writeln!(
        t,
        "Round trips: requests Redis read per cycle (`total_reads_processed`); scripts: EVALSHA/EVAL/FCALL per \
         cycle; script exec: µs Redis spent running those scripts per cycle (commandstats `usec`); all cmds: \
         every command Redis ran, those inside scripts included; CPU: µs of this process and of \
         redis-server per cycle.\n"
    );
    let _ = writeln!(
        t,
        "| library | cycles/s | range | p50 ms | p99 ms | round trips | scripts | script exec µs | all cmds | client µs | redis µs | vs ferrisson | vs raw | vs limit | multi-thread rt: cycles/s, p50 ms |"
    );
    let _ = writeln!(
        t,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for r in results {
        match (&r.seq, r.seq.cell()) {
            (Outcome::Ok(s), _) => {
                let capped = if s.capped {
                    format!(
                        " (a run stopped at {} s; {} cycles)",
                        SEQ_CAP.as_secs(),
                        s.cycles
                    )
                } else {
                    String::new()
                };
                let _ = writeln!(
                    t,
                    "| {}{capped} | {} | {}..{} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    r.name,
                    f0(s.ops_per_s),
                    f0(s.ops_range.0),
                    f0(s.ops_range.1),
                    f3(s.p50_ms),
                    f3(s.p99_ms),
                    f2(s.reads_per_cycle),
                    f2(s.scripts_per_cycle),
                    f1(s.script_exec_us_per_cycle),
                    f2(s.cmds_per_cycle),
                    f0(s.client_us_per_cycle),
                    f0(s.server_us_per_cycle),
                    ratio(s.ops_per_s, fer_seq),
                    ratio(s.ops_per_s, raw_seq),
                    ratio(s.ops_per_s, c1.map(|c| c / 2.0)),
                    match (&r.seq_mt, r.seq_mt.cell()) {
                        (Outcome::Ok(m), _) => format!("{}, {}", f0(m.ops_per_s), f3(m.p50_ms)),
                        (_, Some(c)) => c,
                        _ => String::new(),
                    },
                );
            }
            (_, Some(c)) => {
                let _ = writeln!(t, "| {} | {c} | | | | | | | | | | | | | |", r.name);
            }
            _ => {}
        }
    }

    // 2. Contention
    let mean = CONT_TOTAL as f64 / CONT_TASKS as f64;
    let _ = writeln!(
        t,
        "\n### 2. Contention: {CONT_TASKS} tasks, one key, {CONT_TOTAL} acquisitions in total (even share {mean:.0} per task)\n"
    );
    let _ = writeln!(
        t,
        "{CONT_ROUNDS} runs per library and runtime, interleaved across the libraries, each with a freshly connected \
         library: on its own current-thread runtime (one OS thread, as workload 1), and on the shared 2-worker \
         runtime. acquisitions/s is the median run (range: slowest..fastest run); latencies and the per-acquisition \
         costs are that median run's; per task min..max is over every run. Per acquisition, over the whole run \
         (failed attempts, polls and wake-ups included): requests Redis read, script calls, and CPU µs of this \
         process and of redis-server.\n"
    );
    for (title, current_thread) in [
        ("Own current-thread runtime (one OS thread)", true),
        ("Shared 2-worker runtime", false),
    ] {
        let fer_cont = fer
            .and_then(|r| contention_of(r, current_thread).ok())
            .map(|s| s.ops_per_s);
        let _ = writeln!(t, "{title}:\n");
        let _ = writeln!(
            t,
            "| library | acquisitions/s | range | acquire p50 ms | acquire p99 ms | per task min..max | requests/acq | scripts/acq | client µs/acq | redis µs/acq | vs ferrisson |"
        );
        let _ = writeln!(t, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        for r in results {
            let cont = contention_of(r, current_thread);
            match (cont, cont.cell()) {
                (Outcome::Ok(s), _) => {
                    let capped = if s.capped {
                        format!(
                            " (stopped at {} s: {} acquisitions)",
                            CONT_CAP.as_secs(),
                            s.acquisitions
                        )
                    } else {
                        String::new()
                    };
                    let _ = writeln!(
                        t,
                        "| {}{capped} | {} | {}..{} | {} | {} | {}..{} | {} | {} | {} | {} | {} |",
                        r.name,
                        f0(s.ops_per_s),
                        f0(s.ops_range.0),
                        f0(s.ops_range.1),
                        f3(s.acq_p50_ms),
                        f3(s.acq_p99_ms),
                        s.per_task.iter().min().unwrap_or(&0),
                        s.per_task.iter().max().unwrap_or(&0),
                        f2(s.requests_per_acq),
                        f2(s.scripts_per_acq),
                        f0(s.client_us_per_acq),
                        f0(s.server_us_per_acq),
                        ratio(s.ops_per_s, fer_cont),
                    );
                }
                (_, Some(c)) => {
                    let _ = writeln!(t, "| {} | {c} | | | | | | | | | |", r.name);
                }
                _ => {}
            }
        }
        let _ = writeln!(t);
    }

    // 3. Handoff
    let fer_hand = fer.and_then(|r| r.hand.ok()).map(|s| s.ret_p50_ms);
    let _ = writeln!(
        t,
        "\n### 3. Handoff: A holds, B's lock() pending for {} ms, A releases ({HANDOFF_ROUNDS} rounds)\n",
        HANDOFF_PENDING.as_millis()
    );
    let _ = writeln!(
        t,
        "Measured from A's release call **returning** to B's lock() returning (the time the lock sits free as \
         the two clients see it; negative when B's grant arrived before A's release reply); the last two columns \
         from A's release call **starting** (adds the release round trip).\n"
    );
    let fer_hand2 = fer.and_then(|r| r.hand2.ok()).map(|s| s.ret_p50_ms);
    for (title, two, fer_p50) in [
        (
            "A and B two owners on one client (one library instance)",
            false,
            fer_hand,
        ),
        (
            "A and B on two clients (two library instances, two connections)",
            true,
            fer_hand2,
        ),
    ] {
        let _ = writeln!(t, "{title}:\n");
        let _ = writeln!(
            t,
            "| library | p50 ms | p99 ms | vs ferrisson (p50) | p50 ms (from start) | p99 ms (from start) |"
        );
        let _ = writeln!(t, "|---|---:|---:|---:|---:|---:|");
        for r in results {
            let hand = if two { &r.hand2 } else { &r.hand };
            match (hand, hand.cell()) {
                (Outcome::Ok(s), _) => {
                    let _ = writeln!(
                        t,
                        "| {} | {} | {} | {} | {} | {} |",
                        r.name,
                        f3(s.ret_p50_ms),
                        f3(s.ret_p99_ms),
                        ratio(s.ret_p50_ms, fer_p50),
                        f3(s.start_p50_ms),
                        f3(s.start_p99_ms),
                    );
                }
                (_, Some(c)) => {
                    let _ = writeln!(t, "| {} | {c} | | | | |", r.name);
                }
                _ => {}
            }
        }
        let _ = writeln!(t);
    }

    // 4. Many keys
    let _ = writeln!(
        t,
        "\n### 4. Many keys: {MANY_TASKS} tasks, each cycling its own key on one client, {} s\n",
        MANY_DURATION.as_secs()
    );
    let _ = writeln!(
        t,
        "Limit column: lock operations/s (acquire and release each count, 2 per cycle) ÷ EVALSHA -c 50 \
         requests/s — Redis calls against Redis calls.\n"
    );
    let _ = writeln!(
        t,
        "CPU: % of one core over the run, and µs per cycle, of this process and of redis-server; script exec: \
         µs Redis spent running scripts per cycle and that time as % of the wall time (Redis runs them on one \
         thread, so near 100 % the scripts alone saturate it).\n"
    );
    many_rows(&mut t, results, |r| &r.many, c50);
    let _ = writeln!(
        t,
        "\n### 4b. Many keys, skewed: {ZIPF_TASKS} tasks over {ZIPF_KEYS} keys on one client, {} s\n",
        MANY_DURATION.as_secs()
    );
    let _ = writeln!(
        t,
        "Every cycle, a task draws a key by a Zipf law (exponent {ZIPF_S}: the hottest key gets about 10 % of \
         the draws, the 100 hottest about half), takes a new owner of it (`get_lock`, or the library's \
         equivalent), locks, releases. Hot keys are contended by many tasks of the client at once, the tail \
         rarely. The raw baseline, which cannot wait, asks a busy key again after 1 ms. Columns as in 4.\n"
    );
    many_rows(&mut t, results, |r| &r.zipf, c50);

    // 5. Watchdog
    let fer_wd = fer.and_then(|r| r.wd.ok()).map(|s| s.script_calls_per_tick);
    let _ = writeln!(
        t,
        "\n### 5. Watchdog: {} locks held, {} s lease renewed every {} s; {} ticks measured\n",
        watchdog::WD_LOCKS,
        watchdog::WD_LEASE.as_secs(),
        watchdog::WD_INTERVAL.as_secs(),
        watchdog::WD_TICKS
    );
    let _ = writeln!(
        t,
        "Per tick = per renewal interval. Script calls: EVALSHA+EVAL+FCALL from INFO commandstats; CPU: \
         utime+stime from /proc over the window.\n"
    );
    let _ = writeln!(
        t,
        "| library | acquire 10k s | script calls/tick | all cmds/tick | client CPU ms/tick | redis CPU ms/tick | vs ferrisson (calls) |"
    );
    let _ = writeln!(t, "|---|---:|---:|---:|---:|---:|---:|");
    for r in results {
        match (&r.wd, r.wd.cell()) {
            (Outcome::Ok(s), _) => {
                let _ = writeln!(
                    t,
                    "| {} | {} | {} | {} | {} | {} | {} |",
                    r.name,
                    f2(s.acquire_s),
                    f0(s.script_calls_per_tick),
                    f0(s.cmds_per_tick),
                    f0(s.client_cpu_ms_per_tick),
                    f0(s.server_cpu_ms_per_tick),
                    ratio(s.script_calls_per_tick, fer_wd),
                );
            }
            (_, Some(c)) => {
                let _ = writeln!(t, "| {} | {c} | | | | | |", r.name);
            }
            _ => {}
        }
    }

    // 6. Memory
    t.push_str(&render_memory(results));

    // 7. Semaphore
    t.push_str(&render_semaphore(sem));

    // 8. Cluster
    if let Some(cl) = cl {
        t.push_str(&cluster::render(cl));
    }

    // Targets
    let peers: Vec<&LibResult> = results.iter().filter(|r| r.kind == Kind::Peer).collect();
    let best = |f: &dyn Fn(&LibResult) -> Option<f64>| -> Option<(f64, &'static str)> {
        peers
            .iter()
            .filter_map(|r| f(r).map(|v| (v, r.name)))
            .max_by(|a, b| a.0.total_cmp(&b.0))
    };
    let mut g = String::new();
    let _ = writeln!(g, "### Targets (ferrisson)\n");
    let _ = writeln!(g, "| target | measured | result |");
    let _ = writeln!(g, "|---|---|---|");
    let mut line = |name: String, measured: String, pass: Option<bool>| {
        let res = match pass {
            Some(true) => "PASS",
            Some(false) => "MISS",
            None => "n/a",
        };
        let _ = writeln!(g, "| {name} | {measured} | {res} |");
    };
    // 1
    if let Some(fs) = fer_seq {
        match raw_seq {
            Some(rs) => line(
                "sequential ≥ 0.9× raw baseline".into(),
                format!(
                    "{} vs {} cycles/s = {}",
                    f0(fs),
                    f0(rs),
                    ratio(fs, Some(rs))
                ),
                Some(fs >= 0.9 * rs),
            ),
            None => line(
                "sequential ≥ 0.9× raw baseline".into(),
                "raw not run".into(),
                None,
            ),
        }
        let bp = best(&|r| r.seq.ok().map(|s| s.ops_per_s));
        match bp {
            Some((v, n)) => line(
                "sequential ≥ 1.3× best peer".into(),
                format!("{} vs {} ({n}) = {}", f0(fs), f0(v), ratio(fs, Some(v))),
                Some(fs >= 1.3 * v),
            ),
            None => line(
                "sequential ≥ 1.3× best peer".into(),
                "no peer result".into(),
                None,
            ),
        }
    } else {
        line("sequential".into(), "ferrisson did not run".into(), None);
    }
    // 2: on both runtimes
    for (variant, current_thread) in [
        ("own current-thread runtime", true),
        ("shared 2-worker runtime", false),
    ] {
        if let Some(c) = fer.and_then(|r| contention_of(r, current_thread).ok()) {
            let bp = best(&|r| contention_of(r, current_thread).ok().map(|s| s.ops_per_s));
            let even = |s: &Contention| {
                let m = s.per_task.iter().sum::<usize>() as f64 / s.per_task.len() as f64;
                let mx = *s.per_task.iter().max().unwrap_or(&0) as f64;
                let mn = *s.per_task.iter().min().unwrap_or(&0) as f64;
                mx <= 2.0 * m && mn >= m / 2.0
            };
            let fair = best(&|r| {
                contention_of(r, current_thread)
                    .ok()
                    .filter(|s| even(s))
                    .map(|s| s.ops_per_s)
            });
            let fair_note = match fair {
                Some((v, n)) => format!(
                    "; best peer within 2× of even: {} ({n}) = {}",
                    f0(v),
                    ratio(c.ops_per_s, Some(v))
                ),
                None => "; no peer within 2× of even".into(),
            };
            match bp {
                Some((v, n)) => line(
                    format!("contended ops/s ≥ 1.2× best peer ({variant})"),
                    format!(
                        "{} vs {} ({n}) = {}{fair_note}",
                        f0(c.ops_per_s),
                        f0(v),
                        ratio(c.ops_per_s, Some(v))
                    ),
                    Some(c.ops_per_s >= 1.2 * v),
                ),
                None => line(
                    format!("contended ops/s ≥ 1.2× best peer ({variant})"),
                    "no peer result".into(),
                    None,
                ),
            }
            let n = c.per_task.len() as f64;
            let m = c.per_task.iter().sum::<usize>() as f64 / n;
            let (mn, mx) = (
                *c.per_task.iter().min().unwrap() as f64,
                *c.per_task.iter().max().unwrap() as f64,
            );
            line(
                format!("contended acquisitions per task: max ≤ 2×mean, min ≥ mean/2 ({variant})"),
                format!(
                    "min {mn:.0}, max {mx:.0}, mean {m:.0} (per task {:?})",
                    c.per_task
                ),
                Some(mx <= 2.0 * m && mn >= m / 2.0),
            );
        } else {
            line(
                format!("contention ({variant})"),
                "ferrisson result missing".into(),
                None,
            );
        }
    }
    // 3: both variants must meet the targets
    for (variant, hand) in [
        ("one client", fer.map(|r| &r.hand)),
        ("two clients", fer.map(|r| &r.hand2)),
    ] {
        if let Some(h) = hand.and_then(|h| h.ok()) {
            line(
                format!("handoff, {variant}: p50 ≤ 0.3 ms (from release returning)"),
                format!(
                    "{} ms (from release starting: {} ms, {})",
                    f3(h.ret_p50_ms),
                    f3(h.start_p50_ms),
                    if h.start_p50_ms <= 0.3 {
                        "also within"
                    } else {
                        "over"
                    }
                ),
                Some(h.ret_p50_ms <= 0.3),
            );
            line(
                format!("handoff, {variant}: p99 ≤ 2 ms (from release returning)"),
                format!(
                    "{} ms (from release starting: {} ms, {})",
                    f3(h.ret_p99_ms),
                    f3(h.start_p99_ms),
                    if h.start_p99_ms <= 2.0 {
                        "also within"
                    } else {
                        "over"
                    }
                ),
                Some(h.ret_p99_ms <= 2.0),
            );
        } else {
            line(
                format!("handoff, {variant}"),
                "ferrisson result missing".into(),
                None,
            );
        }
    }
    // 4
    match (fer.and_then(|r| r.many.ok()), c50) {
        (Some(m), Some(l)) => line(
            "many keys ≥ 0.7× EVALSHA -c 50 limit (lock ops: 2 per cycle)".into(),
            format!(
                "{} ops/s ({} cycles/s) vs {} requests/s = {} (cycles basis: {})",
                f0(2.0 * m.cycles_per_s),
                f0(m.cycles_per_s),
                f0(l),
                ratio(2.0 * m.cycles_per_s, Some(l)),
                ratio(m.cycles_per_s, Some(l))
            ),
            Some(2.0 * m.cycles_per_s >= 0.7 * l),
        ),
        _ => line("many keys".into(), "result or limit missing".into(), None),
    }
    // 4, against the raw baseline and the fastest peer of the same run (issue 12)
    let raw_many = results
        .iter()
        .find(|r| r.kind == Kind::Raw)
        .and_then(|r| r.many.ok());
    let best_many = results
        .iter()
        .filter(|r| r.kind == Kind::Peer)
        .filter_map(|r| r.many.ok().map(|m| (r.name, m)))
        .max_by(|a, b| a.1.cycles_per_s.total_cmp(&b.1.cycles_per_s));
    match (fer.and_then(|r| r.many.ok()), best_many) {
        (Some(m), Some((peer, p))) => {
            line(
                "many keys cycles/s ≥ 1.0× the fastest peer".into(),
                format!(
                    "{} vs {} ({peer}) = {}",
                    f0(m.cycles_per_s),
                    f0(p.cycles_per_s),
                    ratio(m.cycles_per_s, Some(p.cycles_per_s))
                ),
                Some(m.cycles_per_s >= p.cycles_per_s),
            );
            line(
                "many keys redis µs/cycle ≤ 1.2× the fastest peer's".into(),
                format!(
                    "{:.1} vs {:.1} ({peer}) = {}",
                    m.server_us_per_cycle,
                    p.server_us_per_cycle,
                    ratio(m.server_us_per_cycle, Some(p.server_us_per_cycle))
                ),
                Some(m.server_us_per_cycle <= 1.2 * p.server_us_per_cycle),
            );
        }
        _ => line(
            "many keys against the fastest peer".into(),
            "result missing".into(),
            None,
        ),
    }
    match (fer.and_then(|r| r.many.ok()), raw_many) {
        (Some(m), Some(raw)) => {
            line(
                "many keys cycles/s ≥ 0.8× raw baseline".into(),
                format!(
                    "{} vs {} = {}",
                    f0(m.cycles_per_s),
                    f0(raw.cycles_per_s),
                    ratio(m.cycles_per_s, Some(raw.cycles_per_s))
                ),
                Some(m.cycles_per_s >= 0.8 * raw.cycles_per_s),
            );
            line(
                "many keys script exec µs/cycle ≤ 2× raw baseline's".into(),
                format!(
                    "{:.1} vs {:.1} = {}",
                    m.script_exec_us_per_cycle,
                    raw.script_exec_us_per_cycle,
                    ratio(
                        m.script_exec_us_per_cycle,
                        Some(raw.script_exec_us_per_cycle)
                    )
                ),
                Some(m.script_exec_us_per_cycle <= 2.0 * raw.script_exec_us_per_cycle),
            );
            line(
                "many keys client µs/cycle ≤ 1.2× raw baseline's".into(),
                format!(
                    "{:.1} vs {:.1} = {}",
                    m.client_us_per_cycle,
                    raw.client_us_per_cycle,
                    ratio(m.client_us_per_cycle, Some(raw.client_us_per_cycle))
                ),
                Some(m.client_us_per_cycle <= 1.2 * raw.client_us_per_cycle),
            );
        }
        _ => line(
            "many keys against the raw baseline".into(),
            "result missing".into(),
            None,
        ),
    }
    // 5
    if let Some(w) = fer.and_then(|r| r.wd.ok()) {
        let budget = w.locks.div_ceil(100) as f64;
        line(
            format!(
                "watchdog ≤ ceil({}/100) = {budget:.0} script calls per tick",
                w.locks
            ),
            format!(
                "{} calls/tick ({} cmds/tick), client CPU {} ms/tick",
                f0(w.script_calls_per_tick),
                f0(w.cmds_per_tick),
                f0(w.client_cpu_ms_per_tick)
            ),
            Some(w.script_calls_per_tick <= budget + 0.5),
        );
    } else {
        line("watchdog".into(), "ferrisson result missing".into(), None);
    }
    (t, g)
}

/// Bytes as B, kB or MB (10³, 10⁶).
fn bytes(b: f64) -> String {
    if b.is_nan() {
        "–".into()
    } else if b.abs() >= 1e6 {
        format!("{:.2} MB", b / 1e6)
    } else if b.abs() >= 1e3 {
        format!("{:.1} kB", b / 1e3)
    } else {
        format!("{b:.0} B")
    }
}

/// Names in the projection column.
const MEM_PROJECTED: f64 = 10_000_000.0;

/// What a library's leftover would be at MEM_PROJECTED names: nothing when it left no keys and
/// less than a byte per name; the per-slot bound when it left only per-slot counters; otherwise
/// its bytes per name times the names.
fn mem_projection(m: &Memory) -> String {
    let per_name = m.bytes_per_name();
    if m.after_wait.keys <= 0 && per_name < 1.0 {
        "0 (nothing left)".into()
    } else if m.after_wait.keys > 0 && m.only_slot_counters {
        let per_key = m.after_wait.bytes as f64 / m.after_wait.keys as f64;
        format!(
            "≤ {} (bounded: ≤ {} counters × {per_key:.0} B)",
            bytes(per_key * memory::SLOTS as f64),
            memory::SLOTS
        )
    } else {
        format!(
            "{} (grows per name: {per_name:.1} B × names)",
            bytes(per_name * MEM_PROJECTED)
        )
    }
}

fn render_memory(results: &[LibResult]) -> String {
    let mut t = String::new();
    let wait = memory::MEM_WAIT.as_secs();
    let _ = writeln!(
        t,
        "\n### 6. Memory: what {} distinct names, each locked and released once, leave in Redis\n",
        memory::MEM_NAMES
    );
    let _ = writeln!(
        t,
        "Per library, on a flushed server: connect, lock and release one warm-up name per task (so \
         connections, pools and scripts are in place; SCAN and PTTL, which the readings use, run once too, as \
         Redis 7 allocates a command's latency histogram on its first call), wait {} s (Redis shrinks the \
         buffers of a connection idle for over 2 s, so this reading and the one after the wait find them \
         alike), then read the keys (INFO keyspace: keys, and of them those with a TTL) and `used_memory` \
         (INFO memory). Then {} tasks lock and release the names `bench_mem_0` … `bench_mem_{}` once each through the same adapter as the other workloads \
         (`owner(name)`, `lock()`, `unlock()`; stopped at {} s), and the same numbers are read again right \
         after the last release and {wait} s later, the library still connected. Keys and bytes are the \
         differences to before the names; bytes per name is the difference after {wait} s ÷ names. Keys \
         with a TTL go by themselves (the {wait} s column shows those that did); keys without one stay until \
         deleted. `used_memory` also moves by some kB with client buffers, so under 1 B per name with no \
         key left is noise. Samples: up to {} keys left right after the run, one per key prefix, with their \
         TTL then. The last column projects to {} million names: a leftover made only of ferrisson's \
         per-slot counters (`{}…}}`) cannot exceed one counter per Redis Cluster hash slot \
         ({}), any other leftover is counted as growing by its bytes per name.\n",
        memory::MEM_SETTLE.as_secs(),
        memory::MEM_TASKS,
        memory::MEM_NAMES - 1,
        memory::MEM_CAP.as_secs(),
        memory::SAMPLES,
        MEM_PROJECTED / 1e6,
        memory::SLOT_COUNTER_PREFIX,
        memory::SLOTS,
    );
    let _ = writeln!(
        t,
        "| library | names | right after: keys (with TTL) | right after: bytes | after {wait} s: keys (with TTL) | after {wait} s: bytes | bytes per name | at 10 M names | keys left right after (samples) |"
    );
    let _ = writeln!(t, "|---|---:|---:|---:|---:|---:|---:|---|---|");
    for r in results {
        match (&r.mem, r.mem.cell()) {
            (Outcome::Ok(m), _) => {
                let names = if m.capped {
                    format!("{} (stopped at {} s)", m.names, memory::MEM_CAP.as_secs())
                } else {
                    m.names.to_string()
                };
                let samples = if m.samples.is_empty() {
                    "none".to_owned()
                } else {
                    m.samples
                        .iter()
                        .map(|s| format!("`{}`", s.replace('|', "/")))
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                let _ = writeln!(
                    t,
                    "| {} | {names} | {} ({}) | {} | {} ({}) | {} | {} | {} | {samples} |",
                    r.name,
                    m.right_after.keys,
                    m.right_after.with_ttl,
                    m.right_after.bytes,
                    m.after_wait.keys,
                    m.after_wait.with_ttl,
                    m.after_wait.bytes,
                    f1(m.bytes_per_name()),
                    mem_projection(m),
                );
            }
            (_, Some(c)) => {
                let _ = writeln!(t, "| {} | {c} | | | | | | | |", r.name);
            }
            _ => {}
        }
    }
    let ok: Vec<(&LibResult, &Memory)> = results
        .iter()
        .filter_map(|r| r.mem.ok().map(|m| (r, m)))
        .collect();
    if ok.is_empty() {
        return t;
    }
    let left: Vec<String> = ok
        .iter()
        .filter(|(_, m)| m.after_wait.keys > 0)
        .map(|(r, m)| {
            format!(
                "{} ({} keys, {})",
                r.name,
                m.after_wait.keys,
                bytes(m.after_wait.bytes as f64)
            )
        })
        .collect();
    let clean: Vec<&str> = ok
        .iter()
        .filter(|(_, m)| m.after_wait.keys <= 0)
        .map(|(r, _)| r.name)
        .collect();
    let _ = writeln!(
        t,
        "\nKeys still there {wait} s after the last release: {}. No key left: {}.",
        if left.is_empty() {
            "none".to_owned()
        } else {
            left.join("; ")
        },
        if clean.is_empty() {
            "none".to_owned()
        } else {
            clean.join(", ")
        },
    );
    if let Some((_, m)) = ok
        .iter()
        .find(|(r, _)| r.kind == Kind::Ferrisson)
        .filter(|(_, m)| m.after_wait.keys > 0 && m.only_slot_counters)
    {
        let (n, k, b) = (
            m.names as f64,
            m.after_wait.keys as f64,
            m.after_wait.bytes as f64,
        );
        let slots = memory::SLOTS as f64;
        let expected = slots * (1.0 - (-n / slots).exp());
        let _ = writeln!(
            t,
            "\nferrisson's leftover is its fencing counters, one per hash slot the names fall in: {} names hit \
             {k:.0} slots ({} names hashed at random over {} slots would hit {expected:.0} on average), {} in \
             all, {:.0} B per counter and {:.1} B per name at this count. A further name only adds a counter if \
             its slot has none yet, so at {} million names, or any number, it stays at most {} counters ≈ {} \
             ({:.2} B per name), where a leftover of {:.1} B per name would be {}. Only `RFencedLock` also keeps Redisson's \
             per-name counter (`redisson_lock_token:{{name}}`, for Java interop); this workload uses `get_lock`.",
            m.names,
            m.names,
            memory::SLOTS,
            bytes(b),
            b / k,
            b / n,
            MEM_PROJECTED / 1e6,
            memory::SLOTS,
            bytes(b / k * slots),
            b / k * slots / MEM_PROJECTED,
            b / n,
            bytes(b / n * MEM_PROJECTED),
        );
    }
    t
}

fn render_semaphore(sem: &[SemResult]) -> String {
    use semaphore::{SEM_DURATION, SEM_HOLD, SEM_PERMITS, SEM_ROUNDS, SEM_TASKS};
    let mut t = String::new();
    let _ = writeln!(
        t,
        "\n### 7. Semaphore: {SEM_PERMITS} permits, {SEM_TASKS} tasks, each holding a permit {} ms, {} s per run ({SEM_ROUNDS} runs)\n",
        SEM_HOLD.as_millis(),
        SEM_DURATION.as_secs()
    );
    let _ = writeln!(
        t,
        "One semaphore of {SEM_PERMITS} permits on one client (one library instance); {SEM_TASKS} tasks on the \
         shared 2-worker runtime each take one permit, hold it {} ms (a tokio sleep, so a little longer: see \
         hold), give it back, and again, until {} s are over; an acquire still waiting then may finish and gives its \
         permit straight back, uncounted. Each \
         library's {SEM_ROUNDS} runs are interleaved with the other libraries', each on a flushed server with a \
         freshly connected library and one warm-up cycle per task. Every holder goes through an in-process \
         counter that must stay at or under {SEM_PERMITS}: one more holder at once panics the task and shows as \
         FAILED; peak is the most holders seen at once (under {SEM_PERMITS}: the library never let the permits be \
         used together); free after: the permits free once every task of a run has released, one per run, \
         which must be {SEM_PERMITS} (less: the library lost permits). The hold is there so that the permits are busy and most tasks wait: the rate then \
         measures how fast a released permit reaches a waiter (with no hold, the task that released mostly \
         takes its permit straight back), and an overlap would have a whole hold to show.\n",
        SEM_HOLD.as_millis(),
        SEM_DURATION.as_secs()
    );
    let _ = writeln!(
        t,
        "cycles/s is the median run (range: slowest..fastest run); latencies, hold and per-cycle costs are \
         that median run's; per task min..max is over every run. Ceiling: {SEM_PERMITS} ÷ mean hold, the rate \
         if a released permit reached a waiter at no cost. Per cycle, over the whole run (failed attempts, \
         polls, wake-ups and lease extensions included): socket reads Redis made (`total_reads_processed`; \
         unlike workload 1, the {SEM_TASKS} tasks share a connection, so one read often brings several \
         tasks' requests and reads are fewer than requests: use scripts and all cmds for the work done), \
         script calls (EVALSHA/EVAL/FCALL), µs Redis spent in them, every command Redis ran (those inside \
         scripts included), and CPU µs of this process and of redis-server.\n"
    );
    let fer = sem
        .iter()
        .find(|r| r.kind == Kind::Ferrisson)
        .and_then(|r| r.sem.ok())
        .map(|s| s.cycles_per_s);
    let raw = sem
        .iter()
        .find(|r| r.kind == Kind::Raw)
        .and_then(|r| r.sem.ok())
        .map(|s| s.cycles_per_s);
    let _ = writeln!(
        t,
        "| library | cycles/s | range | hold ms | vs ceiling | acquire p50 ms | acquire p99 ms | per task min..max | peak holders | free after | reads | scripts | script exec µs | all cmds | client µs | redis µs | vs ferrisson | vs raw |"
    );
    let _ = writeln!(
        t,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for r in sem {
        match (&r.sem, r.sem.cell()) {
            (Outcome::Ok(s), _) => {
                let stalled = match s.stalled {
                    Some((n, at)) => format!(
                        " (stalled in {n} of {} runs: no grant after {at:.1} s of {})",
                        s.runs,
                        SEM_DURATION.as_secs()
                    ),
                    None => String::new(),
                };
                let _ = writeln!(
                    t,
                    "| {}{stalled} | {} | {}..{} | {} | {} | {} | {} | {}..{} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    r.name,
                    f0(s.cycles_per_s),
                    f0(s.range.0),
                    f0(s.range.1),
                    f3(s.hold_ms_mean),
                    ratio(s.cycles_per_s, Some(s.ceiling())),
                    f3(s.acq_p50_ms),
                    f3(s.acq_p99_ms),
                    s.per_task_min,
                    s.per_task_max,
                    s.peak,
                    s.free_after
                        .iter()
                        .map(|f| f.to_string())
                        .collect::<Vec<_>>()
                        .join(", "),
                    f2(s.reads_per_cycle),
                    f2(s.scripts_per_cycle),
                    f1(s.script_exec_us_per_cycle),
                    f2(s.cmds_per_cycle),
                    f0(s.client_us_per_cycle),
                    f0(s.server_us_per_cycle),
                    ratio(s.cycles_per_s, fer),
                    ratio(s.cycles_per_s, raw),
                );
            }
            (_, Some(c)) => {
                let _ = writeln!(t, "| {} | {c} | | | | | | | | | | | | | | | | |", r.name);
            }
            _ => {}
        }
    }
    let _ = writeln!(t, "\nHow each semaphore is driven:\n");
    for r in sem {
        let _ = writeln!(t, "- **{}**: {}", r.name, r.config);
    }
    let _ = writeln!(
        t,
        "\nNot in this table, having no Redis-backed counting semaphore: {}.",
        semaphore::NOT_INCLUDED
    );
    t
}

fn document(tables: &str, targets: &str, results: &[LibResult], env: &Env) -> String {
    let mut d = String::new();
    let _ = writeln!(
        d,
        "# Benchmarks: ferrisson against other Redis lock crates\n"
    );
    let _ = writeln!(
        d,
        "Generated by `benches/compare` (a separate Cargo project; do not edit this file by hand). To \
         regenerate, from the repository root:\n\n```sh\n{COMMAND}\n```\n\nIt starts one `redis-server` on a \
         free loopback port (`--save '' --appendonly no`), runs every workload on every library against it \
         in one process (a 2-worker tokio runtime), runs `redis-benchmark` against the same server for the \
         limit, and kills the server at the end. Section 8 starts a local Redis Cluster of its own too.\n"
    );
    let _ = writeln!(d, "- Machine: {} CPUs (`nproc`), {}", env.nproc, env.cpu);
    let _ = writeln!(d, "- Redis: {}", env.redis_version);
    let _ = writeln!(d, "- Toolchain: {}", env.rustc);
    let _ = writeln!(d, "- Date: {}", env.date);
    let _ = writeln!(d, "- Whole run: {:.0} s\n", env.elapsed.as_secs_f64());
    let _ = writeln!(
        d,
        "Every workload checks mutual exclusion with a shared in-process counter that must be 0 when a \
         holder enters; an overlap panics the task and shows as FAILED. Ratios are library ÷ ferrisson \
         (for latencies, above 1× is slower). The Redis server, the client and (for the limit) \
         redis-benchmark share the same {} CPUs, so these are relative numbers for this machine.\n",
        env.nproc
    );
    d.push_str("## Results\n\n");
    d.push_str(tables);
    d.push('\n');
    d.push_str(targets);
    d.push_str("\n## How each library is driven\n\n");
    for r in results {
        let _ = writeln!(d, "- **{}**: {}", r.name, r.config);
    }
    let _ = writeln!(
        d,
        "\nPolling libraries get a {} ms retry interval where they allow one (their defaults of 50 ms–1 s \
         would measure the sleep). Libraries that renew leases (rslock inside `using`, rlock, \
         async-redis-lock, distkit) renew one lock per call on a timer per lock; ferrisson renews up to 100 \
         leases per script call from one task per client. redis-lock, redlock and rdlock have no renewal; \
         redisson 0.1's watchdog does not work with a lease of 1 s or more (see the table). Every peer \
         is pinned to an exact version (`=x.y.z`, the newest on crates.io when the harness was written) in \
         `benches/compare/Cargo.toml`, and all of them build with the toolchain above.\n",
        RETRY.as_millis()
    );
    d.push_str(
        "## Reading the numbers\n\n\
         - **Noise.** The client, Redis and redis-benchmark share the machine's CPUs (and whatever else runs \
         on it), and a cycle of two loopback round trips is dominated by waking threads up, so repeated runs \
         differ by 10–25 % and, for the short contention runs, by up to 3×. Workloads 1 and 2 therefore \
         interleave their runs across libraries and report the median run with the range; compare the ratios \
         of one run rather than absolute numbers across runs.\n\
         - **Script exec.** `script exec µs` is Redis's own time inside EVALSHA/EVAL/FCALL (INFO commandstats \
         `usec`). It sits on the critical path of every round trip in workload 1, and in workload 4 it shows \
         how close a library's scripts alone come to saturating Redis's single thread.\n\
         - **Contention.** Polling libraries usually let the task that just released take the lock again \
         (the others are asleep until their next poll), which is cheap but unfair: see `per task min..max`. \
         ferrisson's release hands the lock to the client's longest-waiting local waiter in the release's own \
         script call when no other client waits on the lock's channel (one script per acquisition, FIFO), and \
         an owner asking while another owner of the same client holds the lock lines up without a round \
         trip. With waiters in other clients it frees the lock and publishes, as Redisson does. One request per \
         acquisition is the floor for a lock whose every grant takes a fencing token from Redis, so ferrisson's \
         rate is set by the round trip: see the EVALSHA -c 1 limit. The two runtimes differ: on one thread, every \
         library pays the same thread wake-ups; on the 2-worker runtime, libraries that keep the second worker \
         busy (a renewal task per lock, polling tasks, the releasing task re-acquiring while the others' requests \
         are in flight) get cheaper wake-ups per round trip than ferrisson's strictly one-at-a-time chain, \
         which on this machine is worth as much as their extra round trips.\n\
         - **Handoff.** Both sides run in this process on two worker threads next to Redis, so A's release \
         reply and B's wake-up compete for the same CPUs; the time from A's release returning is the gap as \
         A and B see it, the time from the release call starting adds A's round trip as delayed by that \
         competition. With A and B on one ferrisson client, A's release script grants the lock to B, so B \
         holds it when A's release returns; on two clients, B is woken by the unlock message and asks again \
         (one pub/sub message and one round trip after the release).\n\
         - **Limit.** redis-benchmark -c 50 keeps one request in flight per connection. Clients that multiplex \
         many tasks over one connection (raw, ferrisson, most peers) pipeline, so they can exceed that figure \
         (see the informative -P 16 row); the many-keys target compares lock operations (2 per cycle) with it.\n",
    );
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use memory::Left;

    fn na<T>() -> Outcome<T> {
        Outcome::Na("not run".into())
    }

    fn result(name: &'static str, kind: Kind, mem: Outcome<Memory>) -> LibResult {
        LibResult {
            name,
            kind,
            config: "config".into(),
            seq: na(),
            seq_mt: na(),
            cont: na(),
            cont_ct: na(),
            hand: na(),
            hand2: na(),
            many: na(),
            zipf: na(),
            wd: na(),
            mem,
        }
    }

    fn mem(
        keys: i64,
        with_ttl: i64,
        bytes: i64,
        only_slot_counters: bool,
        samples: &[&str],
    ) -> Memory {
        let left = Left {
            keys,
            with_ttl,
            bytes,
        };
        Memory {
            names: 20_000,
            capped: false,
            right_after: left,
            after_wait: left,
            only_slot_counters,
            samples: samples.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn env() -> Env {
        Env {
            nproc: "2".into(),
            cpu: "cpu".into(),
            redis_version: "7".into(),
            date: "today".into(),
            rustc: "rustc".into(),
            elapsed: Duration::from_secs(1),
        }
    }

    #[test]
    fn projections() {
        assert_eq!(
            mem_projection(&mem(0, 0, 4000, false, &[])),
            "0 (nothing left)"
        );
        assert_eq!(
            mem_projection(&mem(10_000, 0, 800_000, true, &[])),
            "≤ 1.31 MB (bounded: ≤ 16384 counters × 80 B)"
        );
        assert_eq!(
            mem_projection(&mem(20_000, 0, 1_800_000, false, &[])),
            "900.00 MB (grows per name: 90.0 B × names)"
        );
        // Bytes without keys that are not noise still count per name.
        assert_eq!(
            mem_projection(&mem(0, 0, 100_000, false, &[])),
            "50.00 MB (grows per name: 5.0 B × names)"
        );
    }

    /// The full run writes `document(render(..))`: the memory section must be in it, rows and notes.
    #[test]
    fn a_full_run_writes_the_memory_section() {
        let results = vec![
            result("raw", Kind::Raw, Outcome::Ok(mem(0, 0, 1088, false, &[]))),
            result(
                "ferrisson",
                Kind::Ferrisson,
                Outcome::Ok(mem(
                    10_000,
                    0,
                    800_000,
                    true,
                    &["ferrisson_token:{1} (no TTL)"],
                )),
            ),
            result(
                "peer a",
                Kind::Peer,
                Outcome::Ok(mem(20_000, 0, 1_800_000, false, &["a:x|1 (no TTL)"])),
            ),
            result("peer b", Kind::Peer, Outcome::Failed("boom".into())),
        ];
        let skipped = || Err(anyhow::anyhow!("skipped"));
        let limits = Limits {
            c1: skipped(),
            c50: skipped(),
            c50p16: skipped(),
        };
        let (tables, targets) = render(&results, &[], None, &limits);
        let doc = document(&tables, &targets, &results, &env());
        let section = doc
            .find("### 6. Memory: what 20000 distinct names")
            .expect("memory section");
        assert!(
            section < doc.find("### Targets").unwrap(),
            "the section comes with the other tables"
        );
        for line in [
            "| raw | 20000 | 0 (0) | 1088 | 0 (0) | 1088 | 0.1 | 0 (nothing left) | none |",
            "| ferrisson | 20000 | 10000 (0) | 800000 | 10000 (0) | 800000 | 40.0 | ≤ 1.31 MB (bounded: ≤ 16384 counters × 80 B) | `ferrisson_token:{1} (no TTL)` |",
            "| peer a | 20000 | 20000 (0) | 1800000 | 20000 (0) | 1800000 | 90.0 | 900.00 MB (grows per name: 90.0 B × names) | `a:x/1 (no TTL)` |",
            "| peer b | FAILED: boom | | | | | | | |",
            "Keys still there 6 s after the last release: ferrisson (10000 keys, 800.0 kB); peer a (20000 keys, 1.80 MB). No key left: raw.",
        ] {
            assert!(
                doc.lines().any(|l| l == line),
                "missing line {line:?} in\n{doc}"
            );
        }
        assert!(doc.contains("20000 names hit 10000 slots"), "{doc}");
        assert!(doc.contains("it stays at most 16384 counters ≈ 1.31 MB (0.13 B per name), where a leftover of 40.0 B per name would be 400.00 MB"), "{doc}");
    }

    /// The full run writes section 7 with the other tables, before the targets, a row per
    /// semaphore library (a FAILED one included) and the notes on who is driven how.
    #[test]
    fn a_full_run_writes_the_semaphore_section() {
        let s = |rate: f64, free: i64| semaphore::Semaphore {
            runs: 3,
            cycles_per_s: rate,
            range: (rate - 10.0, rate + 10.0),
            acq_p50_ms: 0.5,
            acq_p99_ms: 5.0,
            per_task_min: 90,
            per_task_max: 110,
            hold_ms_mean: 2.0,
            peak: 4,
            reads_per_cycle: 1.5,
            scripts_per_cycle: 2.0,
            script_exec_us_per_cycle: 10.0,
            cmds_per_cycle: 6.0,
            client_us_per_cycle: 50.0,
            server_us_per_cycle: 40.0,
            stalled: None,
            free_after: vec![free, free, free],
        };
        let row = |name, kind, sem| SemResult {
            name,
            kind,
            config: format!("{name} config"),
            sem,
        };
        let sem = vec![
            row("raw", Kind::Raw, Outcome::Ok(s(1000.0, 4))),
            row("ferrisson", Kind::Ferrisson, Outcome::Ok(s(1500.0, 4))),
            row("peer", Kind::Peer, Outcome::Ok(s(500.0, 3))),
            row(
                "bad",
                Kind::Peer,
                Outcome::Failed("SEMAPHORE LIMIT VIOLATED (bad): 4 other holders".into()),
            ),
        ];
        let skipped = || Err(anyhow::anyhow!("skipped"));
        let limits = Limits {
            c1: skipped(),
            c50: skipped(),
            c50p16: skipped(),
        };
        let (tables, targets) = render(&[], &sem, None, &limits);
        let doc = document(&tables, &targets, &[], &env());
        let section = doc
            .find("### 7. Semaphore: 4 permits, 16 tasks")
            .expect("semaphore section");
        assert!(
            section < doc.find("### Targets").unwrap(),
            "the section comes with the other tables"
        );
        for line in [
            "| ferrisson | 1500 | 1490..1510 | 2.000 | 0.75× | 0.500 | 5.000 | 90..110 | 4 | 4, 4, 4 | 1.50 | 2.00 | 10.0 | 6.00 | 50 | 40 | 1.00× | 1.50× |",
            "| peer | 500 | 490..510 | 2.000 | 0.25× | 0.500 | 5.000 | 90..110 | 4 | 3, 3, 3 | 1.50 | 2.00 | 10.0 | 6.00 | 50 | 40 | 0.33× | 0.50× |",
            "| bad | FAILED: SEMAPHORE LIMIT VIOLATED (bad): 4 other holders | | | | | | | | | | | | | | | | |",
            "- **peer**: peer config",
        ] {
            assert!(
                doc.lines().any(|l| l == line),
                "missing line {line:?} in\n{doc}"
            );
        }
        assert!(sem[3].sem.violated());
    }

    /// The full run writes section 8 with the other tables, before the targets: a row per
    /// topology in workloads 1 and 4, a failed cluster shown as FAILED, the spread over masters.
    #[test]
    fn a_full_run_writes_the_cluster_section() {
        let seq = |rate: f64, replicas: f64| Sequential {
            cycles: 9000,
            ops_per_s: rate,
            ops_range: (rate - 100.0, rate + 100.0),
            p50_ms: 0.1,
            p99_ms: 0.5,
            cmds_per_cycle: 9.0,
            scripts_per_cycle: 2.0,
            script_exec_us_per_cycle: 10.0,
            reads_per_cycle: 2.0,
            client_us_per_cycle: 30.0,
            server_us_per_cycle: 40.0,
            replica_us_per_cycle: replicas,
            capped: false,
        };
        let many = |rate: f64, per_master: Vec<(f64, f64)>| cluster::ManyRuns {
            median: ManyKeys {
                cycles_per_s: rate,
                per_task_min: 90,
                per_task_max: 110,
                client_cpu_pct: 50.0,
                server_cpu_pct: 60.0,
                client_us_per_cycle: 10.0,
                server_us_per_cycle: 12.0,
                replica_us_per_cycle: f64::NAN,
                reads_per_cycle: 0.5,
                p50_ms: 1.0,
                p99_ms: 2.0,
                script_exec_us_per_cycle: 7.0,
                script_exec_pct: 40.0,
            },
            range: (rate - 1000.0, rate + 1000.0),
            per_master,
        };
        let cl = cluster::ClusterResults {
            one: cluster::Topology {
                seq: Outcome::Ok(seq(5000.0, f64::NAN)),
                many: Outcome::Ok(many(40000.0, Vec::new())),
            },
            cluster: cluster::Topology {
                seq: Outcome::Ok(seq(2500.0, 20.0)),
                many: Outcome::Failed("cluster: boom".into()),
            },
            keys_per_master: vec![23, 19, 22],
            startup: Duration::from_secs(3),
        };
        let skipped = || Err(anyhow::anyhow!("skipped"));
        let limits = Limits {
            c1: skipped(),
            c50: skipped(),
            c50p16: skipped(),
        };
        let (tables, targets) = render(&[], &[], Some(&cl), &limits);
        let doc = document(&tables, &targets, &[], &env());
        let section = doc
            .find("### 8. Cluster: workloads 1 and 4")
            .expect("cluster section");
        assert!(section < doc.find("### Targets").unwrap());
        for line in [
            "| one server | 5000 | 4900..5100 | 0.100 | 0.500 | 2.00 | 2.00 | 10.0 | 9.00 | 30 | 40 | – | 1.00× |",
            "| cluster, 3 masters | 2500 | 2400..2600 | 0.100 | 0.500 | 2.00 | 2.00 | 10.0 | 9.00 | 30 | 40 | 20 | 0.50× |",
            "| one server | 40000 | 39000..41000 | 1.000 | 2.000 | 90..110 | 0.50 | 50 | 60 | 10 | 12 | – | 7.0 (40 %) | 1.00× |",
            "| cluster, 3 masters | FAILED: cluster: boom | | | | | | | | | | | | |",
        ] {
            assert!(
                doc.lines().any(|l| l == line),
                "missing line {line:?} in\n{doc}"
            );
        }
        assert!(
            doc.contains("fall on the masters (by first slot) 23 / 19 / 22"),
            "{doc}"
        );
        // Not run at all: no section.
        let (tables, _) = render(&[], &[], None, &limits);
        assert!(!tables.contains("### 8."));
    }

    /// The bound is claimed only for a leftover made of per-slot counters alone.
    #[test]
    fn no_bound_for_other_keys() {
        let results = vec![result(
            "ferrisson",
            Kind::Ferrisson,
            Outcome::Ok(mem(10_000, 0, 800_000, false, &[])),
        )];
        let t = render_memory(&results);
        assert!(!t.contains("at most 16384 counters"), "{t}");
        assert!(
            t.contains("| 400.00 MB (grows per name: 40.0 B × names) |"),
            "{t}"
        );
    }
}
