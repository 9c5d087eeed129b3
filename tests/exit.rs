//! A process that ends while it holds a lock gives it back on its way out: returning from
//! `main` with a guard alive (the drop of the client's last handle waits for the release), or
//! calling `Client::close` before `std::process::exit`. The next process gets the lock at once,
//! not when the 30 s lease runs out.

mod support;

use std::time::{Duration, Instant};

use support::{HolderProcess, RedisServer, client};

async fn next_process_gets_it_at_once(kind: &str) {
    let server = RedisServer::start();
    let mut holder = HolderProcess::spawn(&server, "job", 30_000, kind);
    holder.locked(Duration::from_secs(10)).await;
    assert_eq!(holder.exit_code(Duration::from_secs(10)).await, Some(0));
    let exited = Instant::now();
    let next = client(&server).await;
    let lock = next.get_lock("job");
    let guard = lock
        .try_lock()
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("{kind}: the lock is still held after the holder exited"));
    eprintln!(
        "{kind}: locked {:?} after the holder exited",
        exited.elapsed()
    );
    guard.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn returning_from_main_with_a_guard_alive_releases_it() {
    next_process_gets_it_at_once("exit-holding").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_before_process_exit_releases_what_was_dropped() {
    next_process_gets_it_at_once("close-then-exit").await;
}

/// `close` waits for the releases of dropped guards, and the client then takes on no new
/// acquire, through any handle; a guard held across it still gives its lock back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_client_finishes_its_releases_and_takes_no_new_lock() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let lock = client.get_lock("closing");
    let kept = client.get_lock("kept").lock().await.unwrap();
    for i in 0..20 {
        drop(
            client
                .get_lock(&format!("dropped:{i}"))
                .lock()
                .await
                .unwrap(),
        );
    }
    let left = client.clone().close().await;
    assert!(left.is_empty(), "still under way: {left:?}");
    let mut raw = server.raw().await;
    for i in 0..20 {
        let exists: bool = redis::AsyncCommands::exists(&mut raw, format!("dropped:{i}"))
            .await
            .unwrap();
        assert!(
            !exists,
            "dropped:{i} was not released by the time close returned"
        );
    }
    assert!(matches!(lock.lock().await, Err(ferrisson::Error::Closed)));
    assert!(matches!(
        client.get_fair_lock("other").try_lock().await,
        Err(ferrisson::Error::Closed)
    ));
    kept.unlock()
        .await
        .expect("a hold from before still gives its lock back");
}

/// `close` keeps its promise with a server that does not answer (paused with SIGSTOP): it
/// returns within twice the response timeout, the removal of the client's identity included,
/// leaving what was under way to the leases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_with_a_silent_server_takes_at_most_twice_the_response_timeout() {
    let server = RedisServer::start();
    let response_timeout = Duration::from_millis(800);
    let client = support::builder(&server)
        .response_timeout(response_timeout)
        .build()
        .await
        .unwrap();
    let guard = client.get_lock("job").lock().await.unwrap();
    let kept = client.get_lock("kept").lock().await.unwrap();
    // The heartbeat and the renewals are under way when the server stops answering.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    server.pause();
    drop(guard); // its release cannot reach the server
    let started = Instant::now();
    let left = client.clone().close().await;
    let took = started.elapsed();
    server.resume();
    eprintln!("close took {took:?} with the server paused; left: {left:?}");
    assert!(!left.is_empty(), "the release could not be done");
    assert!(
        took <= response_timeout * 2 + Duration::from_millis(250),
        "close took {took:?}"
    );
    drop(kept);
}
