//! Leader election: three instances campaign for one lock; the leader runs the jobs while it
//! holds it, stops the moment `lost()` says its hold is gone, and stamps every write with its
//! fencing token, so the store refuses a deposed leader's late write. Here an operator forces the
//! lock open twice; each time another instance takes over with a higher token.
//!
//! Run with `cargo run --example leader` (uses `REDIS_URL`, or starts its own redis-server).

#[path = "../tests/support/server.rs"]
mod server;

use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The resource the leader writes to: it keeps the highest token seen and refuses older ones.
#[derive(Default)]
struct Store {
    highest: Mutex<u64>,
    refused: Mutex<usize>,
    terms: Mutex<Vec<(usize, u64)>>,
}

impl Store {
    fn write(&self, instance: usize, token: u64) -> bool {
        let mut highest = self.highest.lock().unwrap();
        if token < *highest {
            *self.refused.lock().unwrap() += 1;
            println!("store: refused instance {instance}'s write with deposed token {token}");
            return false;
        }
        if token > *highest {
            self.terms.lock().unwrap().push((instance, token));
        }
        *highest = token;
        true
    }
}

/// One instance: campaign, lead until the hold is lost, campaign again.
async fn campaign(instance: usize, client: ferrisson::Client, store: Arc<Store>) {
    let lock = client.get_lock("jobs:leader");
    loop {
        let Ok(guard) = lock.lock().await else {
            return; // the client was closed
        };
        let token = guard.fencing_token();
        println!("instance {instance} leads (token {token})");
        loop {
            tokio::select! {
                () = guard.lost() => {
                    println!("instance {instance} lost the lead: stopping its jobs");
                    break;
                }
                () = tokio::time::sleep(Duration::from_millis(50)) => {
                    store.write(instance, token);
                }
            }
        }
        // A write that was already on its way when the lead was lost arrives late: refused.
        store.write(instance, token);
        let _ = guard.unlock().await;
    }
}

#[tokio::main]
async fn main() -> ferrisson::Result<()> {
    let (_server, url) = server::env_or_temporary();
    let store = Arc::new(Store::default());
    let mut instances = Vec::new();
    for instance in 0..3 {
        // A short watchdog lease, so a loss shows within a fraction of a second.
        let client = ferrisson::Client::builder()
            .url(&url)
            .watchdog_timeout(Duration::from_millis(600))
            .build()
            .await?;
        instances.push(tokio::spawn(campaign(instance, client, store.clone())));
    }
    let operator = ferrisson::Client::connect(&url).await?;
    for _ in 0..2 {
        tokio::time::sleep(Duration::from_millis(400)).await;
        println!("operator: forcing the leader out");
        operator.get_lock("jobs:leader").force_unlock().await?;
    }
    tokio::time::sleep(Duration::from_millis(600)).await;
    for instance in &instances {
        instance.abort();
    }
    let terms = store.terms.lock().unwrap().clone();
    println!("terms (instance, token): {terms:?}");
    assert!(terms.len() >= 3, "the lead changed hands twice");
    assert!(
        terms.windows(2).all(|t| t[0].1 < t[1].1),
        "tokens only go up"
    );
    assert!(
        *store.refused.lock().unwrap() >= 1,
        "a deposed leader's write was refused"
    );
    operator.close().await;
    Ok(())
}
