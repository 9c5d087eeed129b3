//! `with_lock` never turns finished work into an error: once the work has run to its end, its
//! output is the answer even when the release then fails (Redis paused or killed right after the
//! work's write), for the async and the blocking twin; the failed release shows as a WARN. An
//! error means the work did not run, or (async) was stopped because the hold was lost.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use support::warnings::warnings;
use support::{RedisServer, builder};

/// Whether a WARN said that `lock`'s work ran to its end.
fn warned_ran_to_end(lock: &str) -> bool {
    warnings()
        .lock()
        .unwrap()
        .iter()
        .any(|(message, name)| name == lock && message.contains("ran to its end"))
}

/// Redis frozen right after the work's write: the release times out, and the answer is the
/// work's output, not the release's "timed out" (a caller would retry a payment that was made).
/// Once Redis is back, the hold is removed in the background, long before its 30 s lease ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_timing_out_after_the_work_keeps_the_output() {
    warnings();
    let server = RedisServer::start();
    let client = builder(&server).build().await.unwrap();
    let lock = client.get_lock("pay:paused");
    let committed = &AtomicUsize::new(0);
    let server = &server;
    let answer = lock
        .with_lock(|token| async move {
            committed.fetch_add(1, Ordering::SeqCst); // the payment's write
            server.pause();
            token
        })
        .await;
    let resumed = std::time::Instant::now();
    server.resume();
    let token = answer.expect("the work ran to its end: its output is the answer");
    assert!(token > 0);
    assert_eq!(committed.load(Ordering::SeqCst), 1);
    assert!(
        warned_ran_to_end("pay:paused"),
        "the failed release is logged"
    );
    // Another client takes it once the leftover hold is removed (not after the 30 s lease).
    let other = support::client(server).await;
    let guard = other
        .get_lock("pay:paused")
        .try_lock_for(Duration::from_secs(10), None)
        .await
        .unwrap()
        .expect("the leftover hold is removed in the background");
    assert!(resumed.elapsed() < Duration::from_secs(10));
    guard.unlock().await.unwrap();
}

/// Redis killed right after the work's write: the release is refused, the output stands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_refused_after_the_work_keeps_the_output() {
    warnings();
    let mut server = RedisServer::start();
    let client = builder(&server).build().await.unwrap();
    let lock = client.get_lock("pay:killed");
    let answer = lock
        .with_lock(|_| async {
            server.kill();
            "paid"
        })
        .await;
    assert_eq!(answer.unwrap(), "paid");
    assert!(warned_ran_to_end("pay:killed"));
    server.restart();
}

/// The other outcome: the acquire failed, so the work never ran, and the answer is an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_means_the_work_did_not_run() {
    let mut server = RedisServer::start();
    let client = builder(&server).build().await.unwrap();
    server.kill();
    let ran = AtomicBool::new(false);
    let answer = client
        .get_lock("pay:down")
        .with_lock(|_| async { ran.store(true, Ordering::SeqCst) })
        .await;
    assert!(answer.is_err());
    assert!(!ran.load(Ordering::SeqCst));
}

/// The blocking twin, Redis frozen right after the work: the output is the answer.
#[test]
fn the_blocking_with_lock_keeps_the_output_when_the_release_fails() {
    warnings();
    let server = Arc::new(RedisServer::start());
    let client = ferrisson::blocking::Client::builder()
        .url(server.url())
        .response_timeout(Duration::from_millis(800))
        .connection_timeout(Duration::from_millis(800))
        .build()
        .unwrap();
    let lock = client.get_lock("pay:blocking");
    let frozen = server.clone();
    let answer = lock.with_lock(move |token| {
        frozen.pause();
        token
    });
    server.resume();
    assert!(answer.expect("the output, not the release's error") > 0);
    assert!(warned_ran_to_end("pay:blocking"));
}

/// The blocking twin, hold lost while the work runs (synchronous work cannot be stopped): it
/// ran to its end, so its output is the answer, and a WARN says the hold was lost meanwhile.
#[test]
fn the_blocking_with_lock_keeps_the_output_when_the_hold_is_lost_meanwhile() {
    warnings();
    let server = RedisServer::start();
    let client = ferrisson::blocking::Client::builder()
        .url(server.url())
        .watchdog_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let lock = client.get_lock("pay:lost");
    let forcer = lock.clone();
    let answer = lock.with_lock(move |_| {
        std::thread::spawn(move || forcer.force_unlock().unwrap())
            .join()
            .unwrap();
        std::thread::sleep(Duration::from_millis(500)); // the loss is noticed meanwhile
        "written"
    });
    assert_eq!(answer.unwrap(), "written");
    assert!(
        warnings()
            .lock()
            .unwrap()
            .iter()
            .any(|(m, l)| l == "pay:lost" && m.contains("lost while the work")),
        "the loss is logged"
    );
}
