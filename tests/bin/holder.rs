//! A process that takes a lock and keeps it until it is killed: the tests kill it with SIGKILL
//! to show a dead holder (or a dead waiter) stops counting within its lease.
//!
//! Usage: `ferrisson-test-holder <redis-url> <lock-name> <ms> [lock|read|write|prefer-write|fair|redlock]`,
//! where `<ms>` is the watchdog timeout and the fair lock queue timeout; for `redlock` the URL is
//! a comma-separated list, one per instance; `permit` takes one permit of the permit-expirable
//! semaphore `<lock-name>` instead. Prints `LOCKED <token>` once it holds the lock; a fair
//! waiter is queued while it waits, and a `prefer-write` waiter (the write side with
//! `RwPolicy::PreferWriters`) keeps its writer mark, living `<ms>`, while it waits. A
//! `<redis-url>` of `cluster=<seed>+<seed>…` connects to a Redis Cluster. The revocable kinds take a lock (`revocable`, `revocable-unheard`) or a permit
//! (`permit-revocable`), print `REVOKED` once a revocation is requested, release, and exit:
//! `revocable-unheard` never listens for the request's message and learns of it from its
//! watchdog's renewals only. `exit-holding` takes the lock and returns from `main` with the
//! guard alive (the last handle's drop flushes its release); `close-then-exit` drops its guard,
//! calls `Client::close` and ends with `std::process::exit`. `blocking` takes the lock through
//! `ferrisson::blocking` on a plain thread that then sleeps. `panic-holding` panics while it
//! holds the lock; `abort-holding` aborts (as `panic = "abort"` would) 100 ms after it took it. The signal kinds install ferrisson's handler before they lock:
//! `signal` and `blocking-signal` call `close_on_signal` (the process ends on SIGINT or
//! SIGTERM); `on-signal` and `blocking-on-signal` call `on_signal`, print `SIGNALLED <signal>
//! <lost|held>` once it resolves (whether the guard, still alive, was told its hold is gone),
//! and then hang, as a shutdown that never finishes would. `identity` prints `ID <client id>`
//! once connected, then holds the lock as `lock` does; `idle` prints it and holds nothing, and
//! `fixed` prints it and holds the lock with a fixed lease of `<ms>` (no watchdog). `self-wait` takes the lock in a task,
//! prints `LOCKED <token>` and `AT <line of the lock()> <line of the second lock()>`, then
//! calls `lock()` again in the same task, the Java way: it waits for itself (warned of after
//! 200 ms), until killed.
//! `drain` (and `blocking-drain`) calls
//! `close_on_signal`, takes `<lock-name>-after`, then runs 2 s of work in `with_lock` on the lock:
//! it prints `LOCKED <token>`, at 1 s tries a new lock (`NEW <outcome>`), and at its end `DONE`;
//! then `RESULT <outcome>` of `with_lock`, and gives `-after` back last (so the end of the
//! drain, which ends the process, comes after what it printed). `FERRISSON_TEST_DRAIN_MS` sets
//! the client's drain grace (the signal kinds' tests of an immediate give-back set 0).

