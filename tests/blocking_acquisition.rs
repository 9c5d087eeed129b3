//! `ferrisson::blocking` under the per-acquisition owner rule: every acquisition is an owner of
//! its own, whatever thread or handle it comes from, and a guard moved to another thread carries
//! its hold there. Reentrancy comes only from explicit nesting: inside the blocking `with_lock`
//! closure, inside `LockGuard::scope`, or by `LockGuard::reenter`. Each test here would fail
//! under the old rule that a hold belongs to the thread that asked.

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ferrisson::Error;
use ferrisson::blocking::{Client, LockGuard, MultiGuard, MultiLock, RFencedLock, RLock};
use support::{Checker, RedisServer};

/// How long a contender that must be kept out tries before giving up.
const GIVE_UP: Duration = Duration::from_millis(200);

/// A blocking client of `server` with the harness's test-sized timeouts.
fn client(server: &RedisServer) -> Client {
    Client::builder()
        .url(server.url())
        .response_timeout(Duration::from_millis(800))
        .connection_timeout(Duration::from_millis(800))
        .build()
        .expect("a blocking client connects")
}

/// Joins every thread, re-raising a thread's panic.
fn join_all<T>(threads: impl IntoIterator<Item = JoinHandle<T>>) -> Vec<T> {
    threads
        .into_iter()
        .map(|t| t.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
        .collect()
}

/// Runs `work` on a thread of its own and returns its answer.
fn elsewhere<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    join_all([std::thread::spawn(work)]).remove(0)
}

/// Polls `check` every 10 ms for at most 10 s.
fn eventually(mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if check() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    check()
}

/// Whether `lock` can be taken by an attempt that waits [`GIVE_UP`] (and gives the grant back).
fn can_take(lock: &RLock) -> bool {
    match lock.try_lock_for(GIVE_UP, None).expect("try_lock_for") {
        Some(guard) => {
            guard.unlock().unwrap();
            true
        }
        None => false,
    }
}

/// One acquisition that must be granted at once, as a nested one is: a single attempt.
fn nested(lock: &RLock, what: &str) -> LockGuard {
    lock.try_lock()
        .expect("try_lock")
        .unwrap_or_else(|| panic!("{what}: not granted at once"))
}

/// A read-modify-write of `counter` that loses updates when two run at once.
fn bump(counter: &AtomicU64) {
    let seen = counter.load(Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(3));
    counter.store(seen + 1, Ordering::SeqCst);
}

#[test]
fn a_dispatcher_thread_hands_each_hold_to_a_worker_thread() {
    let server = RedisServer::start();
    let client = client(&server);
    let lock = client.get_lock("dispatched");
    let counter = Arc::new(AtomicU64::new(0));
    let checker = Arc::new(Checker::default());
    let mut workers = Vec::new();
    for _ in 0..20 {
        // This thread's next lock() is another owner: it waits for the worker's unlock.
        let guard = lock.lock().expect("the dispatcher locks");
        let (counter, checker) = (counter.clone(), checker.clone());
        workers.push(std::thread::spawn(move || {
            let start = checker.enter();
            bump(&counter);
            checker.exit(guard.fencing_token(), start);
            guard
                .unlock()
                .expect("the worker unlocks the dispatcher's hold");
        }));
    }
    join_all(workers);
    assert_eq!(counter.load(Ordering::SeqCst), 20, "an update was lost");
    assert_eq!(checker.verify().len(), 20);
    assert!(!lock.is_locked().unwrap());
    assert!(eventually(|| client.live_owners() == 0));
}

