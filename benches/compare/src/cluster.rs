//! Workload 8: ferrisson on a local Redis Cluster of 3 masters and 3 replicas (the test
//! harness's own launcher, `tests/support/cluster.rs`, included below as it is) against ferrisson
//! on the harness's one redis-server, in one run and interleaved: workload 1 (sequential cycles of
//! one key, one owner) and workload 4 (64 tasks, a key each, one client; on the cluster the keys
//! fall in slots of all three masters). Counters and CPU on the cluster are summed over its
//! masters (`Masters`); the replicas' CPU is reported on its own. The peers are not in it: none of
//! them takes a Cluster.

#[path = "../../../tests/support/cluster.rs"]
mod local;
// The harness's server module: the cluster launcher's `super::server`, and the one place that
// picks the server binary (`FERRISSON_SERVER`, set by `--server`) for `crate::server` too.
#[path = "../../../tests/support/server.rs"]
pub(crate) mod server;

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow};

use crate::libs::{Ferrisson, FerrissonCluster, Lib};
use crate::server::{CmdStats, commandstats, commandstats_by_name, cpu_ms};
use crate::workloads::{
    ByName, MANY_DURATION, MANY_TASKS, ManyKeys, Meter, SEQ_CAP, SEQ_CYCLES, SEQ_ROUNDS,
    SEQ_WARMUP, Sequential, aggregate, join, many_keys, on_own_thread, sequential_current_thread,
    sequential_run,
};
use crate::{Ctx, Outcome, f0, f1, f2, f3, record, timed};

/// Workload-4 runs per topology, interleaved.
pub const CLUSTER_MANY_ROUNDS: usize = 3;

/// What the workloads need to know of the running cluster: the seeds, its masters (port and
/// pid, by first slot) and its replicas' pids.
#[derive(Clone)]
struct Nodes {
    /// Every node's URL, joined by commas (`FerrissonCluster::connect` takes that).
    seeds: String,
    masters: Vec<(u16, u32)>,
    replicas: Vec<u32>,
}

impl Nodes {
    /// A meter over the masters, connected on the calling runtime.
    async fn meter(&self) -> Result<Masters> {
        let mut conns = Vec::new();
        for &(port, _) in &self.masters {
            let client = redis::Client::open(format!("redis://127.0.0.1:{port}/"))?;
            conns.push(client.get_multiplexed_async_connection().await?);
        }
        Ok(Masters {
            conns,
            pids: self.masters.iter().map(|&(_, pid)| pid).collect(),
            replicas: self.replicas.clone(),
        })
    }
}

/// A `Meter` over a cluster's masters: INFO summed over them, their CPU summed, the replicas'
/// CPU apart.
#[derive(Clone)]
pub struct Masters {
    conns: Vec<redis::aio::MultiplexedConnection>,
    pids: Vec<u32>,
    replicas: Vec<u32>,
}

fn cpu_of(pids: &[u32]) -> f64 {
    pids.iter().map(|p| cpu_ms(&p.to_string())).sum()
}

impl Masters {
    /// Script calls (EVALSHA+EVAL+FCALL) and CPU ms of each master, now.
    async fn per_master(&mut self) -> Result<Vec<(u64, f64)>> {
        let mut out = Vec::new();
        for (conn, pid) in self.conns.iter_mut().zip(&self.pids) {
            out.push((commandstats(conn).await?.scripts, cpu_ms(&pid.to_string())));
        }
        Ok(out)
    }

    async fn flush(&mut self) {
        for conn in &mut self.conns {
            let _: redis::RedisResult<()> = redis::cmd("FLUSHALL").query_async(conn).await;
        }
    }
}

