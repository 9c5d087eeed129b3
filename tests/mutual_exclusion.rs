//! Many contenders across several clients: no two holds overlap, fencing tokens strictly
//! increase, and every contender gets its turns.

mod support;

use std::sync::Arc;
use std::time::Duration;

use support::{Checker, RedisServer, client, join_within};

const CLIENTS: usize = 3;
const HANDLES_PER_CLIENT: usize = 3;
const ROUNDS_PER_HANDLE: usize = 14; // 3 × 3 × 14 = 126 acquisitions

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contenders_never_overlap_and_tokens_strictly_increase() {
    let server = RedisServer::start();
    let checker = Arc::new(Checker::default());
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let client = client(&server).await;
        for h in 0..HANDLES_PER_CLIENT {
            let lock = client.get_lock("contended");
            let checker = checker.clone();
            tasks.push(tokio::spawn(async move {
                for round in 0..ROUNDS_PER_HANDLE {
                    // Mix the acquire styles: waiting, bounded waiting, fixed lease.
                    let guard = match round % 3 {
                        0 => lock.lock().await.unwrap(),
                        1 => loop {
                            if let Some(g) = lock
                                .try_lock_for(Duration::from_millis(50), None)
                                .await
                                .unwrap()
                            {
                                break g;
                            }
                        },
                        _ => lock.lock_with_lease(Duration::from_secs(10)).await.unwrap(),
                    };
                    let start = checker.enter();
                    if (c + h + round) % 4 == 0 {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                    checker.exit(guard.fencing_token(), start);
                    guard.unlock().await.unwrap();
                }
            }));
        }
    }
    join_within(Duration::from_secs(60), tasks, "no contender starves").await;
    let holds = checker.verify();
    assert_eq!(
        holds.len(),
        CLIENTS * HANDLES_PER_CLIENT * ROUNDS_PER_HANDLE
    );
}

/// Many owners on one client: most acquisitions are handovers by the release script, and some
/// waits and releases are cancelled mid-flight. Still no overlap, strictly increasing tokens,
/// and nothing left held at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handovers_among_one_clients_owners_never_overlap_even_when_cancelled() {
    const HANDLES: usize = 8;
    const ROUNDS: usize = 40;
    let server = RedisServer::start();
    let client = client(&server).await;
    let checker = Arc::new(Checker::default());
    let mut tasks = Vec::new();
    for h in 0..HANDLES {
        let lock = client.get_lock("handed-around");
        let checker = checker.clone();
        tasks.push(tokio::spawn(async move {
            let mut done = 0;
            let mut round = 0usize;
            while done < ROUNDS {
                round += 1;
                let guard = if (h + round).is_multiple_of(7) {
                    // A wait given up after a moment (it may have been picked for a handover).
                    let wait = Duration::from_micros(((h * 131 + round * 17) % 900) as u64);
                    match tokio::time::timeout(wait, lock.lock()).await {
                        Ok(guard) => guard.unwrap(),
                        Err(_) => continue,
                    }
                } else {
                    lock.lock().await.unwrap()
                };
                let start = checker.enter();
                checker.exit(guard.fencing_token(), start);
                done += 1;
                if (h + round).is_multiple_of(11) {
                    // A release given up mid-flight: it finishes in the background. The task's
                    // next acquire is a new acquisition, which waits for that release like
                    // anyone's, so it is a new hold with a new token, never one more hold of
                    // the hold being given back.
                    let _ = tokio::time::timeout(Duration::from_micros(50), guard.unlock()).await;
                } else {
                    guard.unlock().await.unwrap();
                }
            }
        }));
    }
    join_within(Duration::from_secs(60), tasks, "no owner starves").await;
    assert_eq!(checker.verify().len(), HANDLES * ROUNDS);
    let lock = client.get_lock("handed-around");
    assert!(
        support::eventually(Duration::from_secs(3), || async {
            !lock.is_locked().await.unwrap()
        })
        .await,
        "nothing stays held"
    );
}
