//! A real Sentinel setup for tests: 1 master and 2 replicas watched by 3 sentinels, each a
//! server process of the test's own ([`super::server::server_binary`]: `redis-server`, or the
//! one `FERRISSON_SERVER` picks) on a free loopback port (sentinels run as
//! `<server> <conf> --sentinel`, each with its own writable conf). Every process is killed,
//! and the temporary directory removed, on drop.
//!
//! The data nodes run with `min-replicas-to-write 1`: a master without a linked replica refuses
//! writes (`NOREPLICAS`). Without it, a master demoted by `SENTINEL FAILOVER` keeps accepting
//! writes until the sentinels reconfigure it, seconds later (about 9 s measured here with
//! failover-timeout 3000), so a test would see two writable masters. The price: after two
//! kills without a restart, the last master has no replica and refuses writes.

#![allow(dead_code, unreachable_pub)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use redis::Value;

use super::cluster::{Proc, Role, calls_on, connect, query, role_of, topology_dir, url};

/// The name the sentinels monitor the master under.
pub const MASTER_NAME: &str = "mymaster";

/// `down-after-milliseconds`: how long the master may not answer before a sentinel counts it
/// as down.
pub const DOWN_AFTER_MS: u64 = 1000;

/// `failover-timeout`: how long a failover may take, and (twice this) how long a sentinel waits
/// before it tries again after a failed one.
pub const FAILOVER_TIMEOUT_MS: u64 = 3000;

const SETTLE_WITHIN: Duration = Duration::from_secs(40);

/// 1 master, 2 replicas and 3 sentinels, started by [`RedisSentinels::start`].
pub struct RedisSentinels {
    data: Vec<Proc>,
    sentinels: Vec<Proc>,
    dir: PathBuf,
    killed_at: HashMap<u16, Instant>,
}

impl std::fmt::Debug for RedisSentinels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisSentinels")
            .field("data", &self.data_ports())
            .field("sentinels", &self.sentinel_ports())
            .field("dir", &self.dir)
            .finish()
    }
}

impl RedisSentinels {
    /// Starts the master, its 2 replicas (`--replicaof`) and 3 sentinels (quorum 2), and waits
    /// until every sentinel names the master and knows both replicas and the 2 other sentinels,
    /// and both replicas are linked. Panics, naming what did not come up and with the tail of
    /// its log, when that takes over 40 s.
    pub async fn start() -> RedisSentinels {
        super::server::ensure_redis_server();
        let dir = topology_dir("sentinel");
        let master = Proc::start(&dir, "the sentinel setup's master", false, |port, dir| {
            data_args(port, dir, None)
        })
        .await;
        let master_port = master.port;
        let mut data = vec![master];
        for _ in 0..2 {
            data.push(
                Proc::start(&dir, "a replica", false, |port, dir| {
                    data_args(port, dir, Some(master_port))
                })
                .await,
            );
        }
        let mut sentinels = Vec::new();
        for _ in 0..3 {
            sentinels.push(
                Proc::start(&dir, "a sentinel", false, |port, dir| {
                    sentinel_args(port, dir, master_port)
                })
                .await,
            );
        }
        let setup = RedisSentinels {
            data,
            sentinels,
            dir,
            killed_at: HashMap::new(),
        };
        setup
            .wait_settled(master_port, "the new sentinel setup")
            .await;
        setup
    }

