//! Real server processes for tests, examples and benches: each on a free loopback port with its
//! own temporary directory, stopped and removed on drop.
//!
//! Which server: `FERRISSON_SERVER`, when set, is the path of a `redis-server` or
//! `valkey-server` binary (or a name looked up on `PATH`), and the harness runs that one
//! everywhere, with the `redis-cli` / `valkey-cli` beside it; unset, `redis-server` and
//! `redis-cli` from `PATH`. [`server_binary`] and [`cli_binary`] are the one place that decides.

#![allow(dead_code, unreachable_pub)]

#[path = "binary.rs"]
mod binary;
#[path = "ports.rs"]
mod ports;
pub use binary::*;
pub use ports::*;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A server process of the test's own ([`server_binary`]).
pub struct RedisServer {
    /// The binary it runs: [`server_binary`], or for TLS one that has it ([`start_tls`](Self::start_tls)).
    binary: PathBuf,
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    extra: Vec<String>,
    tls_port: Option<u16>,
}

/// How a spawn ended.
enum Spawned {
    /// Up, and answering as itself on its port.
    Up,
    /// The process exited before it answered: its stderr and log.
    Exited(String),
    /// Another process's server answered on the port (ours was killed).
    Taken(u32),
}

impl RedisServer {
    /// Starts a server on a free port and waits until it answers PING.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts a server with extra command-line settings (`["--maxclients", "50"]`).
    pub fn start_with(extra: &[&str]) -> Self {
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        Self::start_on_free_ports("the server", |server| {
            server.extra = extra.clone();
        })
        .unwrap_or_else(|output| panic!("the server did not start:\n{output}"))
    }

    /// Starts a server that keeps its data across [`restart_keeping_data`](Self::restart_keeping_data):
    /// AOF on, each write fsynced before it is answered (`--appendonly yes --appendfsync
    /// always`; these come after the `--appendonly no` every server starts with, and
    /// redis-server takes the last value given).
    pub fn start_persistent() -> Self {
        Self::start_with(&["--appendonly", "yes", "--appendfsync", "always"])
    }

    /// Starts a server that also listens with TLS on a second port, with a certificate for
    /// 127.0.0.1 signed by a CA made for this server ([`ca_pem`](Self::ca_pem)). The plain
    /// port stays open for readiness checks and raw access.
    ///
    /// It never skips. TLS is a build option of the server: when `FERRISSON_SERVER` names one
    /// built without it (the Valkey 8 and Redis 6.2 wheels of `.ci/servers`; it says so when
    /// started with `--tls-port`, see [`says_no_tls`]), the TLS test runs against
    /// `redis-server` from `PATH` instead, installed as the default server is when missing, and
    /// says so on stderr: what the TLS tests test is the client's TLS. A default server
    /// without TLS, or any other failure to start, fails the test saying how to get one.
    pub fn start_tls() -> Self {
        let why = match Self::try_start_tls(server_binary()) {
            Ok(server) => return server,
            Err(why) => why,
        };
        if !server_chosen() {
            panic!(
                "{why}; the TLS tests need a server built with TLS: install Debian's \
                 (sudo apt-get install -y redis-server) or point {SERVER_VAR} at one"
            );
        }
        ensure_program(
            "redis-server",
            &format!("the TLS tests need a server with TLS, which {SERVER_VAR}'s lacks"),
        );
        let with_tls = PathBuf::from("redis-server");
        // Straight to the process's stderr: the harness captures `eprintln!` of a passing test.
        let _ = writeln!(
            std::io::stderr(),
            "{why}: the TLS test runs against {} instead",
            version_of(&with_tls)
        );
        Self::try_start_tls(with_tls).unwrap_or_else(|why| {
            panic!("{why}; install a redis-server built with TLS (sudo apt-get install -y redis-server)")
        })
    }

    /// A TLS server, or why the binary cannot be one.
    fn try_start_tls(binary: PathBuf) -> Result<Self, String> {
        Self::start_on_free_ports("the server with TLS", |server| {
            server.binary = binary.clone();
            make_certificates(&server.dir);
            let tls_port = pick_port(false);
            let dir = server.dir.display().to_string();
            server.extra = [
                "--tls-port",
                &tls_port.to_string(),
                "--tls-cert-file",
                &format!("{dir}/server.crt"),
                "--tls-key-file",
                &format!("{dir}/server.key"),
                "--tls-ca-cert-file",
                &format!("{dir}/ca.crt"),
                "--tls-auth-clients",
                "no",
            ]
            .map(String::from)
            .to_vec();
            server.tls_port = Some(tls_port);
        })
        .map_err(|output| {
            let said = output
                .lines()
                .filter(|l| says_no_tls(l) || l.contains("tls-port") || l.contains("Bad directive"))
                .map(str::trim)
                .collect::<Vec<_>>()
                .join(" / ");
            format!(
                "{} has no TLS support: started with --tls-port it exited saying: {said}",
                version_of(&binary)
            )
        })
    }

