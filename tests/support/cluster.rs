//! A real Redis Cluster for tests: 3 masters and 3 replicas, each a server process
//! ([`super::server::server_binary`]: `redis-server`, or the one `FERRISSON_SERVER` picks) of
//! the test's own on loopback ports whose cluster bus ports (port + 10000) are free too. Every
//! process is killed, and the temporary directory removed, on drop.
//!
//! The helpers shared with [`super::sentinel`] (ports, processes, queries) live here too.

#![allow(dead_code, unreachable_pub)]

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::Value;

/// `cluster-node-timeout` of every node, in ms: how long a node may be unreachable before the
/// others count it as failing. 1000 ms gives a failover in about 2.5 s after a kill; smaller
/// values risk failovers nobody asked for when a loaded machine stalls a node.
pub const NODE_TIMEOUT_MS: u64 = 1000;

/// How long the harness waits for a topology to come up or settle before it panics.
const SETTLE_WITHIN: Duration = Duration::from_secs(40);

/// Each query the harness sends is given this long (connecting included).
const QUERY_WITHIN: Duration = Duration::from_secs(3);

// ---- shared helpers: ports, processes, queries ------------------------------------------------

/// A free loopback port below the ephemeral range, its bus port (+ 10000) free too when
/// `with_bus` (see [`super::server::pick_port`], which every server of the harness takes its
/// ports from).
pub(super) fn pick_port(with_bus: bool) -> u16 {
    super::server::pick_port(with_bus)
}

fn release_port(port: u16) {
    super::server::release_port(port);
}

/// A fresh temporary directory for one topology.
pub(super) fn topology_dir(kind: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "ferrisson-{kind}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("cannot create the topology's directory");
    dir
}

/// Makes sure the CLI is there ([`super::server::cli_binary`]: `redis-cli` from `PATH`, or the
/// one beside the server `FERRISSON_SERVER` picks; Debian's redis-server package depends on
/// redis-tools, which has it).
fn ensure_redis_cli() {
    let cli = super::server::cli_binary();
    let ok = Command::new(&cli)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "{} cannot be run; the cluster tests create their cluster with \
         `redis-cli --cluster create`. Install it with `sudo apt-get install -y redis-tools`.",
        cli.display()
    );
}

/// One server process of a topology (a data node or a sentinel; [`super::server::server_binary`]), with its directory,
/// its log (`redis.log`, and `stderr` for what comes before the log is open) and the arguments
/// it is (re)started with.
pub(super) struct Proc {
    pub(super) port: u16,
    pub(super) dir: PathBuf,
    args: Vec<String>,
    child: Option<Child>,
}

impl Proc {
    /// Starts `what` on a free port (bus port free too when `with_bus`) in a directory of its
    /// own under `base`; `setup` writes what the process needs into that directory and returns
    /// its arguments. A process that exits at once (its port taken meanwhile, say) is tried
    /// again on another port, at most 5 times.
    pub(super) async fn start(
        base: &Path,
        what: &str,
        with_bus: bool,
        mut setup: impl FnMut(u16, &Path) -> Vec<String>,
    ) -> Proc {
        let mut failures = String::new();
        for _ in 0..5 {
            let port = pick_port(with_bus);
            let dir = base.join(port.to_string());
            std::fs::create_dir_all(&dir).expect("cannot create the node's directory");
            let mut proc = Proc {
                port,
                dir,
                args: Vec::new(),
                child: None,
            };
            proc.args = setup(port, &proc.dir);
            match proc.spawn().await {
                Ok(()) => return proc,
                Err(why) => {
                    failures.push_str(&format!("\n--- port {port}: {why}"));
                    let _ = std::fs::remove_dir_all(&proc.dir);
                    release_port(port);
                }
            }
        }
        panic!("{what} did not start on any of 5 ports:{failures}");
    }

