//! A worker killed with `kill -9` while it holds a lock: the kernel closes its connections,
//! Redis drops its presence subscription, and the worker waiting for the lock takes it over
//! about 2 s later, with a higher fencing token, rather than at the end of the 30 s lease. The
//! killed worker is this same program, started again as a child process with `--hold`.
//!
//! Run with `cargo run --example crash` (uses `REDIS_URL`, or starts its own redis-server).

#[path = "../tests/support/server.rs"]
mod server;

use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::AsyncBufReadExt;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

const LOCK: &str = "jobs:nightly";

/// The child: takes the lock, says so, and holds it until it is killed.
async fn hold(url: &str) -> Result<()> {
    let client = ferrisson::Client::connect(url).await?;
    let guard = client.get_lock(LOCK).lock().await?;
    println!("LOCKED {}", guard.fencing_token());
    guard.lost().await;
    Err("the worker's hold was lost".into())
}

#[tokio::main]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if let [_, flag, url] = args.as_slice()
        && flag == "--hold"
    {
        return hold(url).await;
    }
    let (_server, url) = server::env_or_temporary();
    let mut worker = tokio::process::Command::new(std::env::current_exe()?)
        .args(["--hold", &url])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let mut lines = tokio::io::BufReader::new(worker.stdout.take().ok_or("no stdout")?).lines();
    let line = lines.next_line().await?.ok_or("the worker ended")?;
    let held: u64 = line
        .strip_prefix("LOCKED ")
        .and_then(|token| token.parse().ok())
        .ok_or_else(|| format!("the worker said {line:?}"))?;
    println!(
        "worker {} holds {LOCK} (token {held})",
        worker.id().unwrap_or(0)
    );

    let client = ferrisson::Client::connect(&url).await?;
    let waiting = {
        let lock = client.get_lock(LOCK);
        tokio::spawn(async move {
            let guard = lock.lock().await?;
            let token = guard.fencing_token();
            guard.unlock().await?;
            Ok::<_, ferrisson::Error>(token)
        })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    println!("kill -9 of the worker, which still holds the lock");
    worker.start_kill()?;
    worker.wait().await?;
    let killed = Instant::now();
    let token = tokio::time::timeout(Duration::from_secs(10), waiting).await???;
    let took = killed.elapsed();
    println!(
        "the waiting worker took the lock over {took:.1?} after the kill (token {token} > {held})"
    );
    assert!(token > held, "a new token");
    assert!(took < Duration::from_secs(5), "taken over after {took:?}");
    client.close().await;
    Ok(())
}