#[test]
fn a_thread_pool_passes_guards_between_its_threads() {
    let server = RedisServer::start();
    let client = client(&server);
    const KEYS: usize = 4;
    const JOBS: usize = 40;
    let (jobs_in, jobs) = mpsc::channel::<usize>();
    for job in 0..JOBS {
        jobs_in.send(job).unwrap();
    }
    drop(jobs_in);
    let jobs = Arc::new(Mutex::new(jobs));
    let (held_in, held) = mpsc::channel::<(usize, LockGuard)>();
    let held = Arc::new(Mutex::new(held));
    let counters: Arc<Vec<AtomicU64>> = Arc::new((0..KEYS).map(|_| AtomicU64::new(0)).collect());
    let checkers: Arc<HashMap<usize, Checker>> =
        Arc::new((0..KEYS).map(|k| (k, Checker::default())).collect());
    // Four lockers: each job's key is locked here, and the guard passed on.
    let lockers: Vec<_> = (0..4)
        .map(|_| {
            let (client, jobs, held_in) = (client.clone(), jobs.clone(), held_in.clone());
            std::thread::spawn(move || {
                loop {
                    let Ok(job) = jobs.lock().unwrap().recv() else {
                        return;
                    };
                    let key = job % KEYS;
                    let guard = client.get_lock(&format!("pool:{key}")).lock().unwrap();
                    held_in.send((key, guard)).unwrap();
                }
            })
        })
        .collect();
    drop(held_in);
    // Four workers: each does a job under the hold it was passed, and unlocks it.
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let (held, counters, checkers) = (held.clone(), counters.clone(), checkers.clone());
            std::thread::spawn(move || {
                loop {
                    let Ok((key, guard)) = held.lock().unwrap().recv() else {
                        return;
                    };
                    let start = checkers[&key].enter();
                    bump(&counters[key]);
                    checkers[&key].exit(guard.fencing_token(), start);
                    guard.unlock().unwrap();
                }
            })
        })
        .collect();
    join_all(lockers);
    join_all(workers);
    for key in 0..KEYS {
        assert_eq!(
            counters[key].load(Ordering::SeqCst),
            (JOBS / KEYS) as u64,
            "key {key}: an update was lost"
        );
        assert_eq!(checkers[&key].verify().len(), JOBS / KEYS);
    }
    assert!(eventually(|| client.live_owners() == 0));
}

#[test]
fn a_second_lock_on_the_same_thread_outside_a_scope_is_another_owner() {
    let server = RedisServer::start();
    let client = client(&server);
    let lock = client.get_lock("twice");
    let first = lock.lock().unwrap();
    // Neither this handle nor another of the name gets in: this thread is no owner.
    let asked = Instant::now();
    assert!(lock.try_lock_for(GIVE_UP, None).unwrap().is_none());
    assert!(asked.elapsed() >= GIVE_UP / 2, "it gave up before waiting");
    assert!(client.get_lock("twice").try_lock().unwrap().is_none());
    // Outside any scope, this thread holds nothing; the guard has its one hold.
    assert!(lock.is_locked().unwrap());
    assert!(!lock.is_held().unwrap());
    assert_eq!(lock.hold_count().unwrap(), 0);
    assert_eq!(first.hold_count().unwrap(), 1);
    // The second acquisition waits until the first hold is given back, here on another thread.
    let token = first.fencing_token();
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        first.unlock().unwrap();
    });
    let second = lock
        .try_lock_for(Duration::from_secs(20), None)
        .unwrap()
        .expect("granted once the first hold is given back");
    join_all([releaser]);
    assert!(
        second.fencing_token() > token,
        "a new acquisition, a new token"
    );
    assert_eq!(second.hold_count().unwrap(), 1);
    second.unlock().unwrap();
    assert!(!lock.is_locked().unwrap());
}

#[test]
fn with_lock_nests_acquisitions_on_its_thread_only() {
    let server = RedisServer::start();
    let client = client(&server);
    let lock = client.get_lock("with");
    let another_handle = client.get_lock("with");
    let outsider = lock.clone();
    let answer = lock
        .with_lock(|token| {
            assert!(lock.is_held().unwrap());
            assert_eq!(lock.hold_count().unwrap(), 1);
            // Nested: one more hold of the same acquisition, with its token.
            let inner = lock.lock().expect("a nested lock()");
            assert_eq!(inner.fencing_token(), token);
            assert_eq!(lock.hold_count().unwrap(), 2);
            assert_eq!(inner.hold_count().unwrap(), 2);
            // Through another handle of the name too.
            let third = nested(&another_handle, "another handle inside with_lock");
            assert_eq!(third.fencing_token(), token);
            assert_eq!(another_handle.hold_count().unwrap(), 3);
            assert!(another_handle.is_held().unwrap());
            third.unlock().unwrap();
            inner.unlock().unwrap();
            assert_eq!(lock.hold_count().unwrap(), 1);
            // A thread started inside the closure is outside the scope: it waits.
            let (held, taken) =
                elsewhere(move || (outsider.is_held().unwrap(), can_take(&outsider)));
            assert!(!held, "another thread inside the scope");
            assert!(!taken, "another thread took a held lock");
            token
        })
        .unwrap();
    assert!(answer > 0);
    assert!(!lock.is_held().unwrap());
    assert_eq!(lock.hold_count().unwrap(), 0);
    assert!(
        !lock.is_locked().unwrap(),
        "every nested hold was given back"
    );
    // Outside the closure, a plain hold is not this thread's: not held, nothing to nest in.
    let plain = lock.lock().unwrap();
    assert!(plain.fencing_token() > answer);
    assert!(!lock.is_held().unwrap());
    assert_eq!(lock.hold_count().unwrap(), 0);
    assert!(another_handle.try_lock().unwrap().is_none());
    plain.unlock().unwrap();
}