    /// Spawns the process with its arguments and waits until it answers PING as itself (see
    /// [`super::server::answer_on`]); `Err` with its log when it exits first, or when another
    /// process's server answers on its port (ours is killed then). Panics when it neither
    /// answers nor exits within 15 s.
    pub(super) async fn spawn(&mut self) -> Result<(), String> {
        assert!(self.child.is_none(), "node {} is running", self.port);
        let stderr = std::fs::File::create(self.dir.join("stderr")).expect("the stderr file");
        let binary = super::server::server_binary();
        let child = Command::new(&binary)
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", binary.display()));
        let pid = child.id();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let port = self.port;
            let answer = tokio::task::spawn_blocking(move || super::server::answer_on(port, pid))
                .await
                .expect("the readiness check");
            match answer {
                super::server::Answer::Ours => return Ok(()),
                super::server::Answer::Other(theirs) => {
                    self.kill();
                    return Err(format!("process {theirs} answers on port {port}"));
                }
                super::server::Answer::Nothing => {}
            }
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                self.child = None;
                return Err(format!("exited ({status}):\n{}", self.log_tail(20)));
            }
            assert!(
                Instant::now() < deadline,
                "{} on port {} never answered PING within 15 s; its log:\n{}",
                super::server::server_version(),
                self.port,
                self.log_tail(30)
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Replaces the arguments it is started with next.
    pub(super) fn set_args(&mut self, args: Vec<String>) {
        self.args = args;
    }

    pub(super) fn running(&self) -> bool {
        self.child.is_some()
    }

    /// SIGKILL, and wait until it is gone.
    pub(super) fn kill(&mut self) {
        self.signal("-CONT");
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub(super) fn signal(&self, signal: &str) {
        if let Some(child) = &self.child {
            let _ = Command::new("kill")
                .args([signal, &child.id().to_string()])
                .status();
        }
    }

    /// The last `lines` lines of the process's stderr and log.
    pub(super) fn log_tail(&self, lines: usize) -> String {
        let mut text = std::fs::read_to_string(self.dir.join("stderr")).unwrap_or_default();
        text.push_str(&std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default());
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// The whole log.
    pub(super) fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
        release_port(self.port);
    }
}

pub(super) fn url(port: u16) -> String {
    format!("redis://127.0.0.1:{port}/")
}

/// A raw connection to the server on `port`, or the reason there is none.
pub(super) async fn connect(port: u16) -> Result<redis::aio::MultiplexedConnection, String> {
    let client = redis::Client::open(url(port)).map_err(|e| e.to_string())?;
    match tokio::time::timeout(QUERY_WITHIN, client.get_multiplexed_async_connection()).await {
        Ok(Ok(conn)) => Ok(conn),
        Ok(Err(e)) => Err(format!("port {port}: {e}")),
        Err(_) => Err(format!(
            "port {port}: no connection within {QUERY_WITHIN:?}"
        )),
    }
}

/// `cmd` on the server on `port` over a fresh connection, bounded by [`QUERY_WITHIN`].
pub(super) async fn query<T: redis::FromRedisValue>(
    port: u16,
    cmd: &redis::Cmd,
) -> Result<T, String> {
    let mut conn = connect(port).await?;
    match tokio::time::timeout(QUERY_WITHIN, cmd.query_async::<T>(&mut conn)).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(format!("port {port}: {e}")),
        Err(_) => Err(format!("port {port}: no answer within {QUERY_WITHIN:?}")),
    }
}

/// Calls per command from `INFO commandstats` text.
pub(super) fn parse_commandstats(info: &str) -> Vec<(String, u64)> {
    info.lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            Some((name.to_owned(), calls))
        })
        .collect()
}

/// `command`'s calls on the server on `port` since its last reset (0 when it cannot be asked).
pub(super) async fn calls_on(port: u16, command: &str) -> u64 {
    let info: String = query(port, redis::cmd("INFO").arg("commandstats"))
        .await
        .unwrap_or_default();
    parse_commandstats(&info)
        .into_iter()
        .find(|(name, _)| name == command)
        .map_or(0, |(_, calls)| calls)
}

/// A data node's replication role, from `ROLE`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Master,
    /// A replica of the master on `master`; `linked` when its replication link is up.
    Replica {
        master: u16,
        linked: bool,
    },
}

/// `ROLE` of the server on `port`.
pub(super) async fn role_of(port: u16) -> Result<Role, String> {
    let reply: Vec<Value> = query(port, &redis::cmd("ROLE")).await?;
    let text = |i: usize| -> String {
        reply
            .get(i)
            .and_then(|v| redis::from_redis_value_ref::<String>(v).ok())
            .unwrap_or_default()
    };
    match text(0).as_str() {
        "master" => Ok(Role::Master),
        "slave" => Ok(Role::Replica {
            master: text(2).parse().unwrap_or(0),
            linked: text(3) == "connected",
        }),
        other => Err(format!("port {port}: unexpected ROLE {other:?}")),
    }
}