use std::time::Duration;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (urls, name, ms, kind) = match args.as_slice() {
        [_, url, name, ms] => (url, name, ms, "lock"),
        [_, url, name, ms, kind] => (url, name, ms, kind.as_str()),
        _ => fail(
            2,
            "usage: ferrisson-test-holder <redis-url> <lock-name> <ms> [kind]",
        ),
    };
    let ms: u64 = ms
        .parse()
        .unwrap_or_else(|_| fail(2, "<ms> must be a number of milliseconds"));
    if let Some(signal) = kind.strip_prefix("blocking") {
        // The blocking API refuses to run in async code (this `main` is some): a thread of its
        // own, which never returns (it exits the process).
        let (url, name, signal) = (urls.clone(), name.clone(), signal.to_owned());
        let _ = std::thread::spawn(move || hold_blocking(&url, &name, ms, &signal)).join();
        fail(1, "the blocking holder's thread ended");
    }
    let mut clients = Vec::new();
    for url in urls.split(',') {
        // `cluster=<seed>+<seed>…`: one client of a Redis Cluster.
        let builder = match url.strip_prefix("cluster=") {
            Some(seeds) => ferrisson::Client::builder().cluster(seeds.split('+')),
            None => ferrisson::Client::builder().url(url),
        };
        let builder = match drain_grace() {
            Some(grace) => builder.drain_grace(grace),
            None => builder,
        };
        let client = builder
            .watchdog_timeout(Duration::from_millis(ms))
            .fair_lock_queue_timeout(Duration::from_millis(ms))
            .self_wait_warning(Duration::from_millis(200))
            .build()
            .await
            .unwrap_or_else(|e| fail(1, &format!("cannot connect: {e}")));
        clients.push(client);
    }
    if kind == "redlock" {
        let locks = clients.iter().map(|c| c.get_lock(name));
        // The default instance timeout (a twentieth of the lease) is tight for a debug build
        // on a loaded machine; the tests need this holder to get the lock, not to race it.
        let guard = ferrisson::RedLock::new(locks)
            .instance_timeout(Duration::from_millis(250))
            .lock()
            .await
            .unwrap_or_else(|e| fail(1, &format!("cannot lock: {e}")));
        println!("LOCKED {}", guard.fencing_tokens()[0]);
        guard.lost().await;
        fail(3, "lease lost");
    }
    let client = &clients[0];
    if matches!(kind, "identity" | "idle" | "fixed") {
        println!("ID {}", client.id());
    }
    if kind == "idle" {
        std::future::pending::<()>().await;
    }
    if kind == "fixed" {
        let guard = client
            .get_lock(name)
            .lock_with_lease(Duration::from_millis(ms))
            .await
            .unwrap_or_else(|e| fail(1, &format!("cannot lock: {e}")));
        println!("LOCKED {}", guard.fencing_token());
        guard.lost().await;
        fail(3, "lease lost");
    }
    match kind {
        "exit-holding" => {
            let _guard = locked(client, name).await;
            return; // the guard drops, then the clients: as a `main` ending with `?` does
        }
        "abort-holding" => {
            let _guard = locked(client, name).await;
            tokio::time::sleep(Duration::from_millis(100)).await;
            std::process::abort();
        }
        "panic-holding" => {
            let _guard = locked(client, name).await;
            panic!("the holder panics with the guard alive");
        }
        "signal" => {
            client
                .close_on_signal()
                .unwrap_or_else(|e| fail(1, &format!("cannot listen: {e}")));
        }
        "on-signal" => {
            let stop = client
                .on_signal()
                .unwrap_or_else(|e| fail(1, &format!("cannot listen: {e}")));
            let guard = locked(client, name).await;
            let signal = stop.await;
            println!("SIGNALLED {signal} {}", lost_or_held(guard.is_lost()));
            std::future::pending::<()>().await;
        }
        "drain" => {
            client
                .close_on_signal()
                .unwrap_or_else(|e| fail(1, &format!("cannot listen: {e}")));
            let after = client.get_lock(&format!("{name}-after"));
            let after = after
                .lock()
                .await
                .unwrap_or_else(|e| fail(1, &e.to_string()));
            let work = |token| async move {
                println!("LOCKED {token}");
                tokio::time::sleep(Duration::from_secs(1)).await;
                let new = client.get_lock(&format!("{name}-new")).try_lock().await;
                println!("NEW {}", outcome(&new.map(drop)));
                tokio::time::sleep(Duration::from_secs(1)).await;
                println!("DONE");
            };
            let result = client.get_lock(name).with_lock(work).await;
            println!("RESULT {}", outcome(&result));
            after
                .unlock()
                .await
                .unwrap_or_else(|e| fail(1, &e.to_string()));
            std::future::pending::<()>().await;
        }
        "close-then-exit" => {
            let guard = locked(client, name).await;
            drop(guard);
            let left = clients.remove(0).close().await;
            if !left.is_empty() {
                fail(4, &format!("not done: {left:?}"));
            }
            std::process::exit(0);
        }
        "revocable" | "revocable-unheard" => {
            let guard = locked(client, name).await;
            if kind == "revocable" {
                guard.revocation_requested().await;
            } else {
                while !guard.is_revocation_requested() {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            }
            println!("REVOKED");
            guard
                .unlock()
                .await
                .unwrap_or_else(|e| fail(1, &format!("cannot unlock: {e}")));
            return;
        }
        "self-wait" => {
            let lock = client.get_lock(name);
            let waits = tokio::spawn(async move {
                let (guard, held) = (lock.lock().await, line!());
                let guard = guard.unwrap_or_else(|e| fail(1, &format!("cannot lock: {e}")));
                println!("LOCKED {}", guard.fencing_token());
                println!("AT {held} {}", line!() + 1);
                let again = lock.lock().await;
                fail(1, &format!("the second lock() ended: {again:?}"));
            });
            let _ = waits.await;
            fail(1, "the self-waiting task ended");
        }
        "permit-revocable" => {
            let permit = client
                .get_permit_expirable_semaphore(name)
                .acquire()
                .await
                .unwrap_or_else(|e| fail(1, &format!("cannot acquire: {e}")));
            println!("LOCKED {}", permit.fencing_token());
            permit.revocation_requested().await;
            println!("REVOKED");
            permit
                .release()
                .await
                .unwrap_or_else(|e| fail(1, &format!("cannot release: {e}")));
            return;
        }
        _ => {}
    }
    if kind == "permit" {
        let permit = client
            .get_permit_expirable_semaphore(name)
            .acquire()
            .await
            .unwrap_or_else(|e| fail(1, &format!("cannot acquire: {e}")));
        println!("LOCKED {}", permit.fencing_token());
        permit.lost().await;
        fail(3, "permit lost");
    }
    let lock = match kind {
        "lock" | "signal" | "identity" => client.get_lock(name),
        "read" => client.get_read_write_lock(name).read_lock(),
        "write" => client.get_read_write_lock(name).write_lock(),
        "prefer-write" => client
            .get_read_write_lock_with(name, ferrisson::RwPolicy::PreferWriters)
            .write_lock(),
        "fair" => client.get_fair_lock(name),
        other => fail(2, &format!("unknown lock kind {other}")),
    };
    let guard = lock
        .lock()
        .await
        .unwrap_or_else(|e| fail(1, &format!("cannot lock: {e}")));
    println!("LOCKED {}", guard.fencing_token());
    guard.lost().await;
    fail(3, "lease lost");
}

