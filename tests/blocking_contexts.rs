//! Where `ferrisson::blocking` may be called: on every thread that may block (a plain thread, a
//! `spawn_blocking` closure, a `block_in_place` closure, under `Runtime::enter`) it works, on
//! a multi-thread and on a current-thread runtime; from async code (a task, a `block_on`'s
//! future) it is refused with `Error::InsideRuntime`, whose message says where to call instead.

mod support;

use std::time::Duration;

use ferrisson::Error;
use ferrisson::blocking::Client;
use support::RedisServer;

fn client(server: &RedisServer) -> Client {
    Client::builder()
        .url(server.url())
        .response_timeout(Duration::from_millis(800))
        .connection_timeout(Duration::from_millis(800))
        .build()
        .expect("a blocking client connects")
}

fn multi_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// What the blocking API does on a thread that may block: takes a lock, nests an acquisition
/// in the hold's scope (one more hold, same token, no wait), gives both back.
fn lock_nest_unlock(lock: &ferrisson::blocking::RLock) -> ferrisson::Result<()> {
    lock.with_lock(|token| {
        let nested = lock
            .try_lock_for(Duration::from_secs(2), None)?
            .expect("a nested acquisition is granted at once");
        assert_eq!(nested.fencing_token(), token, "one more hold of the same");
        nested.unlock()
    })?
}

/// Runs `work` in the runtime, failing the test instead of hanging if it never ends.
fn within<T>(runtime: &tokio::runtime::Runtime, work: impl Future<Output = T>) -> T {
    runtime.block_on(async {
        tokio::time::timeout(Duration::from_secs(20), work)
            .await
            .expect("done in time: no call stalled the runtime")
    })
}

#[test]
fn inside_spawn_blocking_it_works_on_either_runtime() {
    let server = RedisServer::start();
    let client = client(&server);
    for (flavor, runtime) in [("multi", multi_thread()), ("current", current_thread())] {
        let lock = client.get_lock(&format!("spawn-blocking:{flavor}"));
        let done = within(&runtime, async {
            tokio::task::spawn_blocking(move || lock_nest_unlock(&lock))
                .await
                .unwrap()
        });
        done.unwrap_or_else(|e| panic!("{flavor}: {e}"));
    }
}

/// A client built, used and closed inside `spawn_blocking`.
#[test]
fn a_client_is_built_and_closed_inside_spawn_blocking() {
    let server = RedisServer::start();
    let url = server.url();
    let runtime = current_thread();
    let left = within(&runtime, async {
        tokio::task::spawn_blocking(move || -> ferrisson::Result<Vec<String>> {
            let client = Client::connect(&url)?;
            lock_nest_unlock(&client.get_lock("built-inside"))?;
            client.close()
        })
        .await
        .unwrap()
    });
    assert!(left.unwrap().is_empty());
}

#[test]
fn inside_block_in_place_it_works() {
    let server = RedisServer::start();
    let client = client(&server);
    let runtime = multi_thread();
    let lock = client.get_lock("block-in-place");
    // In the runtime's `block_on` body, and in a task.
    within(&runtime, async {
        tokio::task::block_in_place(|| lock_nest_unlock(&lock)).unwrap();
        let lock = lock.clone();
        tokio::spawn(async move { tokio::task::block_in_place(|| lock_nest_unlock(&lock)) })
            .await
            .unwrap()
            .unwrap();
    });
}

#[test]
fn under_runtime_enter_it_works() {
    let server = RedisServer::start();
    let client = client(&server);
    for runtime in [multi_thread(), current_thread()] {
        let _entered = runtime.enter();
        lock_nest_unlock(&client.get_lock("entered")).unwrap();
    }
}