    /// `redis://127.0.0.1:<port>/` of each sentinel.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinel_ports().into_iter().map(url).collect()
    }

    pub fn sentinel_ports(&self) -> Vec<u16> {
        self.sentinels.iter().map(|s| s.port).collect()
    }

    /// The ports of the 3 data nodes, running or not, the first master first.
    pub fn data_ports(&self) -> Vec<u16> {
        self.data.iter().map(|d| d.port).collect()
    }

    fn running_data(&self) -> Vec<u16> {
        self.data
            .iter()
            .filter(|d| d.running())
            .map(|d| d.port)
            .collect()
    }

    /// The name the sentinels know the master by.
    pub fn master_name(&self) -> &'static str {
        MASTER_NAME
    }

    /// The temporary directory (a directory per process under it).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn proc(&self, port: u16) -> &Proc {
        self.data
            .iter()
            .chain(&self.sentinels)
            .find(|p| p.port == port)
            .unwrap_or_else(|| panic!("no process of the sentinel setup on port {port}"))
    }

    fn data_mut(&mut self, port: u16) -> &mut Proc {
        self.data
            .iter_mut()
            .find(|p| p.port == port)
            .unwrap_or_else(|| panic!("no data node on port {port}"))
    }

    /// A data node's or a sentinel's log so far.
    pub fn log(&self, port: u16) -> String {
        self.proc(port).log()
    }

    /// The master's port as the first sentinel that answers names it
    /// (`SENTINEL GET-MASTER-ADDR-BY-NAME`).
    pub async fn master_port(&self) -> u16 {
        let mut why = String::new();
        for sentinel in self.sentinel_ports() {
            match master_by(sentinel).await {
                Ok(port) => return port,
                Err(e) => why = e,
            }
        }
        panic!("no sentinel names the master: {why}");
    }

    /// A raw connection to the master the sentinels name now.
    pub async fn raw_master(&self) -> redis::aio::MultiplexedConnection {
        let port = self.master_port().await;
        self.raw_node(port).await
    }

    /// A raw connection to one data node or sentinel.
    pub async fn raw_node(&self, port: u16) -> redis::aio::MultiplexedConnection {
        connect(port)
            .await
            .unwrap_or_else(|e| panic!("raw connection to {port}: {e}"))
    }

    /// Every running data node's role, asked with `ROLE`.
    pub async fn roles(&self) -> Vec<(u16, Role)> {
        let mut roles = Vec::new();
        for port in self.running_data() {
            if let Ok(role) = role_of(port).await {
                roles.push((port, role));
            }
        }
        roles
    }

    /// Freezes (SIGSTOP) every replica of the master now; returns them for
    /// [`resume_all`](Self::resume_all).
    pub async fn pause_replicas(&self) -> Vec<u16> {
        let master = self.master_port().await;
        let replicas: Vec<u16> = self
            .data_ports()
            .into_iter()
            .filter(|p| *p != master)
            .collect();
        for port in &replicas {
            self.pause(*port);
        }
        replicas
    }

    /// Freezes every replica and makes the master drop their links and take writes without
    /// them (see [`drop_replica_links`](super::cluster::drop_replica_links)): they miss what it
    /// writes from now on. Returns them for [`resume_all`](Self::resume_all).
    pub async fn cut_off_replicas(&self) -> Vec<u16> {
        let replicas = self.pause_replicas().await;
        super::cluster::drop_replica_links(&mut self.raw_master().await).await;
        replicas
    }

    /// Thaws every one of `ports`.
    pub fn resume_all(&self, ports: &[u16]) {
        for port in ports {
            self.resume(*port);
        }
    }

    /// SIGKILLs the master the sentinels name; returns its port.
    pub async fn kill_master(&mut self) -> u16 {
        let port = self.master_port().await;
        self.data_mut(port).kill();
        self.killed_at.insert(port, Instant::now());
        port
    }

    /// SIGKILLs one data node.
    pub fn kill_node(&mut self, port: u16) {
        self.data_mut(port).kill();
        self.killed_at.insert(port, Instant::now());
    }

    /// Freezes a data node or a sentinel (SIGSTOP).
    pub fn pause(&self, port: u16) {
        self.proc(port).signal("-STOP");
    }

    /// Thaws a paused process (SIGCONT).
    pub fn resume(&self, port: u16) {
        self.proc(port).signal("-CONT");
    }

    /// After the master `old` was killed ([`kill_master`](Self::kill_master)): waits until
    /// every sentinel names one new master and that node says it is master, and returns it with
    /// the time that took since the kill. Before returning it also waits until the setup has
    /// settled around the new master (the other running replica linked to it, so that it takes
    /// writes; every sentinel seeing it up); that wait is not in the time returned.
    pub async fn wait_new_master(&self, old: u16) -> (u16, Duration) {
        let since = *self
            .killed_at
            .get(&old)
            .unwrap_or_else(|| panic!("{old} was not killed by this harness"));
        self.wait_switch(old, since).await
    }

    /// Waits until the sentinels name a master other than `old` and the setup has settled
    /// around it. On a loaded machine the sentinels sometimes fail over a second time (the
    /// first promoted replica did not answer in time): the setup is then awaited around the
    /// master they name in the end. The time returned is until the first new master was named.
    async fn wait_switch(&self, old: u16, since: Instant) -> (u16, Duration) {
        let deadline = Instant::now() + SETTLE_WITHIN;
        let mut took = None;
        loop {
            let last = match self.named_master().await {
                Ok(new) if new != old => match role_of(new).await {
                    Ok(Role::Master) => {
                        let took = *took.get_or_insert_with(|| since.elapsed());
                        match self.settled(new, &[]).await {
                            Ok(()) => return (new, took),
                            Err((_, why)) => format!("around new master {new}: {why}"),
                        }
                    }
                    Ok(role) => format!("the sentinels name {new}, which reports {role:?}"),
                    Err(e) => e,
                },
                Ok(_) => format!("the sentinels still name {old}"),
                Err(e) => e,
            };
            if Instant::now() >= deadline {
                panic!(
                    "the sentinels named no new master instead of {old} within \
                     {SETTLE_WITHIN:?}: {last}\n{}",
                    self.sentinel_logs(30)
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// `SENTINEL FAILOVER mymaster`: waits as [`wait_new_master`](Self::wait_new_master) does
    /// and returns the new master and the time since the command. With `min-replicas-to-write
    /// 1` the old master refuses writes as soon as its replicas have left it; it turns into a
    /// replica of the new master only later (when the sentinels reconfigure it, after about
    /// failover-timeout), which this does not wait for: [`wait_settled`](Self::wait_settled)
    /// with the new master does.
    pub async fn failover_manual(&self) -> (u16, Duration) {
        let old = self.master_port().await;
        let started = Instant::now();
        let sentinel = self.sentinels[0].port;
        let _: () = query(
            sentinel,
            redis::cmd("SENTINEL").arg("FAILOVER").arg(MASTER_NAME),
        )
        .await
        .unwrap_or_else(|e| panic!("SENTINEL FAILOVER on {sentinel}: {e}"));
        let deadline = Instant::now() + SETTLE_WITHIN;
        loop {
            let last = match self.named_master().await {
                Ok(new) if new != old => match role_of(new).await {
                    Ok(Role::Master) => {
                        let took = started.elapsed();
                        self.wait_around(new, &[old], "the manual failover").await;
                        return (new, took);
                    }
                    Ok(role) => format!("the sentinels name {new}, which reports {role:?}"),
                    Err(e) => e,
                },
                Ok(_) => format!("the sentinels still name {old}"),
                Err(e) => e,
            };
            if Instant::now() >= deadline {
                panic!(
                    "SENTINEL FAILOVER: no new master within {SETTLE_WITHIN:?}: {last}\n{}",
                    self.sentinel_logs(30)
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Starts a data node again on its port, as a replica of the master the sentinels name now
    /// (killing it first when it runs), and waits until the setup has settled with it.
    pub async fn restart_node(&mut self, port: u16) {
        let master = self.master_port().await;
        assert_ne!(master, port, "restart_node: {port} is the master");
        let node = self.data_mut(port);
        node.kill();
        // Started as a replica: a master restarted without --replicaof would boot as a second
        // master.
        let args = data_args(port, &node.dir, Some(master));
        node.set_args(args);
        if let Err(why) = node.spawn().await {
            panic!("data node {port} did not start again: {why}");
        }
        self.killed_at.remove(&port);
        self.wait_settled(master, &format!("node {port} rejoining"))
            .await;
    }

    /// Waits until the setup has settled around `master`: every sentinel names it, sees it up
    /// and knows the 2 other sentinels; every running data node but it is its linked replica,
    /// and every sentinel sees those replicas up.
    pub async fn wait_settled(&self, master: u16, what: &str) {
        self.wait_around(master, &[], what).await;
    }

    /// As [`wait_settled`](Self::wait_settled), leaving the data nodes in `except` out.
    async fn wait_around(&self, master: u16, except: &[u16], what: &str) {
        let deadline = Instant::now() + SETTLE_WITHIN;
        loop {
            let last = match self.settled(master, except).await {
                Ok(()) => return,
                Err(last) => last,
            };
            if Instant::now() >= deadline {
                let log = match last.0 {
                    Some(port) => format!("--- {port} log:\n{}", self.proc(port).log_tail(30)),
                    None => self.sentinel_logs(15),
                };
                panic!(
                    "{what}: the sentinel setup did not settle within {SETTLE_WITHIN:?}: {}\n{log}",
                    last.1
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn settled(&self, master: u16, except: &[u16]) -> Result<(), (Option<u16>, String)> {
        let replicas: Vec<u16> = self
            .running_data()
            .into_iter()
            .filter(|p| *p != master && !except.contains(p))
            .collect();
        match role_of(master).await.map_err(|e| (Some(master), e))? {
            Role::Master => {}
            role => return Err((Some(master), format!("{master} reports {role:?}"))),
        }
        for &replica in &replicas {
            match role_of(replica).await.map_err(|e| (Some(replica), e))? {
                Role::Replica {
                    master: m,
                    linked: true,
                } if m == master => {}
                role => {
                    return Err((
                        Some(replica),
                        format!("replica {replica} of {master} reports {role:?}"),
                    ));
                }
            }
        }
        for sentinel in self.sentinel_ports() {
            let at = |e| (Some(sentinel), e);
            let named = master_by(sentinel).await.map_err(at)?;
            if named != master {
                return Err((
                    Some(sentinel),
                    format!("sentinel {sentinel} names {named}, not {master}"),
                ));
            }
            let state = fields(
                query(
                    sentinel,
                    redis::cmd("SENTINEL").arg("MASTER").arg(MASTER_NAME),
                )
                .await
                .map_err(at)?,
            );
            let field = |name: &str| state.get(name).cloned().unwrap_or_default();
            if field("flags") != "master" || field("num-other-sentinels") != "2" {
                return Err((
                    Some(sentinel),
                    format!(
                        "sentinel {sentinel} sees the master with flags {:?} and {} other \
                         sentinels",
                        field("flags"),
                        field("num-other-sentinels")
                    ),
                ));
            }
            let known: Vec<Value> = query(
                sentinel,
                redis::cmd("SENTINEL").arg("REPLICAS").arg(MASTER_NAME),
            )
            .await
            .map_err(at)?;
            let known: Vec<HashMap<String, String>> = known.into_iter().map(fields).collect();
            for &replica in &replicas {
                let seen = known
                    .iter()
                    .find(|r| r.get("port").and_then(|p| p.parse().ok()) == Some(replica));
                let flags = seen.and_then(|r| r.get("flags").cloned());
                if flags.as_deref() != Some("slave") {
                    return Err((
                        Some(sentinel),
                        format!("sentinel {sentinel} sees replica {replica} as {flags:?}"),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The master every sentinel names, when they agree.
    async fn named_master(&self) -> Result<u16, String> {
        let mut named = None;
        for sentinel in self.sentinel_ports() {
            let port = master_by(sentinel).await?;
            match named {
                None => named = Some(port),
                Some(other) if other != port => {
                    return Err(format!("sentinels disagree: {other} and {port}"));
                }
                Some(_) => {}
            }
        }
        named.ok_or_else(|| "no sentinel".to_owned())
    }

    fn sentinel_logs(&self, lines: usize) -> String {
        self.sentinels
            .iter()
            .map(|s| format!("--- sentinel {} log:\n{}\n", s.port, s.log_tail(lines)))
            .collect()
    }

    /// Calls of one command on the master the sentinels name, since the last
    /// [`reset_stats`](Self::reset_stats), from `INFO commandstats` (the replicas run the
    /// replicated writes again; ask one with [`calls_on`](Self::calls_on)).
    pub async fn calls(&self, command: &str) -> u64 {
        calls_on(self.master_port().await, command).await
    }

    /// Calls of one command on one data node since the last reset.
    pub async fn calls_on(&self, port: u16, command: &str) -> u64 {
        calls_on(port, command).await
    }

    /// `CONFIG RESETSTAT` on every running data node.
    pub async fn reset_stats(&self) {
        for port in self.running_data() {
            let _: () = query(port, redis::cmd("CONFIG").arg("RESETSTAT"))
                .await
                .unwrap_or_else(|e| panic!("CONFIG RESETSTAT: {e}"));
        }
    }
}

impl Drop for RedisSentinels {
    fn drop(&mut self) {
        self.sentinels.clear();
        self.data.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `SENTINEL GET-MASTER-ADDR-BY-NAME mymaster` on one sentinel: the master's port.
async fn master_by(sentinel: u16) -> Result<u16, String> {
    let (_, port): (String, u16) = query(
        sentinel,
        redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(MASTER_NAME),
    )
    .await?;
    Ok(port)
}

/// A flat `[name, value, name, value, ...]` reply (or a map) as a map of strings.
fn fields(reply: Value) -> HashMap<String, String> {
    redis::from_redis_value(reply).unwrap_or_default()
}

/// The arguments of a data node on `port` in `dir`, a replica of `master` when given.
fn data_args(port: u16, dir: &Path, master: Option<u16>) -> Vec<String> {
    let dir = dir.display();
    let mut args: Vec<String> = [
        "--port",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
        "--dir",
        &dir.to_string(),
        "--logfile",
        &format!("{dir}/redis.log"),
        "--save",
        "",
        "--appendonly",
        "no",
        "--repl-diskless-sync-delay",
        "0",
        "--min-replicas-to-write",
        "1",
    ]
    .map(String::from)
    .to_vec();
    if let Some(master) = master {
        args.extend(["--replicaof".into(), "127.0.0.1".into(), master.to_string()]);
    }
    args
}

/// Writes a sentinel's own conf (Sentinel rewrites it) and returns its arguments.
fn sentinel_args(port: u16, dir: &Path, master: u16) -> Vec<String> {
    let conf = dir.join("sentinel.conf");
    let d = dir.display();
    std::fs::write(
        &conf,
        format!(
            "port {port}\n\
             bind 127.0.0.1\n\
             dir {d}\n\
             logfile {d}/redis.log\n\
             sentinel monitor {MASTER_NAME} 127.0.0.1 {master} 2\n\
             sentinel down-after-milliseconds {MASTER_NAME} {DOWN_AFTER_MS}\n\
             sentinel failover-timeout {MASTER_NAME} {FAILOVER_TIMEOUT_MS}\n\
             sentinel parallel-syncs {MASTER_NAME} 1\n"
        ),
    )
    .expect("cannot write the sentinel's conf");
    vec![conf.display().to_string(), "--sentinel".into()]
}
