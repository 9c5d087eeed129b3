//! Workload 9, fairness: who gets a contended lock, and how long the unluckiest acquire waits.
//!
//! - 9a: 2 clients × 4 workers on one lock, 1 ms holds back to back, 5 s; every library that
//!   waits (each client its own `connect`). Per worker: grants; per run: the fewest grants of a
//!   worker against the mean, and the longest single acquire.
//! - 9b: a Redisson-protocol client (the test support's emulation of Java Redisson's `RLock`:
//!   try, wait for the unlock message or the TTL, try again; `tests/support/redisson_lock.rs`)
//!   with 2 threads, next to 2 ferrisson clients × 2 workers, 5 ms holds, 1 ms pauses, 10 s.
//!
//! ferrisson runs twice: as built (starvation mode, 50 ms threshold) and with
//! `lock_starvation_threshold(None)` (the unfair policy alone). Three runs each, interleaved;
//! the tables show the median run by the fewest-grants ratio.

#[allow(dead_code)]
#[path = "../../../tests/support/redisson_lock.rs"]
mod redisson_lock;

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow};

use crate::libs::{
    AsyncRedisLock, Distkit, Ferrisson, FerrissonUnfair, Lib, Owner, Rdlock, RedisLock, Redisson,
    Redlock, Rlock, Rslock,
};
use crate::workloads::{Inside, join, spawn_task};
use crate::{Ctx, selected, timed};

pub const FAIR_RUNS: usize = 3;
const A_CLIENTS: usize = 2;
const A_WORKERS: usize = 4;
const A_HOLD: Duration = Duration::from_millis(1);
const A_DURATION: Duration = Duration::from_secs(5);
const B_FERRISSON_CLIENTS: usize = 2;
const B_WORKERS: usize = 2;
const B_JAVA_THREADS: u64 = 2;
const B_HOLD_MS: u64 = 5;
/// 9b's hold: 5 ms, or `COMPARE_FAIR_HOLD_MS` (longer holds make ferrisson's waiters starve).
fn b_hold() -> Duration {
    Duration::from_millis(
        std::env::var("COMPARE_FAIR_HOLD_MS")
            .ok()
            .and_then(|ms| ms.parse().ok())
            .unwrap_or(B_HOLD_MS),
    )
}
const B_PAUSE: Duration = Duration::from_millis(1);
const B_DURATION: Duration = Duration::from_secs(10);
/// Past its duration, a run gives its waiters this long to finish before it counts as capped.
const CAP: Duration = Duration::from_secs(30);
const KEY: &str = "bench_fair";

/// One worker's run: grants, and its longest acquire.
#[derive(Debug, Clone, Copy)]
pub struct Worker {
    pub grants: usize,
    pub worst_ms: f64,
}

/// One run: every worker (9b: the Java threads first).
#[derive(Debug, Clone)]
pub struct Run {
    pub workers: Vec<Worker>,
}

impl Run {
    pub fn total(&self) -> usize {
        self.workers.iter().map(|w| w.grants).sum()
    }
    fn mean(&self, of: &[Worker]) -> f64 {
        of.iter().map(|w| w.grants).sum::<usize>() as f64 / of.len().max(1) as f64
    }
    /// The fewest grants of a worker against the mean of all.
    pub fn min_ratio(&self) -> f64 {
        let min = self.workers.iter().map(|w| w.grants).min().unwrap_or(0);
        min as f64 / self.mean(&self.workers)
    }
    pub fn worst_ms(&self) -> f64 {
        self.workers.iter().map(|w| w.worst_ms).fold(0.0, f64::max)
    }
}

/// The runs of one library (or variant).
pub struct Entry {
    pub name: String,
    pub runs: Result<Vec<Run>, String>,
}