    /// Starts a server on a free port ([`pick_port`]), set up by `configure`. A server that
    /// exits before it answers is tried again on fresh ports, as is one whose port turned out
    /// to be another process's; `Err` with the server's output when it exited saying it has no
    /// TLS ([`says_no_tls`]). Panics after 5 tries.
    fn start_on_free_ports(
        what: &str,
        mut configure: impl FnMut(&mut RedisServer),
    ) -> Result<Self, String> {
        ensure_redis_server();
        let mut failures = String::new();
        let mut binary = server_binary();
        for _ in 0..5 {
            let port = pick_port(false);
            let dir =
                std::env::temp_dir().join(format!("ferrisson-redis-{}-{port}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).expect("cannot create the server's directory");
            let mut server = RedisServer {
                binary: server_binary(),
                child: None,
                port,
                dir,
                extra: Vec::new(),
                tls_port: None,
            };
            configure(&mut server);
            binary = server.binary.clone();
            match server.spawn() {
                Spawned::Up => return Ok(server),
                Spawned::Exited(output) if says_no_tls(&output) => return Err(output),
                Spawned::Exited(output) => {
                    failures.push_str(&format!("\n--- port {port}: exited:\n{output}"));
                }
                Spawned::Taken(pid) => failures.push_str(&format!(
                    "\n--- port {port}: answered by another server (process {pid})"
                )),
            }
            // Dropping `server` removes its directory and gives its ports back.
        }
        panic!(
            "{what} ({}) did not start on any of 5 ports:{failures}",
            version_of(&binary)
        );
    }

    /// The `rediss://` URL of a server from [`start_tls`](Self::start_tls).
    pub fn tls_url(&self) -> String {
        format!(
            "rediss://127.0.0.1:{}/",
            self.tls_port.expect("a TLS server")
        )
    }

    /// The PEM of the CA that signed the TLS server's certificate.
    pub fn ca_pem(&self) -> Vec<u8> {
        std::fs::read(self.dir.join("ca.crt")).expect("the test CA")
    }

    /// Spawns the server and waits (at most 20 s: a persistent server loads its AOF first)
    /// until it answers PING as itself ([`answer_on`]).
    fn spawn(&mut self) -> Spawned {
        let log = self.dir.join("redis.log");
        let stderr = std::fs::File::create(self.dir.join("stderr")).expect("the stderr file");
        let child = Command::new(&self.binary)
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(&log)
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", self.binary.display()));
        let pid = child.id();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match answer_on(self.port, pid) {
                Answer::Ours => return Spawned::Up,
                Answer::Other(theirs) => {
                    self.kill();
                    return Spawned::Taken(theirs);
                }
                Answer::Nothing => {}
            }
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                self.child = None;
                return Spawned::Exited(format!("({status})\n{}", self.output()));
            }
            assert!(
                Instant::now() < deadline,
                "{} on port {} never answered PING within 20 s; its output:\n{}",
                version_of(&self.binary),
                self.port,
                self.output()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// What the server printed before its log was open, and its log.
    fn output(&self) -> String {
        let mut text = std::fs::read_to_string(self.dir.join("stderr")).unwrap_or_default();
        text.push_str(&self.log());
        text
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        let mut text = String::new();
        if let Ok(mut f) = std::fs::File::open(self.dir.join("redis.log")) {
            let _ = f.read_to_string(&mut text);
        }
        text
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The server's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    fn signal(&self, signal: &str) {
        if let Some(pid) = self.pid() {
            let _ = Command::new("kill")
                .args([signal, &pid.to_string()])
                .status();
        }
    }

    /// Freezes the server (SIGSTOP): connections stay open, nothing is answered.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Thaws a paused server (SIGCONT).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    /// Kills the server (SIGKILL); its data is gone.
    pub fn kill(&mut self) {
        self.signal("-CONT");
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills the server and starts a new one on the same port, in the same directory and with
    /// the same settings: empty, unless the server persists (see
    /// [`restart_keeping_data`](Self::restart_keeping_data)).
    pub fn restart(&mut self) {
        self.kill();
        match self.spawn() {
            Spawned::Up => {}
            Spawned::Exited(output) => panic!(
                "the server did not come back on port {}: it exited {output}",
                self.port
            ),
            Spawned::Taken(pid) => panic!(
                "the server did not come back on port {}: process {pid} answers there",
                self.port
            ),
        }
    }

    /// Kills the server (SIGKILL) and starts it again as [`restart`](Self::restart) does, for
    /// a server that persists ([`start_persistent`](Self::start_persistent), or `--appendonly
    /// yes` given to [`start_with`](Self::start_with)): it loads its AOF before it answers PING,
    /// so it comes back with every write it had answered (with `appendfsync always`). Panics
    /// for a server without AOF, which would come back empty.
    pub fn restart_keeping_data(&mut self) {
        assert!(
            self.persists(),
            "restart_keeping_data needs a server with --appendonly yes (start_persistent)"
        );
        self.restart();
    }

    /// Whether the server's settings turn AOF on (the last `--appendonly` given wins).
    fn persists(&self) -> bool {
        self.extra
            .windows(2)
            .rev()
            .find(|pair| pair[0] == "--appendonly")
            .is_some_and(|pair| pair[1] == "yes")
    }

    /// A raw connection for checks and for playing a foreign (e.g. Java) client.
    pub async fn raw(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .expect("raw connection to the test server")
    }
}

/// A CA and a server certificate for 127.0.0.1 signed by it, made with the openssl command.
fn make_certificates(dir: &Path) {
    let run = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("the openssl command makes the test certificates");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    run(&[
        &["req", "-x509"][..],
        &ec,
        &[
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "2",
            "-subj",
            "/CN=ferrisson test CA",
        ],
    ]
    .concat());
    run(&[
        &["req"][..],
        &ec,
        &[
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=127.0.0.1",
        ],
    ]
    .concat());
    std::fs::write(
        dir.join("san.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
    )
    .unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.crt",
        "-days",
        "2",
        "-extfile",
        "san.ext",
    ]);
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
        release_port(self.port);
        if let Some(port) = self.tls_port {
            release_port(port);
        }
    }
}

/// `REDIS_URL` when set; otherwise a temporary server of our own (kept alive by the returned
/// handle). For the examples.
pub fn env_or_temporary() -> (Option<RedisServer>, String) {
    match std::env::var("REDIS_URL") {
        Ok(url) => (None, url),
        Err(_) => {
            let server = RedisServer::start();
            let url = server.url();
            println!("started a temporary redis-server at {url}");
            (Some(server), url)
        }
    }
}

impl RedisServer {
    /// Calls per command since the last [`reset_stats`](Self::reset_stats), from
    /// `INFO commandstats` (commands run inside scripts included).
    pub async fn commandstats(&self) -> Vec<(String, u64)> {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut self.raw().await)
            .await
            .expect("INFO commandstats");
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

    /// Calls of one command (`evalsha`, `script|load`, ...) since the last reset.
    pub async fn calls(&self, command: &str) -> u64 {
        self.commandstats()
            .await
            .into_iter()
            .find(|(name, _)| name == command)
            .map_or(0, |(_, calls)| calls)
    }

    /// Waits up to 5 s until `command` has been called at least `at_least` times since the
    /// last reset; whether it was.
    pub async fn calls_reach(&self, command: &str, at_least: u64) -> bool {
        // Polled here rather than with `support::eventually`: the examples include this file
        // on its own.
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.calls(command).await < at_least {
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        true
    }

    /// `CONFIG RESETSTAT`: the command counters start again from zero.
    pub async fn reset_stats(&self) {
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async(&mut self.raw().await)
            .await
            .expect("CONFIG RESETSTAT");
    }

    /// How many connections are subscribed to `channel`.
    pub async fn subscribers(&self, channel: &str) -> i64 {
        let counts: Vec<(String, i64)> = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(channel)
            .query_async(&mut self.raw().await)
            .await
            .expect("PUBSUB NUMSUB");
        counts.first().map_or(0, |(_, n)| *n)
    }

    /// Waits (at most 5 s) until `channel` has exactly `clients` subscribed connections; panics
    /// when it does not.
    pub async fn wait_subscribers(&self, channel: &str, clients: i64) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while self.subscribers(channel).await != clients {
            assert!(
                std::time::Instant::now() < deadline,
                "{channel} never had {clients} subscribers"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }
}
