//! A fenced lock guarding a store that refuses writes with an older token: the holder whose
//! lease ran out is refused once a newer holder has written.
//!
//! Run with `cargo run --example fenced` (uses `REDIS_URL`, or starts its own redis-server).

#[path = "../tests/support/server.rs"]
mod server;

use std::sync::Mutex;
use std::time::Duration;

/// A store that remembers the highest token it has seen and refuses older ones.
#[derive(Default)]
struct Store {
    highest: Mutex<u64>,
}

impl Store {
    fn write(&self, token: u64, what: &str) -> bool {
        let mut highest = self.highest.lock().unwrap();
        if token < *highest {
            println!(
                "store: refused `{what}` with stale token {token} (seen {})",
                *highest
            );
            return false;
        }
        *highest = token;
        println!("store: wrote `{what}` with token {token}");
        true
    }
}

#[tokio::main]
async fn main() -> ferrisson::Result<()> {
    let (_server, url) = server::env_or_temporary();
    let client = ferrisson::Client::connect(&url).await?;
    let store = Store::default();

    let slow = client.get_fenced_lock("ledger");
    let (old_token, old_guard) = slow
        .lock_and_get_token_with_lease(Duration::from_millis(200))
        .await?;
    store.write(old_token, "slow holder, first write");
    tokio::time::sleep(Duration::from_millis(300)).await; // a long pause: the lease runs out
    println!("slow holder's lease lost: {}", old_guard.is_lost());

    let fast = client.get_fenced_lock("ledger");
    let (new_token, new_guard) = fast.lock_and_get_token().await?;
    store.write(new_token, "new holder");
    store.write(old_token, "slow holder, after its pause");
    new_guard.unlock().await?;
    println!(
        "stale unlock: {}",
        old_guard
            .unlock()
            .await
            .map(|_| "ok".into())
            .unwrap_or_else(|e| e.to_string())
    );
    println!("last token handed out: {:?}", fast.token().await?);
    Ok(())
}