impl Meter for Masters {
    async fn stats(&mut self) -> Result<CmdStats> {
        let mut sum = CmdStats::default();
        for conn in &mut self.conns {
            let s = commandstats(conn).await?;
            sum.total += s.total;
            sum.scripts += s.scripts;
            sum.script_usec += s.script_usec;
            sum.reads += s.reads;
        }
        Ok(sum)
    }
    async fn stats_by_name(&mut self) -> Result<ByName> {
        let mut sum = ByName::new();
        for conn in &mut self.conns {
            for (name, (calls, usec)) in commandstats_by_name(conn).await? {
                let e = sum.entry(name).or_insert((0, 0));
                e.0 += calls;
                e.1 += usec;
            }
        }
        Ok(sum)
    }
    fn cpu(&self) -> (f64, f64, f64) {
        (cpu_ms("self"), cpu_of(&self.pids), cpu_of(&self.replicas))
    }
    fn own_reads(&self) -> u64 {
        self.conns.len() as u64
    }
}

/// Workload 4's runs of one topology: the median run (by cycles/s) and the range.
pub struct ManyRuns {
    pub median: ManyKeys,
    pub range: (f64, f64),
    /// On the cluster, per master (by first slot), over the median run's whole call (connect
    /// and warm-up included): share of the script calls, and CPU in % of one core.
    pub per_master: Vec<(f64, f64)>,
}

/// One topology's rows.
pub struct Topology {
    pub seq: Outcome<Sequential>,
    pub many: Outcome<ManyRuns>,
}

impl Topology {
    pub fn violated(&self) -> bool {
        self.seq.violated() || self.many.violated()
    }
}

pub struct ClusterResults {
    pub one: Topology,
    pub cluster: Topology,
    /// How many of the 64 keys of workload 4 each master serves (by first slot).
    pub keys_per_master: Vec<usize>,
    /// How long the cluster took to come up.
    pub startup: Duration,
}

async fn describe(c: &local::RedisCluster) -> Result<(Nodes, Vec<usize>)> {
    let shards = c.shards().await;
    let mut masters = Vec::new();
    let mut replicas = Vec::new();
    for shard in &shards {
        masters.push((shard.master, pid_of(shard.master).await?));
        for &r in &shard.replicas {
            replicas.push(pid_of(r).await?);
        }
    }
    let mut keys = vec![0; shards.len()];
    for i in 0..MANY_TASKS {
        let slot = c.slot_of(&format!("bench_many_{i}")).await;
        let at = shards
            .iter()
            .position(|s| s.has_slot(slot))
            .ok_or_else(|| anyhow!("no master serves slot {slot}"))?;
        keys[at] += 1;
    }
    let nodes = Nodes {
        seeds: c.seed_urls().join(","),
        masters,
        replicas,
    };
    Ok((nodes, keys))
}

/// `process_id` from a node's INFO server.
async fn pid_of(port: u16) -> Result<u32> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/"))?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut conn)
        .await?;
    info.lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .and_then(|p| p.trim().parse().ok())
        .ok_or_else(|| anyhow!("no process_id in INFO server of node {port}"))
}

/// Workload 1 on the cluster: a fresh client on a fresh current-thread runtime, as on one server.
async fn seq_cluster(nodes: Nodes, cycles: usize) -> Result<crate::workloads::SeqRun> {
    on_own_thread(move || async move {
        let lib = Arc::new(FerrissonCluster::connect(&nodes.seeds).await?);
        let meter = nodes.meter().await?;
        sequential_run(lib, meter, cycles).await
    })
    .await
}

/// Workload 4 on the cluster, with each master's share of the script calls and its CPU.
async fn many_cluster(nodes: &Nodes) -> Result<ManyRun> {
    let mut meter = nodes.meter().await?;
    meter.flush().await;
    let lib = Arc::new(FerrissonCluster::connect(&nodes.seeds).await?);
    let before = meter.per_master().await?;
    let t = Instant::now();
    let m = many_keys(lib, meter.clone()).await?;
    let wall_ms = t.elapsed().as_secs_f64() * 1000.0;
    let after = meter.per_master().await?;
    let scripts: u64 = after.iter().zip(&before).map(|(a, b)| a.0 - b.0).sum();
    let per_master = after
        .iter()
        .zip(&before)
        .map(|(a, b)| {
            (
                (a.0 - b.0) as f64 / scripts.max(1) as f64 * 100.0,
                (a.1 - b.1) / wall_ms * 100.0,
            )
        })
        .collect();
    Ok((m, per_master))
}

