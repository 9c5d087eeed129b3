//! Holders an operator can find: a holder process stopped with SIGSTOP (as a hung one would be)
//! keeps its identity while its holds may live, with how long it has been silent, in the
//! library's reads and in `ferrisson clients` and `inspect`; it beats again once resumed. Real
//! servers, real child processes (`tests/bin/holder.rs`).

mod support;

use std::time::{Duration, Instant};

use ferrisson::{Client, ClientIdentity};
use support::{HolderProcess, RedisServer, eventually};

/// A holder that says who it is: its client id, once it holds `name`.
async fn holder(
    server: &RedisServer,
    name: &str,
    ms: u64,
    kind: &str,
) -> (HolderProcess, uuid::Uuid) {
    let mut holder = HolderProcess::spawn(server, name, ms, kind);
    let line = holder.line(Duration::from_secs(10)).await;
    let id = line.strip_prefix("ID ").unwrap().parse().unwrap();
    holder.locked(Duration::from_secs(10)).await;
    (holder, id)
}

/// Waits until the identity of `id` names its hold of `lock` (published after a second).
async fn published(observer: &Client, id: uuid::Uuid, lock: &str) -> ClientIdentity {
    let named = eventually(Duration::from_secs(5), || async {
        let who = observer.identity_of(id).await.unwrap();
        who.is_some_and(|w| w.hold_sites.iter().any(|h| h.lock == lock))
    })
    .await;
    assert!(named, "the identity never named its hold of {lock}");
    observer.identity_of(id).await.unwrap().unwrap()
}

/// The tool `ferrisson` with `args` on `server`, its stdout (it ran and did not fail).
async fn tool(server: &RedisServer, args: &[&str]) -> String {
    let url = server.url();
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_ferrisson"))
        .args(["--url", url.as_str()])
        .args(args)
        .env_remove("FERRISSON_URL")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(20), child)
        .await
        .expect("the tool ends within 20 s")
        .expect("the tool runs");
    // `inspect` ends with 1 when something is held.
    assert!(matches!(out.status.code(), Some(0 | 1)), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A stopped holder (the default watchdog, 30 s: its lock lives up to 30 s past its last
/// renewal, its identity 36 s past its last beat) is still found 8 s later, pid and host,
/// silent for that long, with where it took its hold, by the library and by the tool; resumed,
/// it beats again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_holder_is_found_with_how_long_it_has_been_silent() {
    let server = RedisServer::start();
    let (holder, id) = holder(&server, "silent:renewed", 30_000, "identity").await;
    let observer = support::client(&server).await;
    let before = published(&observer, id, "silent:renewed").await;
    assert!(before.is_live(), "{before:?}");
    assert!(before.silent_for < Duration::from_secs(2), "{before:?}");

    holder.stop();
    let stopped = Instant::now();
    tokio::time::sleep(Duration::from_secs(8)).await;
    let who = observer
        .identity_of(id)
        .await
        .unwrap()
        .expect("a stopped holder's identity stays while its hold may live");
    eprintln!(
        "{:?} after SIGSTOP: silent for {:?}",
        stopped.elapsed(),
        who.silent_for
    );
    assert_eq!(Some(who.pid), holder.pid());
    assert_eq!(who.host, before.host);
    assert!(!who.is_live());
    assert!(who.silent_for >= Duration::from_secs(7), "{who:?}");
    assert!(
        who.silent_for <= stopped.elapsed() + Duration::from_secs(2),
        "{who:?}"
    );
    assert!(
        who.acquired_at("silent:renewed", &who.hold_sites[0].owner)
            .is_some()
    );
    let listed = observer.clients().await.unwrap();
    let listed = listed.iter().find(|c| c.id == id).expect("listed");
    assert!(listed.silent_for >= Duration::from_secs(7), "{listed:?}");

    let pid = who.pid.to_string();
    let clients = tool(&server, &["clients"]).await;
    eprintln!("{clients}");
    assert!(clients.contains("silent for"), "{clients}");
    let line = clients.lines().find(|l| l.contains("silent for")).unwrap();
    assert!(line.contains(&pid) && line.contains(&who.host), "{line}");
    assert!(clients.contains("holds silent:renewed"), "{clients}");
    let json: serde_json::Value =
        serde_json::from_str(&tool(&server, &["clients", "--json"]).await).unwrap();
    let entry = json["clients"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id.to_string())
        .expect("the silent client in JSON");
    assert!(entry["silent_for_ms"].as_u64().unwrap() >= 7_000, "{entry}");
    assert_eq!(entry["holds"].as_array().unwrap().len(), 1, "{entry}");
    let inspect = tool(&server, &["inspect", "silent:renewed"]).await;
    assert!(inspect.contains("silent for"), "{inspect}");
    assert!(inspect.contains(&format!("pid {pid}")), "{inspect}");
    let list = tool(&server, &["list"]).await;
    assert!(list.contains("(silent "), "{list}");

    holder.resume();
    let beats = eventually(Duration::from_secs(4), || async {
        let who = observer.identity_of(id).await.unwrap().unwrap();
        who.is_live() && who.silent_for < Duration::from_secs(2)
    })
    .await;
    assert!(beats, "it does not beat again after SIGCONT");
}

/// A stopped holder of a fixed lease (6 s, no watchdog): found while its lease runs and a
/// little after (what it held at its last beat still named), gone once the lease cannot live
/// (what was left of it at the last beat, 2% and 5 s, rounded up to whole seconds).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_holder_of_a_fixed_lease_goes_after_its_lease() {
    let server = RedisServer::start();
    let (mut holder, id) = holder(&server, "silent:fixed", 6_000, "fixed").await;
    let granted = Instant::now();
    let observer = support::client(&server).await;
    published(&observer, id, "silent:fixed").await;
    holder.stop();
    let stopped = granted.elapsed();
    tokio::time::sleep(Duration::from_secs(7).saturating_sub(granted.elapsed())).await;
    let who = observer
        .identity_of(id)
        .await
        .unwrap()
        .expect("kept a while after the fixed lease");
    assert_eq!(Some(who.pid), holder.pid());
    assert!(who.silent_for >= Duration::from_secs(7) - stopped - Duration::from_millis(300));
    assert!(!who.is_live(), "{who:?}");
    let clients = tool(&server, &["clients"]).await;
    eprintln!("{clients}");
    assert!(clients.contains("silent for"), "{clients}");
    assert!(
        clients.contains("held silent:fixed at its last beat"),
        "{clients}"
    );
    let gone = eventually(
        Duration::from_secs(14).saturating_sub(granted.elapsed()),
        || async { observer.identity_of(id).await.unwrap().is_none() },
    )
    .await;
    assert!(gone, "still there {:?} after the grant", granted.elapsed());
    eprintln!(
        "stopped {stopped:?}, gone {:?} after the grant",
        granted.elapsed()
    );
    holder.kill().await;
}

