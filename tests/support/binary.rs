//! Which server binary the harness runs: `FERRISSON_SERVER` or `redis-server` from `PATH`, the
//! CLI beside it, and its version. Part of `server.rs` (included from there, so that the
//! examples, which include `server.rs` alone, have it too).

#![allow(dead_code, unreachable_pub)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};

/// The environment variable that picks the server binary.
pub const SERVER_VAR: &str = "FERRISSON_SERVER";

/// The server binary every test, example and bench starts: `FERRISSON_SERVER` when set (a path,
/// or a bare name looked up on `PATH`), else `redis-server` from `PATH`. Panics with the reason
/// when `FERRISSON_SERVER` names no executable file.
pub fn server_binary() -> PathBuf {
    static BINARY: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BINARY
        .get_or_init(|| match std::env::var_os(SERVER_VAR) {
            Some(value) if !value.is_empty() => chosen_binary(Path::new(&value)),
            _ => Ok(PathBuf::from("redis-server")),
        })
        .clone()
        .unwrap_or_else(|why| panic!("{why}"))
}

/// Whether `FERRISSON_SERVER` picks the server (rather than `redis-server` from `PATH`).
pub fn server_chosen() -> bool {
    std::env::var_os(SERVER_VAR).is_some_and(|v| !v.is_empty())
}

fn chosen_binary(value: &Path) -> Result<PathBuf, String> {
    let shown = value.display();
    let path = if value.components().count() == 1 && !value.has_root() {
        // A bare name: the one PATH finds.
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .map(|dir| dir.join(value))
            .find(|p| executable(p))
            .ok_or_else(|| format!("{SERVER_VAR}={shown}: no executable of that name on PATH"))?
    } else {
        value.to_path_buf()
    };
    if !path.exists() {
        return Err(format!(
            "{SERVER_VAR}={shown}: no such file (it should be the path of a redis-server or \
             valkey-server binary; `.ci/servers` fetches Valkey 8 and Redis 6.2)"
        ));
    }
    if !path.is_file() || !executable(&path) {
        return Err(format!(
            "{SERVER_VAR}={shown}: not an executable file (chmod +x it?)"
        ));
    }
    Ok(path)
}

fn executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The CLI that goes with [`server_binary`]: the `redis-cli` or `valkey-cli` beside a server
/// chosen with `FERRISSON_SERVER` (the one named like the server first), else `redis-cli` from
/// `PATH` (said once on stderr when a chosen server has none beside it).
pub fn cli_binary() -> PathBuf {
    static CLI: OnceLock<PathBuf> = OnceLock::new();
    CLI.get_or_init(|| {
        if !server_chosen() {
            return PathBuf::from("redis-cli");
        }
        let server = server_binary();
        let dir = server.parent().unwrap_or(Path::new("."));
        let own = server
            .file_name()
            .map(|n| n.to_string_lossy().replace("server", "cli"));
        let beside = own
            .iter()
            .map(String::as_str)
            .chain(["valkey-cli", "redis-cli"])
            .map(|name| dir.join(name))
            .find(|p| executable(p));
        beside.unwrap_or_else(|| {
            // Straight to stderr: `cargo test` captures `eprintln!` of a passing test.
            let _ = writeln!(
                std::io::stderr(),
                "{SERVER_VAR}={}: no redis-cli or valkey-cli beside it; using redis-cli from PATH",
                server.display()
            );
            PathBuf::from("redis-cli")
        })
    })
    .clone()
}

/// The first line `server_binary() --version` prints (`Valkey server v=8.1.8 ...`), with the
/// binary's path: for messages that name the server a test ran on.
pub fn server_version() -> String {
    static VERSION: OnceLock<String> = OnceLock::new();
    VERSION.get_or_init(|| version_of(&server_binary())).clone()
}

/// What `binary --version` says first, after the binary's path.
pub fn version_of(binary: &Path) -> String {
    let version = Command::new(binary)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "version unknown".to_owned());
    format!("{} ({version})", binary.display())
}

/// Makes sure the server binary is there. A server chosen with `FERRISSON_SERVER` must exist
/// (it panics naming the path otherwise). Without it, `redis-server` must be on `PATH`: as root
/// with apt-get it installs Debian's package, otherwise it fails with the command that installs
/// it. It never skips.
pub fn ensure_redis_server() {
    static CHECKED: Mutex<bool> = Mutex::new(false);
    let mut checked = CHECKED.lock().unwrap_or_else(|e| e.into_inner());
    if *checked {
        return;
    }
    if server_chosen() {
        let _ = server_binary();
        *checked = true;
        return;
    }
    if !has("redis-server") {
        install_or_fail(
            "redis-server",
            &format!(
                "redis-server is not installed, and these tests need a real one. Install it with \
                 `sudo apt-get install -y redis-server` (Debian/Ubuntu) or `brew install redis` (macOS), \
                 or point {SERVER_VAR} at a redis-server or valkey-server binary."
            ),
        );
    }
    *checked = true;
}

/// Makes sure `program` (a Debian package of the same name) is on `PATH`, as
/// [`ensure_redis_server`] does for the server: installed as root with apt-get, else a failure
/// that says how to install it (`why` says what needs it). It never skips.
pub fn ensure_program(program: &str, why: &str) {
    if !has(program) {
        install_or_fail(
            program,
            &format!(
                "{program} is not installed, and {why}. Install it with `sudo apt-get install -y {program}`."
            ),
        );
    }
}

/// Installs the Debian package `package` as root with apt-get; panics with `otherwise` when it
/// cannot.
fn install_or_fail(package: &str, otherwise: &str) {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout == b"0\n")
        .unwrap_or(false);
    if !(root && has("apt-get")) {
        panic!("{otherwise}");
    }
    eprintln!("{package} is missing: installing Debian's {package} package");
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
    if !apt(&["install", "--no-install-recommends", package]) {
        panic!("installing {package} failed; run: sudo apt-get install -y {package}");
    }
}

fn has(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}
