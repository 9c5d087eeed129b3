//! The `ferrisson` tool end to end: the built binary run as a subprocess against real servers.
//! `inspect` (human and JSON, holders of two clients named by their identity, exit codes free
//! and held), `list` (patterns, several kinds, one server and a Cluster), `clients` (who is
//! alive and what each holds), where a holder process took its hold and its wait for itself
//! (`clients` and `inspect`), `force-unlock` (a holder process told within about a second,
//! the refusal without a terminal, the exit codes), names with control characters shown
//! escaped, `--no-identity` (no identity of the tool's own, for an ACL user that may not write
//! one), and bad input.

#![cfg(feature = "cli")]

mod support;

use std::process::Output;
use std::time::{Duration, Instant};

use ferrisson::Client;
use redis::AsyncCommands;
use serde_json::Value;
use support::cluster::RedisCluster;
use support::{HolderProcess, RedisServer};

/// Runs the tool with `args` (stdin empty: no terminal), at most 20 s.
async fn run(args: &[&str]) -> Output {
    run_env(args, &[]).await
}

/// `run` with the tool's environment variables unset but `env`'s.
async fn run_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_ferrisson"))
        .args(args)
        .env_remove("FERRISSON_URL")
        .env_remove("FERRISSON_USERNAME")
        .env_remove("FERRISSON_PASSWORD")
        .env_remove("FERRISSON_NO_IDENTITY")
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(Duration::from_secs(20), child)
        .await
        .expect("the tool ends within 20 s")
        .expect("the tool runs")
}

/// `run` on `server`'s URL.
async fn on(server: &RedisServer, args: &[&str]) -> Output {
    let url = server.url();
    let mut all = vec!["--url", url.as_str()];
    all.extend_from_slice(args);
    run(&all).await
}

fn code(out: &Output) -> i32 {
    out.status.code().expect("an exit code, not a signal")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("JSON expected ({e}): {}", stdout(out)))
}