#[test]
fn reenter_and_scope_nest_and_a_nested_guard_outlives_its_scope() {
    let server = RedisServer::start();
    let client = client(&server);
    let other = self::client(&server);
    let lock = client.get_lock("reentered");
    let outer = lock.lock().unwrap();
    let token = outer.fencing_token();
    // reenter: one more hold, same token, at once.
    let again = outer.reenter().expect("reenter");
    assert_eq!(again.fencing_token(), token);
    assert_eq!(outer.hold_count().unwrap(), 2);
    assert_eq!(again.hold_count().unwrap(), 2);
    again.unlock().unwrap();
    assert_eq!(outer.hold_count().unwrap(), 1);
    // A guard moved to another thread carries its hold: it reenters there, while that
    // thread's own acquisition is another owner.
    let probe = lock.clone();
    let (outer, again, kept_out) = elsewhere(move || {
        let again = outer.reenter().expect("reenter on another thread");
        let kept_out = !can_take(&probe);
        (outer, again, kept_out)
    });
    assert!(
        kept_out,
        "the thread holding a moved guard got in beside it"
    );
    assert_eq!(again.fencing_token(), token);
    again.unlock().unwrap();
    // scope: an acquisition of the name inside it, through any handle, nests.
    let nested_guard = outer.scope(|| {
        assert!(lock.is_held().unwrap());
        let inner = lock.lock().expect("a nested lock()");
        assert_eq!(lock.hold_count().unwrap(), 2);
        let via_other_handle = nested(&client.get_lock("reentered"), "another handle");
        assert_eq!(via_other_handle.fencing_token(), token);
        via_other_handle.unlock().unwrap();
        inner
    });
    assert_eq!(nested_guard.fencing_token(), token);
    assert_eq!(outer.hold_count().unwrap(), 2);
    assert!(!lock.is_held().unwrap(), "the scope ended");
    // The nested guard outlives its scope and its outer guard: the lock stays held.
    outer.unlock().unwrap();
    assert_eq!(nested_guard.hold_count().unwrap(), 1);
    assert!(lock.is_locked().unwrap());
    assert!(other.get_lock("reentered").try_lock().unwrap().is_none());
    assert!(!can_take(&lock), "this thread, outside the scope, got in");
    nested_guard.unlock().unwrap();
    let next = other
        .get_lock("reentered")
        .try_lock()
        .unwrap()
        .expect("free once the nested guard is given back");
    assert!(next.fencing_token() > token);
    next.unlock().unwrap();
}

#[test]
fn a_read_nests_in_a_write_scope_and_a_write_in_a_read_scope_is_refused() {
    let server = RedisServer::start();
    let client = client(&server);
    let rw = client.get_read_write_lock("doc");
    let rw2 = client.get_read_write_lock("doc");
    // Read nested in a write's with_lock: granted at once, through either handle.
    let outsider = rw.clone();
    rw.write_lock()
        .with_lock(|_| {
            let read = nested(&rw.read_lock(), "read inside write");
            let read2 = nested(&rw2.read_lock(), "read inside write, another handle");
            assert!(rw.read_lock().is_held().unwrap());
            assert_eq!(rw.read_lock().hold_count().unwrap(), 2);
            // Another thread's reader waits for the writer.
            assert!(!elsewhere(move || can_take(&outsider.read_lock())));
            read2.unlock().unwrap();
            read.unlock().unwrap();
        })
        .unwrap();
    assert!(!rw.write_lock().is_locked().unwrap());
    // Write nested in a read's with_lock: refused at once, not a wait for itself.
    rw.read_lock()
        .with_lock(|_| {
            for (handle, what) in [(&rw, "this handle"), (&rw2, "another handle")] {
                let asked = Instant::now();
                let refused = handle
                    .write_lock()
                    .try_lock_for(Duration::from_secs(10), None);
                assert!(
                    matches!(&refused, Err(Error::UpgradeNotSupported { name }) if name == "doc"),
                    "{what}: {refused:?}"
                );
                assert!(asked.elapsed() < Duration::from_secs(5), "{what}: waited");
            }
            assert!(matches!(
                rw.write_lock().lock(),
                Err(Error::UpgradeNotSupported { .. })
            ));
        })
        .unwrap();
    // Outside any scope a write is another owner: it waits for this thread's reader instead
    // of being refused, and gets in once the read is given back.
    let read = rw.read_lock().lock().unwrap();
    assert!(
        !can_take(&rw.write_lock()),
        "a writer got in beside a reader"
    );
    read.unlock().unwrap();
    let write = rw.write_lock().try_lock().unwrap().expect("free");
    write.unlock().unwrap();
}

