//! Many contenders across several clients: no two holds overlap, fencing tokens strictly
//! increase, and every contender gets its turns.

mod support;

use std::sync::Arc;
use std::time::Duration;

use support::{Checker, RedisServer, client};

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
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(60), task)
            .await
            .expect("no contender starves")
            .unwrap();
    }
    let holds = checker.verify();
    assert_eq!(
        holds.len(),
        CLIENTS * HANDLES_PER_CLIENT * ROUNDS_PER_HANDLE
    );
}