// ---- the cluster ------------------------------------------------------------------------------

/// One shard of the slot map: its slot ranges, its master and its replicas (sorted), as
/// `CLUSTER SLOTS` reports them (failed replicas are left out by Redis).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shard {
    pub slots: Vec<(u16, u16)>,
    pub master: u16,
    pub replicas: Vec<u16>,
}

impl Shard {
    pub fn has_slot(&self, slot: u16) -> bool {
        self.slots.iter().any(|&(a, b)| a <= slot && slot <= b)
    }
}

/// A node of the cluster as it is now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeInfo {
    pub port: u16,
    pub role: Role,
}

/// A master killed by [`RedisCluster::kill_master_of`]: when, a slot of its shard, and the
/// replicas that may take over.
struct Killed {
    at: Instant,
    slot: u16,
    replicas: Vec<u16>,
}

/// 3 masters and 3 replicas, started by [`RedisCluster::start`].
pub struct RedisCluster {
    nodes: Vec<Proc>,
    dir: PathBuf,
    killed: HashMap<u16, Killed>,
}

impl std::fmt::Debug for RedisCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisCluster")
            .field("ports", &self.ports())
            .field("dir", &self.dir)
            .finish()
    }
}

impl RedisCluster {
    /// Starts 6 nodes, creates the cluster with `redis-cli --cluster create ...
    /// --cluster-replicas 1`, and waits until every node reports `cluster_state:ok`, all agree
    /// on the slot map (3 masters covering the 16384 slots, one linked replica each). Panics,
    /// naming what did not come up and with the tail of its log, when that takes over 40 s.
    pub async fn start() -> RedisCluster {
        super::server::ensure_redis_server();
        ensure_redis_cli();
        let dir = topology_dir("cluster");
        let mut nodes = Vec::new();
        for _ in 0..6 {
            nodes.push(Proc::start(&dir, "a cluster node", true, node_args).await);
        }
        let cluster = RedisCluster {
            nodes,
            dir,
            killed: HashMap::new(),
        };
        cluster.create().await;
        cluster.wait_settled("the new cluster").await;
        cluster
    }

    async fn create(&self) {
        let mut create = tokio::process::Command::new(super::server::cli_binary());
        create.args(["--cluster", "create"]);
        for node in &self.nodes {
            create.arg(format!("127.0.0.1:{}", node.port));
        }
        create
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .stdin(Stdio::null())
            .kill_on_drop(true);
        let out = tokio::time::timeout(Duration::from_secs(60), create.output())
            .await
            .expect("`redis-cli --cluster create` did not finish within 60 s")
            .unwrap_or_else(|e| {
                panic!("cannot run {}: {e}", super::server::cli_binary().display())
            });
        if !out.status.success() {
            panic!(
                "`redis-cli --cluster create` failed ({}):\n{}{}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
                self.logs_tail(10)
            );
        }
    }

