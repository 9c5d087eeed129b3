//! One server on a free loopback port, killed when dropped; plus the small admin helpers the
//! harness needs (INFO commandstats, CPU time of a process, redis-benchmark). The server binary
//! is the test harness's choice (`tests/support/server.rs`): `--server PATH` or
//! `FERRISSON_SERVER`, else `redis-server` from `PATH`.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::cluster::server as harness;

pub struct RedisServer {
    child: Child,
    pub port: u16,
}

impl RedisServer {
    pub fn start() -> Result<RedisServer> {
        let binary = harness::server_binary();
        harness::ensure_redis_server();
        let mut last = String::new();
        for _ in 0..5 {
            let port = harness::pick_port(false);
            // COMPARE_REDIS_CPU=<n> runs the server on CPU n only (taskset), so that with the
            // harness pinned elsewhere it has a core of its own, as on a production host.
            let mut command = match std::env::var("COMPARE_REDIS_CPU") {
                Ok(cpu) if !cpu.trim().is_empty() => {
                    let mut c = Command::new("taskset");
                    c.args(["-c", cpu.trim()]).arg(&binary);
                    c
                }
                _ => Command::new(&binary),
            };
            let child = command
                .args(["--port", &port.to_string()])
                .args(["--bind", "127.0.0.1"])
                .args(["--save", ""])
                .args(["--appendonly", "no"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .with_context(|| format!("spawning {} (is it installed?)", binary.display()))?;
            let mut server = RedisServer { child, port };
            // taskset execs the server: the pid is the server's.
            let pid = server.child.id();
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                match harness::answer_on(port, pid) {
                    harness::Answer::Ours => return Ok(server),
                    harness::Answer::Other(theirs) => {
                        last = format!("process {theirs} answers on port {port}");
                        break;
                    }
                    harness::Answer::Nothing => {}
                }
                if let Ok(Some(status)) = server.child.try_wait() {
                    last = format!("the server on port {port} exited ({status})");
                    break;
                }
                if Instant::now() > deadline {
                    bail!(
                        "{} on port {port} did not answer PING within 10 s",
                        binary.display()
                    );
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            drop(server);
            harness::release_port(port);
        }
        bail!(
            "{} did not start on any of 5 ports: {last}",
            binary.display()
        )
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sum of `calls=` over every `cmdstat_*` line except INFO itself (commands run inside scripts
/// count too), EVALSHA+EVAL+FCALL calls, and the server's socket reads (`total_reads_processed`:
/// with one request in flight per connection, one read is one request).
#[derive(Clone, Copy, Debug, Default)]
pub struct CmdStats {
    pub total: u64,
    pub scripts: u64,
    /// Microseconds Redis spent executing scripts (EVALSHA+EVAL+FCALL, their inner commands included).
    pub script_usec: u64,
    pub reads: u64,
}

static SERVER_PID: std::sync::OnceLock<u32> = std::sync::OnceLock::new();

pub fn set_server_pid(pid: u32) {
    let _ = SERVER_PID.set(pid);
}

/// CPU time (ms) of this process and of redis-server, now.
pub fn cpu_now() -> (f64, f64) {
    (
        cpu_ms("self"),
        SERVER_PID
            .get()
            .map_or(f64::NAN, |p| cpu_ms(&p.to_string())),
    )
}

pub async fn commandstats(conn: &mut redis::aio::MultiplexedConnection) -> Result<CmdStats> {
    // `all` (stats and commandstats among the rest): INFO takes more than one section only from
    // Redis 7.0, and 6.2 answers a syntax error.
    let info: String = redis::cmd("INFO").arg("all").query_async(conn).await?;
    let mut s = CmdStats::default();
    for line in info.lines() {
        if let Some(r) = line.strip_prefix("total_reads_processed:") {
            s.reads = r.trim().parse().unwrap_or(0);
        }
        let Some((name, rest)) = line
            .strip_prefix("cmdstat_")
            .and_then(|l| l.split_once(':'))
        else {
            continue;
        };
        let calls: u64 = rest
            .strip_prefix("calls=")
            .and_then(|r| r.split(',').next())
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        if name == "info" {
            continue;
        }
        s.total += calls;
        if name == "evalsha" || name == "eval" || name == "fcall" {
            s.scripts += calls;
            s.script_usec += rest
                .split(',')
                .find_map(|f| f.strip_prefix("usec="))
                .and_then(|u| u.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    Ok(s)
}

/// Every command's `calls` and `usec` from INFO commandstats (commands run inside scripts
/// included), by name; for the per-command breakdown that `COMPARE_CMDSTATS=1` prints.
pub async fn commandstats_by_name(
    conn: &mut redis::aio::MultiplexedConnection,
) -> Result<std::collections::BTreeMap<String, (u64, u64)>> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await?;
    let mut m = std::collections::BTreeMap::new();
    for line in info.lines() {
        let Some((name, rest)) = line
            .strip_prefix("cmdstat_")
            .and_then(|l| l.split_once(':'))
        else {
            continue;
        };
        let field = |f: &str| {
            rest.split(',')
                .find_map(|x| x.strip_prefix(f))
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        m.insert(name.to_owned(), (field("calls="), field("usec=")));
    }
    Ok(m)
}

fn clk_tck() -> f64 {
    static TCK: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TCK.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// utime+stime of a process (`self` or a pid) in milliseconds, from /proc/PID/stat.
pub fn cpu_ms(pid: &str) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return f64::NAN;
    };
    // Fields after the ")" that closes the command name: state is field 3, utime 14, stime 15.
    let Some(after) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
        return f64::NAN;
    };
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = f[11].parse::<f64>().unwrap_or(f64::NAN) + f[12].parse::<f64>().unwrap_or(f64::NAN);
    ticks * 1000.0 / clk_tck()
}

/// The `redis-benchmark` (or `valkey-benchmark`) beside a server chosen with `--server` /
/// `FERRISSON_SERVER`, else `redis-benchmark` from `PATH` (any version measures EVALSHA on any
/// of the servers).
pub fn benchmark_binary() -> PathBuf {
    if harness::server_chosen() {
        let server = harness::server_binary();
        if let Some(dir) = server.parent() {
            for name in ["valkey-benchmark", "redis-benchmark"] {
                if dir.join(name).is_file() {
                    return dir.join(name);
                }
            }
        }
    }
    PathBuf::from("redis-benchmark")
}

/// Runs redis-benchmark against the server and returns (requests/s, p50 ms).
pub fn redis_benchmark(
    port: u16,
    clients: u32,
    requests: u32,
    args: &[&str],
) -> Result<(f64, f64)> {
    let out = Command::new(benchmark_binary())
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args([
            "-c",
            &clients.to_string(),
            "-n",
            &requests.to_string(),
            "--csv",
        ])
        .args(args)
        .output()
        .with_context(|| format!("running {}", benchmark_binary().display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    // --csv: a header line, then "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms",...
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header: Vec<String> = lines
        .next()
        .context("redis-benchmark printed nothing")?
        .split(',')
        .map(|s| s.trim_matches('"').to_owned())
        .collect();
    let row: Vec<String> = lines
        .next()
        .with_context(|| format!("no result row in redis-benchmark output: {text}"))?
        .split("\",\"")
        .map(|s| s.trim_matches('"').to_owned())
        .collect();
    let col = |name: &str| -> Result<f64> {
        let i = header
            .iter()
            .position(|h| h == name)
            .with_context(|| format!("no {name} column in {header:?}"))?;
        row.get(i)
            .and_then(|v| v.parse().ok())
            .with_context(|| format!("bad {name} in {row:?}"))
    };
    Ok((col("rps")?, col("p50_latency_ms").unwrap_or(f64::NAN)))
}