/// A handle of each kind, shared by contending threads.
#[derive(Clone)]
enum Shared {
    Fenced(RFencedLock),
    Fair(RLock),
    Multi(MultiLock),
}

enum Held {
    Lock(LockGuard),
    Multi(MultiGuard),
}

impl Shared {
    fn acquire(&self) -> (u64, Held) {
        match self {
            Shared::Fenced(lock) => {
                let (token, guard) = lock.lock_and_get_token().unwrap();
                assert_eq!(token, guard.fencing_token());
                (token, Held::Lock(guard))
            }
            Shared::Fair(lock) => {
                let guard = lock.lock().unwrap();
                (guard.fencing_token(), Held::Lock(guard))
            }
            Shared::Multi(multi) => {
                let guard = multi.lock().unwrap();
                // The parts are taken in one canonical order: the first part orders the grants.
                (guard.parts()[0].fencing_token(), Held::Multi(guard))
            }
        }
    }
}

impl Held {
    fn unlock(self) {
        match self {
            Held::Lock(g) => g.unlock().unwrap(),
            Held::Multi(g) => g.unlock().unwrap(),
        }
    }
}

/// Three threads sharing `shared` take it six times each; every other hold is handed to a new
/// thread, and its taker asks again at once (another owner, so it waits).
fn contend(shared: &Shared) -> Vec<u64> {
    let checker = Arc::new(Checker::default());
    let threads: Vec<_> = (0..3)
        .map(|_| {
            let (shared, checker) = (shared.clone(), checker.clone());
            std::thread::spawn(move || {
                let mut handed = Vec::new();
                for round in 0..6 {
                    let (token, held) = shared.acquire();
                    let checker = checker.clone();
                    let work = move || {
                        let start = checker.enter();
                        std::thread::sleep(Duration::from_millis(2));
                        checker.exit(token, start);
                        held.unlock();
                    };
                    if round % 2 == 0 {
                        work();
                    } else {
                        handed.push(std::thread::spawn(work));
                    }
                }
                join_all(handed);
            })
        })
        .collect();
    join_all(threads);
    checker.verify().iter().map(|h| h.token).collect()
}

#[test]
fn fenced_fair_and_multi_acquisitions_from_shared_handles_exclude_each_other() {
    let server = RedisServer::start();
    let client = client(&server);
    let fenced = client.get_fenced_lock("shared-fenced");
    let tokens = contend(&Shared::Fenced(fenced.clone()));
    assert_eq!(tokens.len(), 18);
    assert_eq!(
        fenced.token().unwrap(),
        tokens.last().copied(),
        "the last grant's token is the last handed out"
    );
    assert!(!fenced.is_locked().unwrap());
    let fair = client.get_fair_lock("shared-fair");
    assert_eq!(contend(&Shared::Fair(fair.clone())).len(), 18);
    assert!(!fair.is_locked().unwrap());
    let parts = [
        client.get_lock("shared-multi:a"),
        client.get_lock("shared-multi:b"),
    ];
    let multi = MultiLock::new(parts.clone());
    assert_eq!(contend(&Shared::Multi(multi)).len(), 18);
    for part in &parts {
        assert!(!part.is_locked().unwrap(), "{} left locked", part.name());
    }
    assert!(eventually(|| client.live_owners() == 0));
}