async fn app(server: &RedisServer, name: &str) -> Client {
    support::builder(server)
        .app_name(name)
        .build()
        .await
        .expect("a client of the test server")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_names_holders_of_two_clients_and_exits_by_state() {
    let server = RedisServer::start();
    let (billing, reports) = (app(&server, "billing").await, app(&server, "reports").await);

    let free = on(&server, &["inspect", "orders:42"]).await;
    assert_eq!(code(&free), 0, "{}", stderr(&free));
    assert!(
        stdout(&free).contains("nothing under this name"),
        "{}",
        stdout(&free)
    );

    let guard = billing.get_lock("orders:42").lock().await.unwrap();
    let held = on(&server, &["inspect", "orders:42"]).await;
    assert_eq!(code(&held), 1, "held: {}", stderr(&held));
    let text = stdout(&held);
    let pid = std::process::id().to_string();
    assert!(text.contains("lock (RLock or RMutex), held"), "{text}");
    assert!(text.contains("billing@") && text.contains(&pid), "{text}");
    assert!(
        text.contains(&billing.id().to_string()) && text.contains("left"),
        "{text}"
    );

    let read = on(&server, &["inspect", "orders:42", "--json"]).await;
    assert_eq!(code(&read), 1);
    let snapshot = json(&read);
    assert_eq!(snapshot["object"], "lock");
    assert_eq!(snapshot["holders"][0]["client"], billing.id().to_string());
    assert_eq!(snapshot["holders"][0]["identity"]["app"], "billing");
    assert!(snapshot["lease_ms"].as_u64().is_some_and(|ms| ms > 0));
    guard.unlock().await.unwrap();
    assert_eq!(code(&on(&server, &["inspect", "orders:42"]).await), 0);

    // Readers of two clients.
    let catalog = |c: &Client| c.get_read_write_lock("catalog").read_lock();
    let read_b = catalog(&billing).lock().await.unwrap();
    let read_r = catalog(&reports).lock().await.unwrap();
    let both = on(&server, &["inspect", "catalog"]).await;
    assert_eq!(code(&both), 1);
    let text = stdout(&both);
    assert!(text.contains("held for reading"), "{text}");
    assert!(
        text.contains("billing@") && text.contains("reports@"),
        "{text}"
    );
    let both = json(&on(&server, &["inspect", "catalog", "--json"]).await);
    assert_eq!(both["object"], "read_write_lock");
    assert_eq!(both["mode"], "read");
    let mut apps: Vec<&str> = both["readers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["identity"]["app"].as_str().unwrap())
        .collect();
    apps.sort_unstable();
    assert_eq!(apps, ["billing", "reports"]);

    // Read as a kind it is not: exit 4, one line saying what to do.
    let wrong = on(&server, &["inspect", "catalog", "--kind", "semaphore"]).await;
    assert_eq!(code(&wrong), 4, "{}", stderr(&wrong));
    assert_eq!(stderr(&wrong).lines().count(), 1, "{}", stderr(&wrong));
    assert!(
        stderr(&wrong).contains("without --kind"),
        "{}",
        stderr(&wrong)
    );
    let as_rw = on(&server, &["inspect", "catalog", "--kind", "rwlock"]).await;
    assert_eq!(code(&as_rw), 1);
    let malformed = on(&server, &["inspect", "a{"]).await;
    assert_eq!(code(&malformed), 2, "{}", stderr(&malformed));
    assert!(
        stderr(&malformed).contains("unclosed"),
        "{}",
        stderr(&malformed)
    );

    read_b.unlock().await.unwrap();
    read_r.unlock().await.unwrap();
    let latch = billing.get_count_down_latch("ready");
    assert!(latch.try_set_count(2).await.unwrap());
    let count = on(&server, &["inspect", "ready", "--kind", "latch"]).await;
    assert_eq!(code(&count), 0, "a latch has no holder");
    assert!(
        stdout(&count).contains("count        2"),
        "{}",
        stdout(&count)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_shows_every_kind_and_narrows_by_pattern() {
    let server = RedisServer::start();
    let (billing, reports) = (app(&server, "billing").await, app(&server, "reports").await);
    let lock = billing.get_lock("jobs:lock").lock().await.unwrap();
    let write = reports
        .get_read_write_lock("jobs:rw")
        .write_lock()
        .lock()
        .await
        .unwrap();
    let fair = billing.get_fair_lock("jobs:fair").lock().await.unwrap();
    let waiting = reports.get_fair_lock("jobs:fair");
    let waiter = tokio::spawn(async move { waiting.lock().await.unwrap().unlock().await });
    assert!(
        support::eventually(Duration::from_secs(5), || async {
            billing
                .get_fair_lock("jobs:fair")
                .snapshot()
                .await
                .unwrap()
                .queue
                .len()
                == 1
        })
        .await
    );
    let semaphore = billing.get_semaphore("jobs:slots");
    assert!(semaphore.try_set_permits(3).await.unwrap());
    let mut raw = server.raw().await;
    let _: () = raw.set("other:counter", 7).await.unwrap();

    let all = on(&server, &["list"]).await;
    assert_eq!(code(&all), 0, "{}", stderr(&all));
    let text = stdout(&all);
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("NAME") && lines[0].contains("HELD BY"),
        "{text}"
    );
    let line = |name: &str| {
        lines
            .iter()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no line for {name}:\n{text}"))
            .to_string()
    };
    assert!(line("jobs:lock").contains("billing@"), "{text}");
    assert!(line("jobs:rw").contains("rwlock/w") && line("jobs:rw").contains("w:reports@"));
    let fair_line = line("jobs:fair");
    assert!(
        fair_line.contains("fair") && fair_line.contains("billing@"),
        "{fair_line}"
    );
    assert!(
        fair_line.split_whitespace().nth(3) == Some("1"),
        "one waiter queued: {fair_line}"
    );
    // Nobody waits on it: a semaphore's count looks like any count.
    assert!(line("jobs:slots").contains("count 3"), "{text}");
    assert!(line("other:counter").contains("count 7"), "{text}");

    let narrowed = json(&on(&server, &["list", "jobs:*", "--json"]).await);
    let names: Vec<&str> = narrowed
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["jobs:fair", "jobs:lock", "jobs:rw", "jobs:slots"]);
    assert_eq!(narrowed[1]["holders"][0]["identity"]["app"], "billing");
    assert_eq!(narrowed[2]["writer"]["identity"]["app"], "reports");

    let none = on(&server, &["list", "nothing:*"]).await;
    assert_eq!(
        (code(&none), stdout(&none).trim()),
        (0, "no object matches `nothing:*`")
    );

    fair.unlock().await.unwrap();
    waiter.await.unwrap().unwrap();
    lock.unlock().await.unwrap();
    write.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_on_a_cluster_reads_every_master() {
    let cluster = RedisCluster::start().await;
    let client = Client::builder()
        .cluster(cluster.seed_urls())
        .app_name("sharded")
        .build()
        .await
        .unwrap();
    let names: Vec<String> = (0..12).map(|n| format!("shard:{n}")).collect();
    let mut guards = Vec::new();
    for name in &names {
        guards.push(client.get_lock(name).lock().await.unwrap());
    }
    let seed = cluster.seed_urls()[0].clone();
    let listed = run(&["--cluster", &seed, "list", "shard:*", "--json"]).await;
    assert_eq!(code(&listed), 0, "{}", stderr(&listed));
    let listed = json(&listed);
    let mut expected = names.clone();
    expected.sort();
    let found: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(found, expected);
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["holders"][0]["identity"]["app"] == "sharded")
    );
    let host_port = seed.trim_start_matches("redis://").trim_end_matches('/');
    let text = run(&["--cluster", host_port, "list"]).await;
    assert_eq!(code(&text), 0, "a seed without a scheme: {}", stderr(&text));
    assert_eq!(stdout(&text).lines().count(), 13, "{}", stdout(&text));
    for guard in guards {
        guard.unlock().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_lists_who_is_alive_and_what_each_holds() {
    let server = RedisServer::start();
    let (billing, reports) = (app(&server, "billing").await, app(&server, "reports").await);
    let a = billing.get_lock("invoices").lock().await.unwrap();
    let b = reports
        .get_read_write_lock("ledger")
        .write_lock()
        .lock()
        .await
        .unwrap();
    // reports waits in billing's fair queue.
    let first = billing.get_fair_lock("print").lock().await.unwrap();
    let queued = reports.get_fair_lock("print");
    let in_line = tokio::spawn(async move { queued.lock().await.unwrap().unlock().await });
    assert!(
        support::eventually(Duration::from_secs(5), || async {
            billing
                .get_fair_lock("print")
                .snapshot()
                .await
                .unwrap()
                .queue
                .len()
                == 1
        })
        .await
    );
    // A hold of a client that is gone: a lock hash by hand, for a client id nobody records.
    let ghost = "0c4a6f52-2f43-4d4b-9d3a-2f0e8c1b7a11";
    let mut raw = server.raw().await;
    let _: () = raw.hset("stale", format!("{ghost}:3"), 1).await.unwrap();

    let listed = json(&on(&server, &["clients", "--json"]).await);
    let clients = listed["clients"].as_array().unwrap();
    let find = |app: &str| {
        clients
            .iter()
            .find(|c| c["app"] == app)
            .unwrap_or_else(|| panic!("no {app} in {listed:#}"))
    };
    assert_eq!(find("billing")["id"], billing.id().to_string());
    assert_eq!(find("billing")["pid"], std::process::id());
    assert_eq!(find("billing")["holds"][0]["name"], "invoices");
    assert_eq!(find("reports")["holds"][0]["name"], "ledger");
    assert_eq!(find("reports")["holds"][0]["side"], "write");
    assert_eq!(find("reports")["waits"][0]["name"], "print");
    assert_eq!(find("reports")["waits"][0]["how"], "in line, 1 of 1");
    assert_eq!(find("ferrisson-cli")["this"], true);
    assert_eq!(listed["unknown_holders"][0]["client"], ghost);
    assert_eq!(listed["unknown_holders"][0]["name"], "stale");

    let text = on(&server, &["clients"]).await;
    assert_eq!(code(&text), 0);
    let text = stdout(&text);
    assert!(text.starts_with("CLIENT"), "{text}");
    let after = |app: &str| text.split(app).nth(1).unwrap_or("").lines().nth(1);
    assert!(
        after("billing").is_some_and(|l| l.contains("holds invoices (lock")),
        "{text}"
    );
    assert!(
        after("reports").is_some_and(|l| l.contains("holds ledger (rwlock/w, write")),
        "{text}"
    );
    assert!(
        text.contains(&format!("{ghost}:3 holds stale (lock")),
        "{text}"
    );
    assert!(text.contains("ferrisson-cli (this)"), "{text}");
    a.unlock().await.unwrap();
    b.unlock().await.unwrap();
    first.unlock().await.unwrap();
    in_line.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_and_inspect_say_where_holds_were_taken_and_who_waits_for_itself() {
    let server = RedisServer::start();
    // A process that holds `orders` and calls lock() again in the same task, the Java way.
    let mut holder = HolderProcess::spawn(&server, "orders", 30_000, "self-wait");
    holder.locked(Duration::from_secs(10)).await;
    let places = holder.line(Duration::from_secs(5)).await;
    let lines: Vec<&str> = places.strip_prefix("AT ").unwrap().split(' ').collect();
    let held_at = format!("tests/bin/holder.rs:{}:", lines[0]);
    let called_at = format!("tests/bin/holder.rs:{}:", lines[1]);
    // Its identity says so once the hold has lived a second and the wait 200 ms: a beat or two.
    let client = support::client(&server).await;
    let said = support::eventually(Duration::from_secs(8), || async {
        let all = client.clients().await.unwrap();
        all.iter()
            .any(|c| !c.self_waits.is_empty() && !c.hold_sites.is_empty())
    });
    assert!(said.await, "{:#?}", client.clients().await.unwrap());

    let text = stdout(&on(&server, &["clients"]).await);
    let line_of = |what: &str| {
        text.lines()
            .find(|l| l.contains(what))
            .unwrap_or_else(|| panic!("no `{what}` in {text}"))
            .to_owned()
    };
    let holds = line_of("holds orders (lock");
    assert!(holds.contains(&format!("acquired at {held_at}")), "{text}");
    let waits = line_of("waits for a hold of its own task: orders");
    assert!(waits.contains(&format!("held at {held_at}")), "{text}");
    assert!(waits.contains(&format!("waiting at {called_at}")), "{text}");
    assert!(waits.contains(", for "), "{text}");

    let listed = json(&on(&server, &["clients", "--json"]).await);
    let me = listed["clients"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["app"] == "ferrisson-test-holder")
        .unwrap_or_else(|| panic!("{listed:#}"));
    let starts = |v: &Value, with: &str| v.as_str().is_some_and(|s| s.starts_with(with));
    assert!(starts(&me["holds"][0]["acquired_at"], &held_at), "{me:#}");
    let wait = &me["self_waits"][0];
    assert_eq!(wait["lock"], "orders");
    assert!(starts(&wait["held_at"], &held_at), "{me:#}");
    assert!(starts(&wait["called_at"], &called_at), "{me:#}");
    assert_eq!(wait["thread"], false);
    assert!(wait["waited_ms"].as_u64().unwrap() >= 200, "{me:#}");

    let shown = on(&server, &["inspect", "orders"]).await;
    assert_eq!(code(&shown), 1, "held");
    let shown = stdout(&shown);
    assert!(shown.contains(&format!("acquired at {held_at}")), "{shown}");
    let snapshot = json(&on(&server, &["inspect", "orders", "--json"]).await);
    assert!(
        starts(&snapshot["holders"][0]["acquired_at"], &held_at),
        "{snapshot:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_tells_the_holder_process_promptly() {
    let server = RedisServer::start();
    let mut holder = HolderProcess::spawn(&server, "stuck", 30_000, "lock");
    holder.locked(Duration::from_secs(10)).await;

    // No terminal to ask on, no --yes: refused, nothing changed.
    let refused = on(&server, &["force-unlock", "stuck"]).await;
    assert_eq!(code(&refused), 5, "{}", stderr(&refused));
    let said = stderr(&refused);
    assert_eq!(said.lines().count(), 1, "{said}");
    assert!(
        said.contains("ferrisson-test-holder@") && said.contains("--yes"),
        "{said}"
    );
    let client = support::client(&server).await;
    assert!(client.get_lock("stuck").is_locked().await.unwrap());

    // The unlock happens before the tool ends: the holder is told within about a second of it
    // (its client's heartbeat looks at every hold once a second). Measured from the tool's
    // exit, so a slow start of the tool on a loaded machine does not count; the bound is the
    // heartbeat and generous slack for a loaded 2-core CI machine.
    let started = Instant::now();
    let forced = on(&server, &["force-unlock", "stuck", "--yes"]).await;
    let ended = Instant::now();
    assert_eq!(code(&forced), 0, "{}", stderr(&forced));
    assert!(stdout(&forced).contains("force-unlocked stuck (lock) held by ferrisson-test-holder@"));
    // The holder's guard reports the hold lost (it then exits with 3).
    assert_eq!(holder.exit_code(Duration::from_secs(10)).await, Some(3));
    let (since_start, since_end) = (started.elapsed(), ended.elapsed());
    eprintln!(
        "force-unlock -> the holder's lost(): {since_end:?} after the tool ended, \
         {since_start:?} after it started"
    );
    assert!(
        since_end < Duration::from_secs(1) + Duration::from_secs(5),
        "told {since_end:?} after the tool ended"
    );

    let again = on(&server, &["force-unlock", "stuck", "--yes"]).await;
    assert_eq!(code(&again), 1, "nothing held");
    assert!(stdout(&again).contains("not held"));

    // A writer process of a read-write lock, the same way.
    let mut writer = HolderProcess::spawn(&server, "shelf", 30_000, "write");
    writer.locked(Duration::from_secs(10)).await;
    let forced = on(&server, &["force-unlock", "shelf", "-y"]).await;
    assert_eq!(code(&forced), 0, "{}", stderr(&forced));
    assert!(stdout(&forced).contains("(write)"), "{}", stdout(&forced));
    assert_eq!(writer.exit_code(Duration::from_secs(5)).await, Some(3));

    // Not a lock: refused, exit 4.
    let semaphore = client.get_permit_expirable_semaphore("slots");
    assert!(semaphore.try_set_permits(1).await.unwrap());
    let _permit = semaphore.acquire().await.unwrap();
    let refused = on(&server, &["force-unlock", "slots", "--yes"]).await;
    assert_eq!(code(&refused), 4, "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("not a lock"),
        "{}",
        stderr(&refused)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_characters_in_names_are_shown_escaped() {
    let server = RedisServer::start();
    // A name that would retitle the terminal's window and forge a line of the table.
    let evil = "evil\x1b]0;pwned\x07\nforged";
    let shown = r"evil\u{1b}]0;pwned\u{7}\nforged";
    let client = app(&server, "billing\x1b[2J").await;
    let guard = client.get_lock(evil).lock().await.unwrap();
    for (args, expected) in [
        (&["list"][..], format!("\n{shown}  lock ")),
        (&["inspect", evil][..], format!("{shown}: lock (RLock")),
        (&["clients"][..], format!("holds {shown} (lock")),
    ] {
        let out = on(&server, args).await;
        let text = stdout(&out);
        let raw = out.stdout.iter().any(|b| [0x1b, 0x07].contains(b));
        assert!(!raw, "{args:?}: a raw control character in {text:?}");
        assert!(!text.contains("\nforged"), "{args:?}: {text}");
        assert!(text.contains(&expected), "{args:?}: {expected:?}: {text}");
        assert!(text.contains(r"billing\u{1b}[2J"), "{args:?}: {text}");
    }

    // JSON says the name exactly.
    let exact = json(&on(&server, &["list", "--json"]).await);
    assert_eq!(exact[0]["name"], evil);
    assert_eq!(exact[0]["holders"][0]["identity"]["app"], "billing\x1b[2J");
    guard.unlock().await.unwrap();
}

/// The apps `clients --json` lists.
fn apps(listed: &Value) -> Vec<&str> {
    let clients = listed["clients"].as_array().expect("a list of clients");
    clients.iter().filter_map(|c| c["app"].as_str()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_identity_records_none_and_serves_a_user_that_may_not_write_one() {
    let server = RedisServer::start();
    let billing = app(&server, "billing").await;
    let guard = billing.get_lock("app:orders").lock().await.unwrap();

    // The flag, and the environment variable: the tool's client writes no identity, so it is
    // not among the live clients (without either, it is: `ferrisson-cli`, marked `this`).
    let flag = json(&on(&server, &["--no-identity", "clients", "--json"]).await);
    assert_eq!(apps(&flag), ["billing"], "{flag:#}");
    let url = server.url();
    let args = ["--url", url.as_str(), "clients", "--json"];
    let env = json(&run_env(&args, &[("FERRISSON_NO_IDENTITY", "1")]).await);
    assert_eq!(apps(&env), ["billing"], "{env:#}");
    let off = json(&run_env(&args, &[("FERRISSON_NO_IDENTITY", "0")]).await);
    assert!(apps(&off).contains(&"ferrisson-cli"), "{off:#}");

    // An operator's user that may not write an identity: refused without the flag (saying to
    // pass it), served with it. Redis 7 lets it read identities (a read-only selector); a server
    // without selectors (6.2) can only leave them out of its rule, and then `inspect` shows the
    // holders by client id and says why, and the listings say what to grant.
    let (ops, reads_identities) = operator(&server).await;
    let refused = run(&["--url", &ops, "inspect", "app:orders"]).await;
    let said = stderr(&refused);
    assert!(
        code(&refused) == 3 && said.contains("--no-identity"),
        "{said}"
    );
    let as_ops = |args: &'static [&'static str]| {
        let mut all = vec!["--url", ops.as_str(), "--no-identity"];
        all.extend_from_slice(args);
        async move { run(&all).await }
    };
    let inspected = as_ops(&["inspect", "app:orders"]).await;
    let text = stdout(&inspected);
    assert_eq!(code(&inspected), 1, "{text}{}", stderr(&inspected));
    let listed = as_ops(&["list", "app:*"]).await;
    if reads_identities {
        assert!(text.contains("billing@"), "{text}");
        let text = stdout(&listed);
        assert!(
            code(&listed) == 0 && text.contains("\napp:orders "),
            "{text}"
        );
        assert_eq!(
            apps(&json(&as_ops(&["clients", "--json"]).await)),
            ["billing"]
        );
    } else {
        assert!(text.contains(&billing.id().to_string()), "{text}");
        assert!(
            stderr(&inspected).contains("may not read client identities"),
            "{}",
            stderr(&inspected)
        );
        let said = stderr(&listed);
        assert!(
            code(&listed) == 3 && said.contains("~ferrisson_client:*"),
            "{said}"
        );
    }
    guard.unlock().await.unwrap();
}

/// Creates `ops` with the README's rule, identities only readable (Redis 7's selectors), and
/// +scan for listing; its URL, and whether it may read identities: a server without selectors
/// (Redis 6.2) gets the rule without identities instead.
async fn operator(server: &RedisServer) -> (String, bool) {
    let url = format!("redis://ops:ops-pw@127.0.0.1:{}", server.port());
    for read_only in [true, false] {
        if create_operator(server, read_only).await {
            return (url, read_only);
        }
    }
    panic!("the operator's user could not be created even without identities");
}

/// The operator's user, with identities read-only or left out; false when the server refused
/// the rule.
async fn create_operator(server: &RedisServer, read_only: bool) -> bool {
    let readme = include_str!("../README.md");
    let block = readme
        .split("## Running under a Redis ACL user")
        .nth(1)
        .and_then(|section| section.split("```text").nth(1))
        .and_then(|b| b.split("```").next())
        .expect("the README's ACL rule");
    let mut admin = server.raw().await;
    let _: i64 = redis::cmd("ACL")
        .arg("DELUSER")
        .arg("ops")
        .query_async(&mut admin)
        .await
        .unwrap();
    for rule in block
        .lines()
        .filter_map(|l| l.strip_prefix("ACL SETUSER app-locks "))
    {
        let mut cmd = redis::cmd("ACL");
        cmd.arg("SETUSER").arg("ops");
        for token in rule.split_whitespace() {
            match token {
                ">change-me" => cmd.arg(">ops-pw"),
                "~ferrisson_client:*" if read_only => cmd.arg("%R~ferrisson_client:*").arg("+scan"),
                "~ferrisson_client:*" => cmd.arg("+scan"),
                _ => cmd.arg(token),
            };
        }
        if let Err(e) = cmd.query_async::<()>(&mut admin).await {
            eprintln!("the operator's rule was refused ({e}); read_only {read_only}");
            return false;
        }
    }
    true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_says_what_to_do() {
    // An empty name: a usage error, before any connection.
    let empty = run(&["--url", "redis://127.0.0.1:1", "inspect", ""]).await;
    assert_eq!(code(&empty), 2, "{}", stderr(&empty));
    assert!(stderr(&empty).contains("the name is empty"));

    let port = support::server::free_port();
    let url = format!("redis://127.0.0.1:{port}");
    let down = run(&["--url", &url, "--timeout", "2", "list"]).await;
    assert_eq!(code(&down), 3, "{}", stderr(&down));
    let said = stderr(&down);
    assert_eq!(said.lines().count(), 1, "{said}");
    assert!(
        said.starts_with("ferrisson: cannot connect") && said.contains("--url"),
        "{said}"
    );

    for (args, why) in [
        (
            &["--url", "http://127.0.0.1:1", "list"][..],
            "a URL of another scheme",
        ),
        (
            &["--sentinel", "127.0.0.1:1", "list"][..],
            "--sentinel without --master",
        ),
        (
            &["list", "--interval", "1"][..],
            "an option of another command",
        ),
        (&["watch", "--interval", "0"][..], "a zero interval"),
        (&["frobnicate"][..], "no such command"),
    ] {
        let out = run(args).await;
        assert_eq!(code(&out), 2, "{why}: {}", stderr(&out));
        assert!(!stderr(&out).is_empty(), "{why}");
    }

    let help = run(&["--help"]).await;
    assert_eq!(code(&help), 0);
    assert!(stdout(&help).contains("Exit codes:"), "{}", stdout(&help));
}
