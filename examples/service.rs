//! A web-style service: application state shared by every request task (an `Arc<AppState>`
//! holding the client and lock handles), each request locking the order it changes. Requests
//! for one order take turns, whatever handle they share; requests for other orders run at once.
//!
//! Run with `cargo run --example service` (uses `REDIS_URL`, or starts its own redis-server).

#[path = "../tests/support/server.rs"]
mod server;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What every request handler gets: built once at start-up, shared by all.
struct AppState {
    locks: ferrisson::Client,
    /// The orders, as the database would hold them (here in memory), with the last token that
    /// wrote each one: a write with an older token is refused.
    orders: Mutex<HashMap<u32, (u64, u32)>>,
    /// Requests inside an order's critical section right now, per order (to show they never
    /// overlap).
    inside: Mutex<HashMap<u32, usize>>,
    overlaps: AtomicUsize,
}

/// One request: add `amount` to order `id`, read-modify-write under the order's lock.
async fn add_to_order(state: Arc<AppState>, id: u32, amount: u32) -> ferrisson::Result<u32> {
    let lock = state.locks.get_lock(&format!("order:{id}"));
    lock.with_lock(|token| async move {
        {
            let mut inside = state.inside.lock().unwrap();
            let n = inside.entry(id).or_default();
            *n += 1;
            if *n > 1 {
                state.overlaps.fetch_add(1, Ordering::SeqCst);
            }
        }
        let total = state.orders.lock().unwrap().get(&id).map_or(0, |o| o.1);
        tokio::time::sleep(Duration::from_millis(2)).await; // the database round trips
        let total = total + amount;
        {
            let mut orders = state.orders.lock().unwrap();
            let seen = orders.get(&id).map_or(0, |o| o.0);
            assert!(token > seen, "a write with an older token would be refused");
            orders.insert(id, (token, total));
        }
        *state.inside.lock().unwrap().get_mut(&id).unwrap() -= 1;
        total
    })
    .await
}

#[tokio::main]
async fn main() -> ferrisson::Result<()> {
    let (_server, url) = server::env_or_temporary();
    let state = Arc::new(AppState {
        locks: ferrisson::Client::connect(&url).await?,
        orders: Mutex::default(),
        inside: Mutex::default(),
        overlaps: AtomicUsize::new(0),
    });
    // 120 requests over 3 orders, all at once, as a server's request tasks would run.
    let mut requests = Vec::new();
    for n in 0..120u32 {
        let state = state.clone();
        requests.push(tokio::spawn(add_to_order(state, n % 3, 1)));
    }
    for request in requests {
        request.await.expect("request task")?;
    }
    let orders = state.orders.lock().unwrap().clone();
    for id in 0..3 {
        println!(
            "order {id}: total {} (last token {})",
            orders[&id].1, orders[&id].0
        );
        assert_eq!(orders[&id].1, 40, "every request's change is there");
    }
    let overlaps = state.overlaps.load(Ordering::SeqCst);
    println!("requests inside one order's section at once: {overlaps}");
    assert_eq!(overlaps, 0);
    let state = Arc::try_unwrap(state).ok().expect("every request is done");
    state.locks.close().await;
    Ok(())
}