/// One workload-4 run and, on the cluster, each master's share of the script calls and CPU %.
type ManyRun = (ManyKeys, Vec<(f64, f64)>);

fn many_runs(runs: std::result::Result<Vec<ManyRun>, String>) -> Outcome<ManyRuns> {
    match runs {
        Err(err) => Outcome::Failed(err),
        Ok(runs) if runs.is_empty() => Outcome::Na("not run".into()),
        Ok(mut runs) => {
            runs.sort_by(|a, b| a.0.cycles_per_s.total_cmp(&b.0.cycles_per_s));
            let range = (runs[0].0.cycles_per_s, runs[runs.len() - 1].0.cycles_per_s);
            let n = runs.len();
            let (median, per_master) = runs.swap_remove(n / 2);
            Outcome::Ok(ManyRuns {
                median,
                range,
                per_master,
            })
        }
    }
}

fn seq_outcome(
    runs: std::result::Result<Vec<crate::workloads::SeqRun>, String>,
) -> Outcome<Sequential> {
    match runs {
        Err(err) => Outcome::Failed(err),
        Ok(runs) if runs.is_empty() => Outcome::Na("not run".into()),
        Ok(runs) => Outcome::Ok(aggregate(&runs)),
    }
}

/// Starts the cluster (a panic of the launcher becomes an error), then runs workloads 1 and 4 on
/// one server and on the cluster, interleaved; the cluster is gone when this returns.
pub async fn phase(ctx: &mut Ctx) -> ClusterResults {
    let t = Instant::now();
    eprintln!("cluster: starting 3 masters + 3 replicas");
    let started = async {
        let cluster = join(tokio::spawn(async {
            Ok::<_, anyhow::Error>(local::RedisCluster::start().await)
        }))
        .await?;
        let (nodes, keys) = describe(&cluster).await?;
        Ok::<_, anyhow::Error>((cluster, nodes, keys))
    };
    let started = timed(Duration::from_secs(120), started)
        .await
        .map_err(|err| {
            format!("cluster: {err:#}")
                .replace('\n', " ")
                .replace('|', "/")
        });
    let startup = t.elapsed();
    eprintln!("cluster: up in {:.1} s", startup.as_secs_f64());
    let url = ctx.server.url();
    let cycles = SEQ_CYCLES / SEQ_ROUNDS;
    let seq_cap = SEQ_CAP + Duration::from_secs(30);
    let many_cap = MANY_DURATION + Duration::from_secs(45);
    let mut one_seq = Ok(Vec::new());
    let mut cl_seq = match &started {
        Ok(_) => Ok(Vec::new()),
        Err(err) => Err(err.clone()),
    };
    let mut one_many = Ok(Vec::new());
    let mut cl_many = cl_seq.as_ref().map(|_| Vec::new()).map_err(Clone::clone);
    for round in 0..SEQ_ROUNDS {
        eprintln!("cluster: sequential round {}/{SEQ_ROUNDS}", round + 1);
        // Alternate which topology goes first.
        for cluster_turn in [round % 2 == 1, round % 2 == 0] {
            if cluster_turn {
                if let (Ok((_, nodes, _)), Ok(_)) = (&started, &cl_seq) {
                    let r = timed(seq_cap, async {
                        nodes.meter().await?.flush().await;
                        seq_cluster(nodes.clone(), cycles).await
                    })
                    .await;
                    record(&mut cl_seq, r);
                }
            } else if one_seq.is_ok() {
                let r = ctx
                    .run_one(
                        false,
                        seq_cap,
                        sequential_current_thread::<Ferrisson>(url.clone(), cycles),
                    )
                    .await;
                record(&mut one_seq, r);
            }
        }
    }
    for round in 0..CLUSTER_MANY_ROUNDS {
        eprintln!(
            "cluster: many keys round {}/{CLUSTER_MANY_ROUNDS}",
            round + 1
        );
        for cluster_turn in [round % 2 == 1, round % 2 == 0] {
            if cluster_turn {
                if let (Ok((_, nodes, _)), Ok(_)) = (&started, &cl_many) {
                    let r = timed(many_cap, many_cluster(nodes)).await;
                    record(&mut cl_many, r);
                }
            } else if one_many.is_ok() {
                let admin = ctx.admin.clone();
                let url = url.clone();
                let r = ctx
                    .run_one(false, many_cap, async move {
                        let lib = Arc::new(Ferrisson::connect(&url).await?);
                        let m = many_keys(lib, admin).await?;
                        Ok((m, Vec::new()))
                    })
                    .await;
                record(&mut one_many, r);
            }
        }
    }
    let _ = ctx.flush().await;
    let keys_per_master = match &started {
        Ok((_, _, keys)) => keys.clone(),
        Err(_) => Vec::new(),
    };
    drop(started);
    eprintln!("cluster: done ({:.1} s)", t.elapsed().as_secs_f64());
    ClusterResults {
        one: Topology {
            seq: seq_outcome(one_seq),
            many: many_runs(one_many),
        },
        cluster: Topology {
            seq: seq_outcome(cl_seq),
            many: many_runs(cl_many),
        },
        keys_per_master,
        startup,
    }
}