impl Entry {
    /// The median run by `key`.
    fn median_by(&self, key: impl Fn(&Run) -> f64) -> Option<&Run> {
        let runs = self.runs.as_ref().ok()?;
        let mut sorted: Vec<&Run> = runs.iter().collect();
        sorted.sort_by(|a, b| key(a).total_cmp(&key(b)));
        sorted.get(sorted.len() / 2).copied()
    }
}

pub struct Fairness {
    pub many: Vec<Entry>,
    pub java: Vec<Entry>,
}

/// Runs 9a and 9b.
pub async fn phase(ctx: &mut Ctx) -> Fairness {
    let url = ctx.server.url();
    let mut many: Vec<Entry> = Vec::new();
    let mut java: Vec<Entry> = Vec::new();
    type RunA = fn(String) -> futures::future::BoxFuture<'static, Result<Run>>;
    let mut libs: Vec<(&'static str, RunA)> = Vec::new();
    macro_rules! lib {
        ($t:ty) => {
            if selected(<$t as Lib>::NAME) && <$t as Lib>::NO_WAIT.is_none() {
                libs.push((<$t as Lib>::NAME, |u| Box::pin(many_clients::<$t>(u))));
            }
        };
    }
    lib!(Ferrisson);
    lib!(FerrissonUnfair);
    lib!(Rslock);
    lib!(Rlock);
    lib!(AsyncRedisLock);
    lib!(RedisLock);
    lib!(Distkit);
    lib!(Redlock);
    lib!(Redisson);
    lib!(Rdlock);
    for (name, _) in &libs {
        many.push(Entry {
            name: (*name).to_owned(),
            runs: Ok(Vec::new()),
        });
    }
    let ferrissons: Vec<(&str, bool)> = [(Ferrisson::NAME, true), (FerrissonUnfair::NAME, false)]
        .into_iter()
        .filter(|(n, _)| selected(n))
        .collect();
    for (name, _) in &ferrissons {
        java.push(Entry {
            name: (*name).to_owned(),
            runs: Ok(Vec::new()),
        });
    }
    for round in 0..FAIR_RUNS {
        for (i, (name, run)) in libs.iter().enumerate() {
            let _ = ctx.flush().await;
            let events = name.starts_with("rdlock");
            if events {
                let _ = ctx.config_set("notify-keyspace-events", "KA").await;
            }
            eprintln!("workload 9a, run {}: {name}", round + 1);
            let result = timed(A_DURATION + CAP, run(url.clone())).await;
            if events {
                let _ = ctx.config_set("notify-keyspace-events", "").await;
            }
            push(&mut many[i], result);
        }
        for (i, (name, starvation)) in ferrissons.iter().enumerate() {
            let _ = ctx.flush().await;
            eprintln!(
                "workload 9b, run {}: {name} next to a Redisson client",
                round + 1
            );
            let result = timed(B_DURATION + CAP, with_java(url.clone(), *starvation)).await;
            push(&mut java[i], result);
        }
    }
    Fairness { many, java }
}

fn push(entry: &mut Entry, result: Result<Run>) {
    match (&mut entry.runs, result) {
        (Ok(runs), Ok(run)) => runs.push(run),
        (runs @ Ok(_), Err(e)) => *runs = Err(format!("{e:#}")),
        (Err(_), _) => {}
    }
}

/// One worker: lock, hold, unlock, pause, until `until`.
async fn work<O: Owner>(
    mut owner: O,
    name: &'static str,
    inside: Arc<Inside>,
    until: Instant,
    hold: Duration,
    pause: Duration,
) -> Result<Worker> {
    let mut me = Worker {
        grants: 0,
        worst_ms: 0.0,
    };
    while Instant::now() < until {
        let asked = Instant::now();
        owner.lock().await?;
        me.worst_ms = me.worst_ms.max(asked.elapsed().as_secs_f64() * 1e3);
        inside.enter(name);
        me.grants += 1;
        tokio::time::sleep(hold).await;
        inside.exit();
        owner.unlock().await?;
        if !pause.is_zero() {
            tokio::time::sleep(pause).await;
        }
    }
    Ok(me)
}

/// 9a for one library.
async fn many_clients<L: Lib>(url: String) -> Result<Run> {
    let inside = Inside::new();
    let mut clients = Vec::new();
    for _ in 0..A_CLIENTS {
        clients.push(Arc::new(L::connect(&url).await?));
    }
    let mut owners = Vec::new();
    for client in &clients {
        for _ in 0..A_WORKERS {
            owners.push(client.owner(KEY).await?);
        }
    }
    let until = Instant::now() + A_DURATION;
    let handles: Vec<_> = owners
        .into_iter()
        .map(|o| {
            spawn_task::<L, _, _>(work(
                o,
                L::NAME,
                inside.clone(),
                until,
                A_HOLD,
                Duration::ZERO,
            ))
        })
        .collect();
    let mut workers = Vec::new();
    for h in handles {
        workers.push(join(h).await?);
    }
    Ok(Run { workers })
}

/// 9b: the Java threads, then the ferrisson workers.
async fn with_java(url: String, starvation: bool) -> Result<Run> {
    let inside = Inside::new();
    let java = redisson_lock::JavaClient::connect(&url, KEY).await?;
    let until = Instant::now() + B_DURATION;
    let mut handles = Vec::new();
    for t in 0..B_JAVA_THREADS {
        let (mut thread, inside) = (java.thread(t + 1), inside.clone());
        handles.push(tokio::spawn(async move {
            let mut me = Worker {
                grants: 0,
                worst_ms: 0.0,
            };
            while Instant::now() < until {
                let asked = Instant::now();
                thread.lock().await?;
                me.worst_ms = me.worst_ms.max(asked.elapsed().as_secs_f64() * 1e3);
                inside.enter("redisson emulation");
                me.grants += 1;
                tokio::time::sleep(b_hold()).await;
                inside.exit();
                if thread.unlock().await? != Some(true) {
                    return Err(anyhow!("the Java thread's unlock found no hold"));
                }
                tokio::time::sleep(B_PAUSE).await;
            }
            Ok(me)
        }));
    }
    for _ in 0..B_FERRISSON_CLIENTS {
        let builder = ferrisson::Client::builder().url(&url);
        let builder = if starvation {
            builder
        } else {
            builder.lock_starvation_threshold(None)
        };
        let client = builder.build().await.map_err(|e| anyhow!("{e}"))?;
        for _ in 0..B_WORKERS {
            let owner = crate::libs::FerrissonOwner::new(client.get_lock(KEY));
            handles.push(tokio::spawn(work(
                owner,
                "ferrisson",
                inside.clone(),
                until,
                b_hold(),
                B_PAUSE,
            )));
        }
    }
    let mut workers = Vec::new();
    for h in handles {
        workers.push(join(h).await?);
    }
    Ok(Run { workers })
}

fn grants(run: &Run) -> String {
    run.workers
        .iter()
        .map(|w| w.grants.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The two tables, with how to read them.
pub fn render(f: &Fairness) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "### Workload 9a: fairness, {A_CLIENTS} clients × {A_WORKERS} workers, {} ms holds back to back, {} s\n",
        A_HOLD.as_millis(),
        A_DURATION.as_secs()
    );
    let _ = writeln!(
        out,
        "Median of {FAIR_RUNS} runs by the fewest-grants ratio (worker's grants / mean; 1 is even). \
         Target for ferrisson: ≥ 0.5, no acquire over 100 ms, total ≥ 0.8× the unfair policy's.\n"
    );
    let _ = writeln!(
        out,
        "| library | fewest / mean (runs) | longest acquire ms (runs) | total grants (runs) | grants per worker (median run) |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|");
    for e in &f.many {
        let Some(median) = e.median_by(Run::min_ratio) else {
            let _ = writeln!(
                out,
                "| {} | {} | | | |",
                e.name,
                e.runs.as_ref().err().map_or("no run", |s| s.as_str())
            );
            continue;
        };
        let runs = e.runs.as_ref().map(Vec::as_slice).unwrap_or_default();
        let each = |f: &dyn Fn(&Run) -> String| runs.iter().map(f).collect::<Vec<_>>().join(" / ");
        let _ = writeln!(
            out,
            "| {} | {:.2} ({}) | {:.0} ({}) | {} ({}) | {} |",
            e.name,
            median.min_ratio(),
            each(&|r| format!("{:.2}", r.min_ratio())),
            median.worst_ms(),
            each(&|r| format!("{:.0}", r.worst_ms())),
            median.total(),
            each(&|r| r.total().to_string()),
            grants(median)
        );
    }
    let _ = writeln!(
        out,
        "\n### Workload 9b: a Redisson-protocol client ({B_JAVA_THREADS} threads) next to {B_FERRISSON_CLIENTS} ferrisson clients × {B_WORKERS} workers, {} ms holds, {} ms pauses, {} s\n",
        b_hold().as_millis(),
        B_PAUSE.as_millis(),
        B_DURATION.as_secs()
    );
    let _ = writeln!(
        out,
        "Java threads' grants against the mean ferrisson worker's (target ≥ 0.5), and their longest \
         wait (target ≤ 1 s). Median of {FAIR_RUNS} runs by that ratio.\n"
    );
    let _ = writeln!(
        out,
        "| ferrisson | Java fewest / ferrisson mean (runs) | Java longest wait ms (runs) | ferrisson longest ms | grants: Java threads; ferrisson workers (median run) |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|");
    let java_ratio = |r: &Run| {
        let j = B_JAVA_THREADS as usize;
        let java_min = r.workers[..j].iter().map(|w| w.grants).min().unwrap_or(0);
        let rest = &r.workers[j..];
        let mean = rest.iter().map(|w| w.grants).sum::<usize>() as f64 / rest.len().max(1) as f64;
        java_min as f64 / mean
    };
    let java_worst = |r: &Run| {
        r.workers[..B_JAVA_THREADS as usize]
            .iter()
            .map(|w| w.worst_ms)
            .fold(0.0, f64::max)
    };
    for e in &f.java {
        let Some(median) = e.median_by(java_ratio) else {
            let _ = writeln!(
                out,
                "| {} | {} | | | |",
                e.name,
                e.runs.as_ref().err().map_or("no run", |s| s.as_str())
            );
            continue;
        };
        let runs = e.runs.as_ref().map(Vec::as_slice).unwrap_or_default();
        let j = B_JAVA_THREADS as usize;
        let _ = writeln!(
            out,
            "| {} | {:.2} ({}) | {:.0} ({}) | {:.0} | {}; {} |",
            e.name,
            java_ratio(median),
            runs.iter()
                .map(|r| format!("{:.2}", java_ratio(r)))
                .collect::<Vec<_>>()
                .join(" / "),
            java_worst(median),
            runs.iter()
                .map(|r| format!("{:.0}", java_worst(r)))
                .collect::<Vec<_>>()
                .join(" / "),
            median.workers[j..]
                .iter()
                .map(|w| w.worst_ms)
                .fold(0.0, f64::max),
            median.workers[..j]
                .iter()
                .map(|w| w.grants.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            median.workers[j..]
                .iter()
                .map(|w| w.grants.to_string())
                .collect::<Vec<_>>()
                .join(", "),
        );
    }
    out
}

impl Fairness {
    /// The libraries whose runs broke mutual exclusion.
    pub fn violated(&self) -> Vec<String> {
        self.many
            .iter()
            .chain(&self.java)
            .filter(|e| e.runs.as_ref().is_err_and(|s| s.contains("VIOLATED")))
            .map(|e| format!("{} (workload 9)", e.name))
            .collect()
    }
}
