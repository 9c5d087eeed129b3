//! Real `redis-server` processes for tests, examples and benches: each on a free loopback port
//! with its own temporary directory, stopped and removed on drop.

#![allow(dead_code, unreachable_pub)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Makes sure `redis-server` is installed: as root with apt-get it installs Debian's package,
/// otherwise it fails with the command that installs it. It never skips.
pub fn ensure_redis_server() {
    static CHECKED: Mutex<bool> = Mutex::new(false);
    let mut checked = CHECKED.lock().unwrap_or_else(|e| e.into_inner());
    if *checked {
        return;
    }
    if !has("redis-server") {
        let root = Command::new("id")
            .arg("-u")
            .output()
            .map(|o| o.stdout == b"0\n")
            .unwrap_or(false);
        if root && has("apt-get") {
            eprintln!("redis-server is missing: installing Debian's redis-server package");
            let apt = |args: &[&str]| {
                Command::new("apt-get")
                    .args(["-o", "DPkg::Lock::Timeout=600", "-q", "-y"])
                    .args(args)
                    .env("DEBIAN_FRONTEND", "noninteractive")
                    .status()
                    .map(|s| s.success())
                    .unwrap_or(false)
            };
            let _ = apt(&["update"]);
            if !apt(&["install", "--no-install-recommends", "redis-server"]) {
                panic!("installing redis-server failed; run: sudo apt-get install -y redis-server");
            }
        } else {
            panic!(
                "redis-server is not installed, and these tests need a real one. Install it with \
                 `sudo apt-get install -y redis-server` (Debian/Ubuntu) or `brew install redis` (macOS)."
            );
        }
    }
    *checked = true;
}

fn has(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free loopback port")
}

/// A `redis-server` process of the test's own.
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    extra: Vec<String>,
    tls_port: Option<u16>,
}

impl RedisServer {
    /// Starts a server on a free port and waits until it answers PING.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts a server with extra command-line settings (`["--maxclients", "50"]`).
    pub fn start_with(extra: &[&str]) -> Self {
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        Self::start_on_free_ports("redis-server", |server| {
            server.extra = extra.clone();
        })
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
    pub fn start_tls() -> Self {
        Self::start_on_free_ports("redis-server with TLS", |server| {
            make_certificates(&server.dir);
            let tls_port = free_port();
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
    }

    /// Starts a server on a free port, set up by `configure`. A port found free can be taken
    /// before the server binds it (other tests' clients draw their local ports from the same
    /// range), so a server that cannot bind is tried again on fresh ports.
    fn start_on_free_ports(what: &str, mut configure: impl FnMut(&mut RedisServer)) -> Self {
        ensure_redis_server();
        for _ in 0..5 {
            let port = free_port();
            let dir =
                std::env::temp_dir().join(format!("ferrisson-redis-{}-{port}", std::process::id()));
            std::fs::create_dir_all(&dir).expect("cannot create the server's directory");
            let mut server = RedisServer {
                child: None,
                port,
                dir,
                extra: Vec::new(),
                tls_port: None,
            };
            configure(&mut server);
            if server.spawn() {
                return server;
            }
        }
        panic!("{what} did not start on any of 5 ports");
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

    fn spawn(&mut self) -> bool {
        let log = self.dir.join("redis.log");
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(&log)
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("cannot run redis-server");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.ping() {
                return true;
            }
            if let Some(Ok(Some(_))) = self.child.as_mut().map(|c| c.try_wait()) {
                eprintln!("redis-server on port {} exited:\n{}", self.port, self.log());
                self.child = None;
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!(
            "redis-server on port {} never answered PING; its log:\n{}",
            self.port,
            self.log()
        );
    }

    fn ping(&self) -> bool {
        let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
        if stream.write_all(b"PING\r\n").is_err() {
            return false;
        }
        let mut line = String::new();
        BufReader::new(stream).read_line(&mut line).is_ok() && line.starts_with("+PONG")
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

    fn pid(&self) -> Option<u32> {
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
        assert!(
            self.spawn(),
            "redis-server did not come back on port {}",
            self.port
        );
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