fn vs(a: f64, b: Option<f64>) -> String {
    crate::ratio(a, b)
}

/// Section 8 of BENCHMARKS.md.
pub fn render(c: &ClusterResults) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "\n### 8. Cluster: workloads 1 and 4 on a 3-master + 3-replica Redis Cluster and on one server (ferrisson only)\n"
    );
    let _ = writeln!(
        t,
        "The harness starts a local Redis Cluster of 3 masters and 3 replicas (the test suite's launcher, \
         `tests/support/cluster.rs`: `redis-cli --cluster create … --cluster-replicas 1`, no persistence, \
         node timeout 1 s; up in {:.1} s in this run) on the same machine as the one redis-server above, and \
         runs ferrisson's workload 1 and workload 4 on both in the same run, interleaved (the topology that \
         goes first alternates by round): workload 1 in {SEQ_ROUNDS} runs of {} cycles after {SEQ_WARMUP} \
         warm-up each per topology, each on a fresh client on its own current-thread runtime; workload 4 in \
         {CLUSTER_MANY_ROUNDS} runs of {} s per topology, each on a fresh client on the shared 2-worker runtime. \
         On the cluster the client is built with `Client::builder().cluster(seeds)` and every counter (INFO \
         stats and commandstats) and the Redis CPU time are summed over the three masters; the three \
         replicas' CPU (applying the replication stream) is in its own column. Only ferrisson: none of the \
         peer crates connects to a Redis Cluster.\n",
        c.startup.as_secs_f64(),
        SEQ_CYCLES / SEQ_ROUNDS,
        MANY_DURATION.as_secs(),
    );
    let _ = writeln!(
        t,
        "Workload 1 (sequential lock+unlock, one key `bench_seq`, one owner): cycles/s is the median run \
         (range: slowest..fastest), p50/p99 over every cycle; per cycle: round trips (socket reads of the \
         masters), script calls, µs Redis spent in them, every command Redis ran, and CPU µs of this process, \
         of the masters (one server: of redis-server) and of the replicas.\n"
    );
    let one_seq = c.one.seq.ok().map(|s| s.ops_per_s);
    let _ = writeln!(
        t,
        "| topology | cycles/s | range | p50 ms | p99 ms | round trips | scripts | script exec µs | all cmds | client µs | redis µs (masters) | replicas µs | vs one server |"
    );
    let _ = writeln!(
        t,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for (name, topo) in [("one server", &c.one), ("cluster, 3 masters", &c.cluster)] {
        match (&topo.seq, topo.seq.cell()) {
            (Outcome::Ok(s), _) => {
                let _ = writeln!(
                    t,
                    "| {name} | {} | {}..{} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
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
                    f0(s.replica_us_per_cycle),
                    vs(s.ops_per_s, one_seq),
                );
            }
            (_, Some(cell)) => {
                let _ = writeln!(t, "| {name} | {cell} | | | | | | | | | | | |");
            }
            _ => {}
        }
    }
    let spread = if c.keys_per_master.is_empty() {
        String::new()
    } else {
        format!(
            " On the cluster the {MANY_TASKS} keys `bench_many_0` … `bench_many_{}` fall on the masters (by \
             first slot) {}.",
            MANY_TASKS - 1,
            c.keys_per_master
                .iter()
                .map(|k| k.to_string())
                .collect::<Vec<_>>()
                .join(" / ")
        )
    };
    let _ = writeln!(
        t,
        "\nWorkload 4 ({MANY_TASKS} tasks on one client, each cycling its own key for {} s).{spread} cycles/s \
         is the median run (range: slowest..fastest); p50/p99 over every cycle of that run (lock call to unlock \
         return, so they include queueing behind the other tasks); socket reads/cycle: reads Redis made per cycle \
         (summed over the masters; the 64 tasks share the client's connection to a server, so one read often \
         brings several tasks' requests, and fewer reads per cycle means bigger batches); CPU in % of one core over the run and µs \
         per cycle; script exec: µs Redis spent in scripts per cycle (% of the wall time, summed over the \
         masters: above 100 % no single Redis thread could have done it).\n",
        MANY_DURATION.as_secs()
    );
    let one_many = c.one.many.ok().map(|m| m.median.cycles_per_s);
    let _ = writeln!(
        t,
        "| topology | cycles/s | range | p50 ms | p99 ms | per task min..max | socket reads/cycle | client CPU % | redis CPU % (masters) | client µs/cycle | redis µs/cycle | replicas µs/cycle | script exec µs/cycle (% of wall) | vs one server |"
    );
    let _ = writeln!(
        t,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for (name, topo) in [("one server", &c.one), ("cluster, 3 masters", &c.cluster)] {
        match (&topo.many, topo.many.cell()) {
            (Outcome::Ok(r), _) => {
                let m = &r.median;
                let _ = writeln!(
                    t,
                    "| {name} | {} | {}..{} | {} | {} | {}..{} | {} | {} | {} | {} | {} | {} | {} ({:.0} %) | {} |",
                    f0(m.cycles_per_s),
                    f0(r.range.0),
                    f0(r.range.1),
                    f3(m.p50_ms),
                    f3(m.p99_ms),
                    m.per_task_min,
                    m.per_task_max,
                    f2(m.reads_per_cycle),
                    f0(m.client_cpu_pct),
                    f0(m.server_cpu_pct),
                    f0(m.client_us_per_cycle),
                    f0(m.server_us_per_cycle),
                    f0(m.replica_us_per_cycle),
                    f1(m.script_exec_us_per_cycle),
                    m.script_exec_pct,
                    vs(m.cycles_per_s, one_many),
                );
            }
            (_, Some(cell)) => {
                let _ = writeln!(t, "| {name} | {cell} | | | | | | | | | | | | |");
            }
            _ => {}
        }
    }
    if let Some(r) = c.cluster.many.ok().filter(|r| !r.per_master.is_empty()) {
        let _ = writeln!(
            t,
            "\nPer master (by first slot), over the cluster's median run of workload 4 (its whole call: client \
             connect and warm-up included): share of the script calls {}; CPU, % of one core, {}.",
            r.per_master
                .iter()
                .map(|(s, _)| format!("{s:.0} %"))
                .collect::<Vec<_>>()
                .join(" / "),
            r.per_master
                .iter()
                .map(|(_, cpu)| format!("{cpu:.0} %"))
                .collect::<Vec<_>>()
                .join(" / "),
        );
    }
    let _ = writeln!(
        t,
        "\nAll of it shares the machine's CPUs: the client, the one server, the six cluster nodes (three of \
         them replicas) and anything else running. Cluster runs count every master's background work too \
         (cluster bus, replication pings) in its CPU."
    );
    t
}