/// The blocking call waits for a lock that a task of the same current-thread runtime holds:
/// the runtime's one thread runs that task meanwhile, so the task gives the lock back and the
/// blocking call gets it.
#[test]
fn a_blocking_wait_in_spawn_blocking_leaves_the_runtime_running() {
    let server = RedisServer::start();
    let client = client(&server);
    let runtime = current_thread();
    let lock = client.get_lock("shared-with-a-task");
    let token = within(&runtime, async {
        let held = client.as_async().get_lock("shared-with-a-task");
        let guard = held.lock().await.unwrap();
        let first = guard.fencing_token();
        let waiter = tokio::task::spawn_blocking(move || {
            let guard = lock.lock()?;
            let token = guard.fencing_token();
            guard.unlock().map(|()| token)
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        guard.unlock().await.unwrap();
        let token = waiter.await.unwrap().unwrap();
        assert!(token > first);
        token
    });
    assert!(token > 0);
}

/// Every kind of async code: a `block_on` body and a task, on either runtime, a `Handle::block_on`
/// from a plain thread, a `LocalSet`, a task that spent most of its budget.
#[test]
fn from_async_code_it_is_refused() {
    let server = RedisServer::start();
    let client = client(&server);
    let lock = client.get_lock("refused");
    for (flavor, runtime) in [("multi", multi_thread()), ("current", current_thread())] {
        let in_block_on = runtime.block_on(async { lock.try_lock().map(drop) });
        let task_lock = lock.clone();
        let in_task = runtime
            .block_on(runtime.spawn(async move { task_lock.try_lock().map(drop) }))
            .unwrap();
        let spent_lock = lock.clone();
        let after_spending = runtime
            .block_on(runtime.spawn(async move {
                for _ in 0..100 {
                    tokio::task::coop::consume_budget().await;
                }
                spent_lock.try_lock().map(drop)
            }))
            .unwrap();
        let handle = runtime.handle().clone();
        let plain_lock = lock.clone();
        let in_handle_block_on =
            std::thread::spawn(move || handle.block_on(async { plain_lock.try_lock().map(drop) }))
                .join()
                .unwrap();
        let local = tokio::task::LocalSet::new();
        let local_lock = lock.clone();
        let in_local_set = local.block_on(&runtime, async move {
            tokio::task::spawn_local(async move { local_lock.try_lock().map(drop) })
                .await
                .unwrap()
        });
        for (where_, result) in [
            ("block_on", in_block_on),
            ("a task", in_task),
            ("a task that spent budget", after_spending),
            ("Handle::block_on", in_handle_block_on),
            ("a LocalSet task", in_local_set),
        ] {
            assert!(
                matches!(result, Err(Error::InsideRuntime)),
                "{flavor} runtime, {where_}: {result:?}"
            );
        }
    }
    // Nothing was taken by the refused calls, and a refusal left each thread able to block.
    assert!(!lock.is_locked().unwrap());
    lock_nest_unlock(&lock).unwrap();
}

/// The refusal changes nothing in the task it refused: its budget is as it was, so the task
/// still yields where it would have.
#[test]
fn a_refusal_leaves_the_task_budget_as_it_was() {
    let server = RedisServer::start();
    let client = client(&server);
    let lock = client.get_lock("budget");
    let runtime = current_thread();
    let spend = |refusing: Option<ferrisson::blocking::RLock>| async move {
        let mut spent = 0;
        while tokio::task::coop::has_budget_remaining() && spent < 10_000 {
            if let Some(lock) = &refusing {
                assert!(matches!(lock.is_locked(), Err(Error::InsideRuntime)));
            }
            tokio::task::coop::consume_budget().await;
            spent += 1;
        }
        spent
    };
    let plain = runtime.block_on(runtime.spawn(spend(None))).unwrap();
    let refused = runtime.block_on(runtime.spawn(spend(Some(lock)))).unwrap();
    assert!(plain < 10_000, "the task has a budget");
    assert_eq!(refused, plain, "a refusal spends none of it");
}

/// The text says what was wrong and where the call may go instead.
#[test]
fn the_refusal_says_where_to_call_instead() {
    let message = Error::InsideRuntime.to_string();
    for part in [
        "ferrisson::blocking",
        "async code",
        "async API",
        "spawn_blocking",
        "block_in_place",
    ] {
        assert!(message.contains(part), "`{part}` not in: {message}");
    }
}