/// The `blocking` kinds: `ferrisson::blocking` on a plain thread takes the lock and sleeps,
/// leaving its lease to the client's thread; `-signal` calls `close_on_signal` first,
/// `-on-signal` calls `on_signal` and checks it between naps.
fn hold_blocking(url: &str, name: &str, ms: u64, signal: &str) -> ! {
    let builder = ferrisson::blocking::Client::builder().url(url);
    let builder = match drain_grace() {
        Some(grace) => builder.drain_grace(grace),
        None => builder,
    };
    let client = builder
        .watchdog_timeout(Duration::from_millis(ms))
        .build()
        .unwrap_or_else(|e| fail(1, &format!("cannot connect: {e}")));
    if signal == "-drain" {
        drain_blocking(&client, name);
    }
    let stop = match signal {
        "" => None,
        "-signal" => {
            client
                .close_on_signal()
                .unwrap_or_else(|e| fail(1, &format!("cannot listen: {e}")));
            None
        }
        "-on-signal" => Some(
            client
                .on_signal()
                .unwrap_or_else(|e| fail(1, &format!("cannot listen: {e}"))),
        ),
        other => fail(2, &format!("unknown lock kind blocking{other}")),
    };
    let guard = client
        .get_lock(name)
        .lock()
        .unwrap_or_else(|e| fail(1, &format!("cannot lock: {e}")));
    println!("LOCKED {}", guard.fencing_token());
    let nap = match stop {
        Some(_) => Duration::from_millis(10),
        None => Duration::from_secs(3600),
    };
    let mut signalled = false;
    loop {
        std::thread::sleep(nap);
        if let Some(signal) = stop.as_ref().and_then(|s| s.received())
            && !signalled
        {
            signalled = true;
            println!("SIGNALLED {signal} {}", lost_or_held(guard.is_lost()));
        } else if guard.is_lost() && !signalled {
            fail(3, "lease lost");
        }
    }
}

/// `blocking-drain`: `drain` on a plain thread.
fn drain_blocking(client: &ferrisson::blocking::Client, name: &str) -> ! {
    client
        .close_on_signal()
        .unwrap_or_else(|e| fail(1, &format!("cannot listen: {e}")));
    let after = client.get_lock(&format!("{name}-after"));
    let after = after.lock().unwrap_or_else(|e| fail(1, &e.to_string()));
    let result = client.get_lock(name).with_lock(|token| {
        println!("LOCKED {token}");
        std::thread::sleep(Duration::from_secs(1));
        let new = client.get_lock(&format!("{name}-new")).try_lock();
        println!("NEW {}", outcome(&new.map(drop)));
        std::thread::sleep(Duration::from_secs(1));
        println!("DONE");
    });
    println!("RESULT {}", outcome(&result));
    after.unlock().unwrap_or_else(|e| fail(1, &e.to_string()));
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

/// Takes the lock `name` and prints `LOCKED <token>`.
async fn locked(client: &ferrisson::Client, name: &str) -> ferrisson::LockGuard {
    let guard = client
        .get_lock(name)
        .lock()
        .await
        .unwrap_or_else(|e| fail(1, &format!("cannot lock: {e}")));
    println!("LOCKED {}", guard.fencing_token());
    guard
}

/// `ok`, or the error's variant as `Debug` shows it.
fn outcome(result: &ferrisson::Result<()>) -> String {
    match result {
        Ok(()) => "ok".to_owned(),
        Err(e) => format!("{e:?}"),
    }
}

/// The drain grace `FERRISSON_TEST_DRAIN_MS` asks for, if any.
fn drain_grace() -> Option<Duration> {
    let ms = std::env::var("FERRISSON_TEST_DRAIN_MS").ok()?;
    Some(Duration::from_millis(ms.parse().unwrap_or_else(|_| {
        fail(
            2,
            "FERRISSON_TEST_DRAIN_MS must be a number of milliseconds",
        )
    })))
}

fn lost_or_held(lost: bool) -> &'static str {
    if lost { "lost" } else { "held" }
}

fn fail(code: i32, message: &str) -> ! {
    eprintln!("{message}");
    std::process::exit(code);
}