/// A killed holder with a 2 s watchdog: its identity outlives the old 5 s (it may hold for 2 s
/// more after its last beat) and is gone once that lease cannot live (2 s + 2% + 5 s, rounded
/// to 8 s, after its last beat).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holder_goes_once_its_lease_cannot_live() {
    let server = RedisServer::start();
    let (mut holder, id) = holder(&server, "dead:short", 2_000, "identity").await;
    let observer = support::client(&server).await;
    published(&observer, id, "dead:short").await;
    holder.kill().await;
    let killed = Instant::now();
    tokio::time::sleep(Duration::from_millis(5_500)).await;
    let who = observer.identity_of(id).await.unwrap();
    let who = who.expect("still there 5.5 s after the kill: its lease might have lived");
    assert!(who.silent_for >= Duration::from_millis(5_000), "{who:?}");
    let gone = eventually(Duration::from_secs(4), || async {
        observer.identity_of(id).await.unwrap().is_none()
    })
    .await;
    assert!(gone, "still there {:?} after the kill", killed.elapsed());
    eprintln!("gone {:?} after the kill", killed.elapsed());
    assert!(
        killed.elapsed() >= Duration::from_secs(6),
        "{:?}",
        killed.elapsed()
    );
    assert!(!observer.clients().await.unwrap().iter().any(|c| c.id == id));
}

/// A client that held nothing goes 5 s after its last beat, as before; silent meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_client_still_goes_5_s_after_it_dies() {
    let server = RedisServer::start();
    let mut idle = HolderProcess::spawn(&server, "unused", 2_000, "idle");
    let line = idle.line(Duration::from_secs(10)).await;
    let id: uuid::Uuid = line.strip_prefix("ID ").unwrap().parse().unwrap();
    let observer = support::client(&server).await;
    assert!(observer.identity_of(id).await.unwrap().is_some());
    idle.kill().await;
    let killed = Instant::now();
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    let who = observer.identity_of(id).await.unwrap();
    let who = who.expect("there until 5 s after its last beat");
    assert!(who.silent_for >= Duration::from_millis(2_500), "{who:?}");
    assert!(!who.is_live(), "{who:?}");
    let gone = eventually(Duration::from_millis(3_500), || async {
        observer.identity_of(id).await.unwrap().is_none()
    })
    .await;
    assert!(gone, "still there {:?} after the kill", killed.elapsed());
    eprintln!("gone {:?} after the kill", killed.elapsed());
}
