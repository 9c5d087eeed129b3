//! In this process (one test: the signal is the process's): during a signal's drain every
//! kind of new acquisition is refused with `Error::Draining` (each lock kind, a `MultiLock`,
//! semaphore permits, expirable permits; a `RedLock` says so in each part), while an
//! acquisition nested in a hold, a latch's wait and the holds already taken go on; once the
//! last hold is given back the drain ends, and `OnSignal` resolves.

mod support;

use std::time::{Duration, Instant};

use ferrisson::{Error, MultiLock, RedLock, Signal};
use support::{RedisServer, client};

fn draining(result: ferrisson::Result<impl std::fmt::Debug>, what: &str) {
    match result {
        Err(Error::Draining { signal }) => assert_eq!(signal, Signal::Terminate, "{what}"),
        other => panic!("{what}: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_refuses_new_acquisitions_and_lets_the_holds_finish() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let stop = client.on_signal().unwrap();
    let held = client.get_lock("held");
    let guard = held.lock().await.unwrap();
    let permits = client.get_permit_expirable_semaphore("slots");
    permits.try_set_permits(3).await.unwrap();
    let permit = permits.acquire().await.unwrap();
    let semaphore = client.get_semaphore("counts");
    semaphore.try_set_permits(3).await.unwrap();
    let latch = client.get_count_down_latch("latch");
    latch.try_set_count(1).await.unwrap();

    let status = std::process::Command::new("kill")
        .args(["-TERM", &std::process::id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let sent = Instant::now();
    loop {
        match client.get_lock("new").try_lock().await {
            Err(Error::Draining { .. }) => break,
            Ok(Some(g)) => g.unlock().await.unwrap(),
            other => panic!("{other:?}"),
        }
        assert!(sent.elapsed() < Duration::from_secs(5), "the drain starts");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    draining(client.get_lock("new").lock().await, "lock");
    draining(client.get_fair_lock("fair").try_lock().await, "fair");
    let rw = client.get_read_write_lock("rw");
    draining(rw.read_lock().try_lock().await, "read");
    draining(rw.write_lock().try_lock().await, "write");
    draining(client.get_fenced_lock("fenced").try_lock().await, "fenced");
    draining(client.get_mutex("mutex").try_lock().await, "mutex");
    draining(semaphore.try_acquire(1).await, "semaphore");
    draining(permits.try_acquire().await, "permits");
    let multi = MultiLock::new([client.get_lock("m1"), client.get_lock("m2")]);
    draining(multi.try_lock().await, "multilock");
    match RedLock::new([client.get_lock("r1")]).try_lock().await {
        Err(Error::QuorumNotReached { failures, .. }) => {
            assert!(
                failures.iter().all(|f| matches!(
                    f,
                    Error::Part { error, .. } if matches!(**error, Error::Draining { .. })
                )),
                "{failures:?}"
            );
        }
        other => panic!("redlock: {other:?}"),
    }
    // What goes on: a latch's wait, one more hold of a hold taken, the holds taken.
    assert!(!latch.await_for(Duration::from_millis(10)).await.unwrap());
    let nested = guard.reenter().await.expect("nested in a hold: goes on");
    let inner = guard.scope(async { held.lock().await }).await;
    let inner = inner.expect("nested in the hold's work: goes on");
    assert_eq!(inner.fencing_token(), guard.fencing_token());
    inner.unlock().await.unwrap();
    // A new acquisition of the same lock, outside the hold's work: refused before it waits.
    draining(held.with_lock(|_| async {}).await, "with_lock");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(stop.received(), None, "the drain waits for the holds");
    assert!(!guard.is_lost() && !permit.is_lost());

    nested.unlock().await.unwrap();
    guard.unlock().await.unwrap();
    let released = Instant::now();
    permit.release().await.unwrap();
    let signal = tokio::time::timeout(Duration::from_secs(5), stop)
        .await
        .expect("the drain ends with the last hold");
    eprintln!(
        "drain ended {:?} after the last release",
        released.elapsed()
    );
    assert_eq!(signal, Signal::Terminate);
    assert!(matches!(
        client.get_lock("new").try_lock().await,
        Err(Error::Closed)
    ));
}
