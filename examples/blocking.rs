//! A batch job on plain threads, with no async runtime in sight: four worker threads share a
//! queue of invoices. Each invoice has a lock of its own (`invoice:<n>`), so a second run of the
//! job on another machine would never bill one twice; a semaphore keeps at most two calls to the
//! (pretend) payment provider in flight fleet-wide; a count-down latch tells the coordinator
//! when every invoice is done. One worker stalls in blocking work for three watchdog leases,
//! and keeps its lock, renewed by the client's own thread. Ctrl-C (or SIGTERM) drains the job
//! (`close_on_signal`): from then on no worker takes a new lock or permit (`Error::Draining` ends
//! it), the invoice locks held go back as their workers stop (or when the drain grace runs out;
//! at once on a second Ctrl-C), and the job exits, so a rerun does not wait for leases. (The provider semaphore's permits are counts, not holds: an `RSemaphore`
//! permit taken when the job is stopped stays taken; `RPermitExpirableSemaphore` is the one whose
//! permits come back.)
//!
//! Run with `cargo run --example blocking` (uses `REDIS_URL`, or starts its own redis-server).

#[path = "../tests/support/server.rs"]
mod server;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferrisson::blocking::Client;

const INVOICES: u64 = 12;
const WORKERS: usize = 4;

fn main() -> ferrisson::Result<()> {
    let (_server, url) = server::env_or_temporary();
    let watchdog = Duration::from_millis(500);
    let client = Client::builder()
        .url(&url)
        // Short, to show it: invoice 5 takes three leases.
        .watchdog_timeout(watchdog)
        .build()?;
    // One step for a clean Ctrl-C: the worker threads only meet `Error::Draining` at their next
    // acquisition.
    client.close_on_signal()?;
    let run = client.id().simple().to_string()[..8].to_owned();
    let provider = client.get_semaphore(&format!("blocking-example:{run}:provider"));
    provider.try_set_permits(2)?;
    let done = client.get_count_down_latch(&format!("blocking-example:{run}:done"));
    done.try_set_count(INVOICES)?;

    let queue: Arc<Mutex<VecDeque<u64>>> = Arc::new(Mutex::new((1..=INVOICES).collect()));
    // The billing store: refuses a write whose token is not above the invoice's last one.
    let store = Arc::new(Mutex::new(std::collections::HashMap::<u64, u64>::new()));
    let started = Instant::now();
    let mut workers = Vec::new();
    for w in 0..WORKERS {
        let (client, queue, store) = (client.clone(), queue.clone(), store.clone());
        let (provider, done) = (provider.clone(), done.clone());
        let run = run.clone();
        workers.push(std::thread::spawn(move || -> ferrisson::Result<()> {
            loop {
                let Some(invoice) = queue.lock().unwrap().pop_front() else {
                    return Ok(());
                };
                let lock = client.get_lock(&format!("blocking-example:{run}:invoice:{invoice}"));
                let guard = lock.lock()?;
                let token = guard.fencing_token();
                provider.acquire(1)?;
                let work = if invoice == 5 {
                    watchdog * 3 // a slow provider: blocking work for three leases
                } else {
                    Duration::from_millis(30)
                };
                std::thread::sleep(work);
                provider.release(1)?;
                assert!(!guard.is_lost(), "the lease ran out under a sleeping thread");
                {
                    let mut store = store.lock().unwrap();
                    let last = store.entry(invoice).or_insert(0);
                    assert!(token > *last, "a stale holder's write");
                    *last = token;
                }
                guard.unlock()?;
                let left = done.count_down()?;
                println!(
                    "{:>6.0} ms  worker {w} billed invoice {invoice:>2} (token {token}, took {:>4.0} ms), {left} left",
                    started.elapsed().as_secs_f64() * 1e3,
                    work.as_secs_f64() * 1e3,
                );
            }
        }));
    }
    // The coordinator blocks until the latch opens.
    if !done.await_for(Duration::from_secs(30))? {
        eprintln!("still {} invoices to go after 30 s", done.get_count()?);
        std::process::exit(1);
    }
    for worker in workers {
        worker.join().expect("a worker panicked")?;
    }
    println!(
        "all {INVOICES} invoices billed in {:.0} ms by {WORKERS} threads",
        started.elapsed().as_secs_f64() * 1e3
    );
    let left = client.close()?;
    assert!(left.is_empty(), "not released: {left:?}");
    Ok(())
}