    /// The ports of all 6 nodes, running or not, in start order.
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|n| n.port).collect()
    }

    /// The ports of the nodes running now.
    pub fn running_ports(&self) -> Vec<u16> {
        self.nodes
            .iter()
            .filter(|n| n.running())
            .map(|n| n.port)
            .collect()
    }

    /// `redis://127.0.0.1:<port>/` of every running node: seeds for a cluster client.
    pub fn seed_urls(&self) -> Vec<String> {
        self.running_ports().into_iter().map(url).collect()
    }

    /// The URL of one node.
    pub fn url(&self, port: u16) -> String {
        url(port)
    }

    /// The cluster's temporary directory (a directory per node under it).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn node(&self, port: u16) -> &Proc {
        self.nodes
            .iter()
            .find(|n| n.port == port)
            .unwrap_or_else(|| panic!("no cluster node on port {port}"))
    }

    fn node_mut(&mut self, port: u16) -> &mut Proc {
        self.nodes
            .iter_mut()
            .find(|n| n.port == port)
            .unwrap_or_else(|| panic!("no cluster node on port {port}"))
    }

    /// A node's log so far.
    pub fn log(&self, port: u16) -> String {
        self.node(port).log()
    }

    fn logs_tail(&self, lines: usize) -> String {
        self.nodes
            .iter()
            .map(|n| format!("--- node {} log:\n{}\n", n.port, n.log_tail(lines)))
            .collect()
    }

    /// Every running node's role, asked with `ROLE` (nodes that do not answer are left out).
    pub async fn nodes(&self) -> Vec<NodeInfo> {
        let mut infos = Vec::new();
        for port in self.running_ports() {
            if let Ok(role) = role_of(port).await {
                infos.push(NodeInfo { port, role });
            }
        }
        infos
    }

    /// One node's role (`ROLE`).
    pub async fn role(&self, port: u16) -> Role {
        role_of(port)
            .await
            .unwrap_or_else(|e| panic!("ROLE of cluster node {port}: {e}"))
    }

    /// The slot map as the first running node that answers reports it (`CLUSTER SLOTS`).
    pub async fn shards(&self) -> Vec<Shard> {
        let mut why = String::from("no node is running");
        for port in self.running_ports() {
            match slot_map(port).await {
                Ok(map) => return map,
                Err(e) => why = e,
            }
        }
        panic!("no cluster node reports its slot map: {why}");
    }

    /// The masters of the slot map, by first slot.
    pub async fn masters(&self) -> Vec<u16> {
        self.shards().await.into_iter().map(|s| s.master).collect()
    }

    /// `CLUSTER KEYSLOT key`.
    pub async fn slot_of(&self, key: &str) -> u16 {
        let mut why = String::from("no node is running");
        for port in self.running_ports() {
            match query::<u16>(port, redis::cmd("CLUSTER").arg("KEYSLOT").arg(key)).await {
                Ok(slot) => return slot,
                Err(e) => why = e,
            }
        }
        panic!("no cluster node answers CLUSTER KEYSLOT: {why}");
    }

    /// The shard that serves `slot`.
    pub async fn shard_of_slot(&self, slot: u16) -> Shard {
        self.shards()
            .await
            .into_iter()
            .find(|s| s.has_slot(slot))
            .unwrap_or_else(|| panic!("no shard serves slot {slot}"))
    }

    /// The port of the master serving `slot`.
    pub async fn master_of_slot(&self, slot: u16) -> u16 {
        self.shard_of_slot(slot).await.master
    }

    /// The port of the master serving `key`'s slot.
    pub async fn master_for_key(&self, key: &str) -> u16 {
        let slot = self.slot_of(key).await;
        self.master_of_slot(slot).await
    }

    /// The replicas of the master serving `key`'s slot.
    pub async fn replicas_for_key(&self, key: &str) -> Vec<u16> {
        let slot = self.slot_of(key).await;
        self.shard_of_slot(slot).await.replicas
    }

    /// A raw connection to one node (no cluster routing: keys of other slots get MOVED).
    pub async fn raw_node(&self, port: u16) -> redis::aio::MultiplexedConnection {
        connect(port)
            .await
            .unwrap_or_else(|e| panic!("raw connection to cluster node {port}: {e}"))
    }

    /// A redis-rs cluster connection seeded with every running node.
    pub async fn cluster_connection(&self) -> redis::cluster_async::ClusterConnection {
        redis::cluster::ClusterClient::new(self.seed_urls())
            .expect("a cluster client")
            .get_async_connection()
            .await
            .expect("a cluster connection")
    }

    /// SIGKILLs the master of `key`'s slot; returns its port. [`wait_promoted`] with that port
    /// then waits for one of its replicas to take over.
    ///
    /// [`wait_promoted`]: Self::wait_promoted
    pub async fn kill_master_of(&mut self, key: &str) -> u16 {
        let slot = self.slot_of(key).await;
        let shard = self.shard_of_slot(slot).await;
        self.node_mut(shard.master).kill();
        self.killed.insert(
            shard.master,
            Killed {
                at: Instant::now(),
                slot,
                replicas: shard.replicas,
            },
        );
        shard.master
    }

    /// Freezes the replicas of `key`'s master and makes that master drop their links (see
    /// [`drop_replica_links`]): they miss what it writes from
    /// now on. Returns the master and the replicas (for [`resume_all`](Self::resume_all)).
    pub async fn cut_off_replicas_of(&self, key: &str) -> (u16, Vec<u16>) {
        let master = self.master_for_key(key).await;
        let replicas = self.replicas_for_key(key).await;
        for port in &replicas {
            self.pause(*port);
        }
        drop_replica_links(&mut self.raw_node(master).await).await;
        (master, replicas)
    }

    /// Thaws every one of `ports`.
    pub fn resume_all(&self, ports: &[u16]) {
        for port in ports {
            self.resume(*port);
        }
    }

    /// SIGKILLs one node, whatever its role.
    pub fn kill_node(&mut self, port: u16) {
        self.node_mut(port).kill();
    }

    /// Freezes a node (SIGSTOP): its connections stay open and nothing is answered; the others
    /// fail it over after the node timeout when it is a master.
    pub fn pause(&self, port: u16) {
        self.node(port).signal("-STOP");
    }

    /// Thaws a paused node (SIGCONT).
    pub fn resume(&self, port: u16) {
        self.node(port).signal("-CONT");
    }

    /// After [`kill_master_of`](Self::kill_master_of) returned `killed`: waits until one of its
    /// replicas is the master of its slots and the cluster has settled (every running node
    /// `cluster_state:ok`, all agreeing on the slot map, every replica linked). Returns the new
    /// master and how long it took since the kill. Panics after 40 s.
    pub async fn wait_promoted(&self, killed: u16) -> (u16, Duration) {
        let kill = self
            .killed
            .get(&killed)
            .unwrap_or_else(|| panic!("node {killed} was not killed by kill_master_of"));
        let deadline = Instant::now() + SETTLE_WITHIN;
        loop {
            let last = match self.settled().await {
                Ok(map) => {
                    let shard = map.iter().find(|s| s.has_slot(kill.slot)).unwrap();
                    if kill.replicas.contains(&shard.master) {
                        return (shard.master, kill.at.elapsed());
                    }
                    format!("slot {} is still served by {}", kill.slot, shard.master)
                }
                Err((_, why)) => why,
            };
            if Instant::now() >= deadline {
                let logs: String = kill
                    .replicas
                    .iter()
                    .map(|&p| format!("--- replica {p} log:\n{}\n", self.node(p).log_tail(30)))
                    .collect();
                panic!(
                    "no replica of killed master {killed} ({:?}) took over within \
                     {SETTLE_WITHIN:?}: {last}\n{logs}",
                    kill.replicas
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// `CLUSTER FAILOVER` on a replica of `key`'s master; waits until the two have swapped roles
    /// and the cluster has settled. Returns the new master and how long that took.
    pub async fn failover_manual(&self, key: &str) -> (u16, Duration) {
        let slot = self.slot_of(key).await;
        let shard = self.shard_of_slot(slot).await;
        let old = shard.master;
        let new = *shard
            .replicas
            .first()
            .unwrap_or_else(|| panic!("master {old} has no replica to fail over to"));
        let started = Instant::now();
        let _: () = query(new, redis::cmd("CLUSTER").arg("FAILOVER"))
            .await
            .unwrap_or_else(|e| panic!("CLUSTER FAILOVER on {new}: {e}"));
        self.wait_for(&format!("the manual failover from {old} to {new}"), |map| {
            let shard = map.iter().find(|s| s.has_slot(slot)).unwrap();
            if shard.master == new && shard.replicas.contains(&old) {
                Ok(())
            } else {
                Err(format!(
                    "slot {slot}: master {}, replicas {:?}",
                    shard.master, shard.replicas
                ))
            }
        })
        .await;
        (new, started.elapsed())
    }

    /// Starts a node again on its port with its `nodes.conf` (kills it first when it runs), and
    /// waits until the cluster has settled with it in the slot map. A master that was failed
    /// over comes back as a replica of the master that replaced it. Returns its role.
    pub async fn restart_node(&mut self, port: u16) -> Role {
        let node = self.node_mut(port);
        node.kill();
        if let Err(why) = node.spawn().await {
            panic!("cluster node {port} did not start again: {why}");
        }
        self.killed.remove(&port);
        self.wait_settled(&format!("node {port} rejoining")).await;
        role_of(port)
            .await
            .unwrap_or_else(|e| panic!("ROLE of node {port}: {e}"))
    }

    /// Waits until the cluster has settled (see [`wait_promoted`](Self::wait_promoted)).
    pub async fn wait_settled(&self, what: &str) {
        self.wait_for(what, |_| Ok(())).await;
    }

    /// Polls until the cluster has settled and `check` accepts its slot map; panics after 40 s
    /// naming the last problem, with the tail of the log of the node concerned.
    async fn wait_for(&self, what: &str, check: impl Fn(&[Shard]) -> Result<(), String>) {
        let deadline = Instant::now() + SETTLE_WITHIN;
        loop {
            let last = match self.settled().await {
                Ok(map) => match check(&map) {
                    Ok(()) => return,
                    Err(why) => (None, why),
                },
                Err(last) => last,
            };
            if Instant::now() >= deadline {
                let log = match last.0 {
                    Some(port) => format!("--- node {port} log:\n{}", self.node(port).log_tail(30)),
                    None => self.logs_tail(8),
                };
                panic!(
                    "{what}: the cluster did not settle within {SETTLE_WITHIN:?}: {}\n{log}",
                    last.1
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The slot map when the cluster has settled: every running node reports
    /// `cluster_state:ok` and the same slot map, whose 3 masters cover all 16384 slots and
    /// which lists every running node; every replica's link is up. Otherwise the node at fault
    /// (when there is one) and what is wrong.
    async fn settled(&self) -> Result<Vec<Shard>, (Option<u16>, String)> {
        let running = self.running_ports();
        let mut agreed: Option<(u16, Vec<Shard>)> = None;
        for &port in &running {
            let info: String = query(port, redis::cmd("CLUSTER").arg("INFO"))
                .await
                .map_err(|e| (Some(port), e))?;
            if !info.lines().any(|l| l.trim() == "cluster_state:ok") {
                let state = info.lines().next().unwrap_or_default().trim().to_owned();
                return Err((Some(port), format!("node {port} reports {state}")));
            }
            let map = slot_map(port).await.map_err(|e| (Some(port), e))?;
            match &agreed {
                None => agreed = Some((port, map)),
                Some((first, theirs)) if *theirs != map => {
                    return Err((
                        Some(port),
                        format!("node {port} has slot map {map:?}, node {first} has {theirs:?}"),
                    ));
                }
                Some(_) => {}
            }
        }
        let (_, map) = agreed.ok_or((None, "no node is running".to_owned()))?;
        let mut next = 0u32;
        let mut ranges: Vec<(u16, u16)> = map.iter().flat_map(|s| s.slots.clone()).collect();
        ranges.sort();
        for (a, b) in ranges {
            if u32::from(a) != next {
                return Err((None, format!("slots {next}..{a} are not served")));
            }
            next = u32::from(b) + 1;
        }
        if next != 16384 {
            return Err((None, format!("slots {next}..16383 are not served")));
        }
        if map.len() != 3 {
            return Err((None, format!("{} masters instead of 3: {map:?}", map.len())));
        }
        let listed: HashSet<u16> = map
            .iter()
            .flat_map(|s| std::iter::once(s.master).chain(s.replicas.iter().copied()))
            .collect();
        for &port in &running {
            if !listed.contains(&port) {
                return Err((Some(port), format!("node {port} is not in the slot map")));
            }
        }
        for shard in &map {
            for &replica in &shard.replicas {
                match role_of(replica).await.map_err(|e| (Some(replica), e))? {
                    Role::Replica {
                        master,
                        linked: true,
                    } if master == shard.master => {}
                    role => {
                        return Err((
                            Some(replica),
                            format!("replica {replica} of {} reports {role:?}", shard.master),
                        ));
                    }
                }
            }
        }
        Ok(map)
    }

    /// Calls of one command (`evalsha`, `script|load`, ...) summed over the masters, since the
    /// last [`reset_stats`](Self::reset_stats), from `INFO commandstats` (commands run inside
    /// scripts included). The replicas are left out: they run every replicated write again
    /// (`set` counts on a master and on its replica), so summing them would count writes twice;
    /// ask one with [`calls_on`](Self::calls_on).
    pub async fn calls(&self, command: &str) -> u64 {
        let mut sum = 0;
        for port in self.masters().await {
            sum += calls_on(port, command).await;
        }
        sum
    }

    /// Calls of one command summed over every running node, replicas included.
    pub async fn calls_all(&self, command: &str) -> u64 {
        let mut sum = 0;
        for port in self.running_ports() {
            sum += calls_on(port, command).await;
        }
        sum
    }

    /// Calls of one command on one node since the last reset.
    pub async fn calls_on(&self, port: u16, command: &str) -> u64 {
        calls_on(port, command).await
    }

    /// `CONFIG RESETSTAT` on every running node.
    pub async fn reset_stats(&self) {
        for port in self.running_ports() {
            let _: () = query(port, redis::cmd("CONFIG").arg("RESETSTAT"))
                .await
                .unwrap_or_else(|e| panic!("CONFIG RESETSTAT: {e}"));
        }
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        self.nodes.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The arguments of a cluster node on `port` in `dir`.
fn node_args(port: u16, dir: &Path) -> Vec<String> {
    let dir = dir.display();
    [
        "--port",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        &format!("{dir}/nodes.conf"),
        "--cluster-node-timeout",
        &NODE_TIMEOUT_MS.to_string(),
        // A replica takes over however long its link was down: failovers in tests must not
        // depend on how loaded the machine was.
        "--cluster-replica-validity-factor",
        "0",
        "--dir",
        &dir.to_string(),
        "--logfile",
        &format!("{dir}/redis.log"),
        "--save",
        "",
        "--appendonly",
        "no",
        // Replicas (and rejoining old masters) sync at once instead of after 5 s.
        "--repl-diskless-sync-delay",
        "0",
        // CLUSTER SLOTS lists a replica only once its replication offset is above 0; on a
        // master without writes, only its pings to the replicas move it (every 10 s by
        // default).
        "--repl-ping-replica-period",
        "1",
    ]
    .map(String::from)
    .to_vec()
}

/// `CLUSTER SLOTS` of the node on `port`, grouped by master, sorted by first slot.
async fn slot_map(port: u16) -> Result<Vec<Shard>, String> {
    let reply: Vec<Vec<Value>> = query(port, redis::cmd("CLUSTER").arg("SLOTS")).await?;
    let bad = || format!("node {port}: unexpected CLUSTER SLOTS reply");
    let node_port = |v: &Value| -> Result<u16, String> {
        match v {
            Value::Array(fields) => fields
                .get(1)
                .and_then(|p| redis::from_redis_value_ref::<u16>(p).ok())
                .ok_or_else(bad),
            _ => Err(bad()),
        }
    };
    let mut shards: Vec<Shard> = Vec::new();
    for range in reply {
        if range.len() < 3 {
            return Err(bad());
        }
        let start: u16 = redis::from_redis_value_ref(&range[0]).map_err(|_| bad())?;
        let end: u16 = redis::from_redis_value_ref(&range[1]).map_err(|_| bad())?;
        let master = node_port(&range[2])?;
        let mut replicas = range[3..]
            .iter()
            .map(node_port)
            .collect::<Result<Vec<_>, _>>()?;
        replicas.sort();
        match shards.iter_mut().find(|s| s.master == master) {
            Some(shard) => shard.slots.push((start, end)),
            None => shards.push(Shard {
                slots: vec![(start, end)],
                master,
                replicas,
            }),
        }
    }
    for shard in &mut shards {
        shard.slots.sort();
    }
    shards.sort_by_key(|s| s.slots[0]);
    Ok(shards)
}

/// Makes the master behind `master` keep taking writes with no replica linked (a sentinel
/// setup's nodes ask for one) and drop its replicas' links: replicas frozen before then miss
/// every write from now on (a frozen replica alone still finds the stream in its socket on
/// thaw, and applies it).
pub async fn drop_replica_links(master: &mut redis::aio::MultiplexedConnection) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("min-replicas-to-write")
        .arg(0)
        .query_async(master)
        .await
        .expect("CONFIG SET min-replicas-to-write 0");
    let _: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica")
        .query_async(master)
        .await
        .expect("CLIENT KILL TYPE replica");
}
