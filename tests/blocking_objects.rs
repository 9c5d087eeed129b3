//! Every object of `ferrisson::blocking` keeps its async twin's contract: locks (plain, fair,
//! fenced, read-write), the mutex, the latch, both semaphores, MultiLock and RedLock, guards'
//! loss and revocation, `with_lock`, `close`.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ferrisson::Error;
use ferrisson::blocking::{Client, MultiLock, RedLock};
use support::RedisServer;

fn client(server: &RedisServer) -> Client {
    builder(server).build().expect("a blocking client connects")
}

fn builder(server: &RedisServer) -> ferrisson::blocking::ClientBuilder {
    Client::builder()
        .url(server.url())
        .response_timeout(Duration::from_millis(800))
        .connection_timeout(Duration::from_millis(800))
}

/// Runs `work` on a thread of its own (another owner) and returns its answer.
fn elsewhere<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(work)
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e))
}

#[test]
fn blocking_types_are_send_sync_and_static() {
    fn check<T: Send + Sync + 'static>() {}
    check::<Client>();
    check::<ferrisson::blocking::ClientBuilder>();
    check::<ferrisson::blocking::RLock>();
    check::<ferrisson::blocking::RFencedLock>();
    check::<ferrisson::blocking::RReadWriteLock>();
    check::<ferrisson::blocking::RMutex>();
    check::<ferrisson::blocking::RCountDownLatch>();
    check::<ferrisson::blocking::RSemaphore>();
    check::<ferrisson::blocking::RPermitExpirableSemaphore>();
    check::<ferrisson::blocking::LockGuard>();
    check::<ferrisson::blocking::PermitGuard>();
    check::<MultiLock>();
    check::<ferrisson::blocking::MultiGuard>();
    check::<RedLock>();
    check::<ferrisson::blocking::RedLockGuard>();
}

#[test]
fn an_rlock_inspects_forces_and_times_out() {
    let server = RedisServer::start();
    let client = client(&server);
    let lock = client.get_lock("inspected");
    assert_eq!(lock.name(), "inspected");
    assert!(lock.token_counter_key().starts_with("ferrisson_token:{"));
    assert!(!lock.is_locked().unwrap());
    assert_eq!(lock.remaining_ttl().unwrap(), None);
    let guard = lock.lock_with_lease(Duration::from_secs(20)).unwrap();
    assert_eq!(guard.name(), "inspected");
    assert!(lock.is_locked().unwrap());
    let ttl = lock.remaining_ttl().unwrap().expect("a lease");
    assert!(ttl > Duration::from_secs(15) && ttl <= Duration::from_secs(20));
    // Another thread waits out its budget, then gets Ok(None).
    let other = lock.clone();
    let (answer, waited) = elsewhere(move || {
        let asked = Instant::now();
        let answer = other
            .try_lock_for(Duration::from_millis(300), None)
            .unwrap();
        (answer.is_some(), asked.elapsed())
    });
    assert!(!answer);
    assert!(waited >= Duration::from_millis(280), "{waited:?}");
    assert!(waited < Duration::from_secs(2), "{waited:?}");
    // Forced open, the guard's unlock finds the hold gone.
    let forcer = lock.clone();
    assert!(elsewhere(move || forcer.force_unlock().unwrap()));
    assert!(!lock.is_locked().unwrap());
    assert!(matches!(guard.unlock(), Err(Error::LockLost { .. })));
    // A malformed name is refused by every call.
    let bad = client.get_lock("bad{name");
    assert!(matches!(bad.try_lock(), Err(Error::InvalidArgument(_))));
}

#[test]
fn a_forced_open_renewed_guard_learns_it_is_lost() {
    let server = RedisServer::start();
    let client = builder(&server)
        .watchdog_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let lock = client.get_lock("forced");
    let guard = lock.lock().unwrap();
    assert!(!guard.wait_lost(Duration::from_millis(50)).unwrap());
    let forcer = lock.clone();
    elsewhere(move || forcer.force_unlock().unwrap());
    // The next renewal (within a third of the lease) finds it gone.
    assert!(guard.wait_lost(Duration::from_secs(3)).unwrap());
    assert!(guard.is_lost());
    assert!(matches!(guard.unlock(), Err(Error::LockLost { .. })));
}

#[test]
fn with_lock_runs_the_work_under_the_lock_and_returns_its_output_after_a_loss() {
    let server = RedisServer::start();
    let client = builder(&server)
        .watchdog_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let lock = client.get_lock("scoped");
    let observer = lock.clone();
    let answer = lock
        .with_lock(|token| {
            assert!(token > 0);
            let observer = observer.clone();
            assert!(elsewhere(move || observer.is_locked().unwrap()));
            7
        })
        .unwrap();
    assert_eq!(answer, 7);
    assert!(!lock.is_locked().unwrap());
    // Forced open while the work runs: synchronous work cannot be stopped, so it ran to its
    // end, and its output is the answer (the loss is logged and counted, not returned).
    let forcer = lock.clone();
    let lost = lock.with_lock(move |_| {
        elsewhere(move || forcer.force_unlock().unwrap());
        std::thread::sleep(Duration::from_millis(500)); // past the next renewal
        "work done"
    });
    assert_eq!(lost.unwrap(), "work done");
}

#[test]
fn revocation_requests_reach_a_waiting_holder() {
    let server = RedisServer::start();
    let client = client(&server);
    let lock = client.get_lock("revocable");
    assert_eq!(lock.request_revocation().unwrap(), 0, "nobody holds it yet");
    let guard = lock.lock().unwrap();
    assert!(!guard.is_revocation_requested());
    let asker = lock.clone();
    let ask = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        asker.request_revocation().unwrap()
    });
    assert!(
        guard
            .wait_revocation_requested(Duration::from_secs(5))
            .unwrap()
    );
    assert!(guard.is_revocation_requested());
    assert_eq!(ask.join().unwrap(), 1);
    guard.unlock().unwrap();
}

#[test]
fn a_fair_lock_grants_in_the_order_threads_asked() {
    let server = RedisServer::start();
    let client = client(&server);
    let lock = client.get_fair_lock("fair");
    let guard = lock.lock().unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..3 {
        let (lock, order) = (lock.clone(), order.clone());
        waiters.push(std::thread::spawn(move || {
            let guard = lock.lock().unwrap();
            order.lock().unwrap().push(i);
            std::thread::sleep(Duration::from_millis(20));
            guard.unlock().unwrap();
        }));
        std::thread::sleep(Duration::from_millis(150)); // queued before the next one asks
    }
    guard.unlock().unwrap();
    for waiter in waiters {
        waiter.join().unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2]);
}

#[test]
fn a_fenced_lock_hands_out_rising_tokens() {
    let server = RedisServer::start();
    let client = client(&server);
    let lock = client.get_fenced_lock("fenced");
    assert_eq!(lock.token().unwrap(), None);
    let (first, guard) = lock.lock_and_get_token().unwrap();
    assert_eq!(guard.fencing_token(), first);
    assert_eq!(lock.token().unwrap(), Some(first));
    assert!(lock.is_locked().unwrap(), "it dereferences to the RLock");
    let other = lock.clone();
    assert!(elsewhere(move || other
        .try_lock_and_get_token()
        .unwrap()
        .is_none()));
    guard.unlock().unwrap();
    let (second, guard) = lock
        .try_lock_and_get_token_for(Duration::from_secs(1), Some(Duration::from_secs(5)))
        .unwrap()
        .unwrap();
    assert!(second > first);
    guard.unlock().unwrap();
    let (third, guard) = lock
        .lock_and_get_token_with_lease(Duration::from_secs(5))
        .unwrap();
    assert!(third > second);
    guard.unlock().unwrap();
}

#[test]
fn a_read_write_lock_shares_reads_and_excludes_writes() {
    let server = RedisServer::start();
    let client = client(&server);
    let rw = client.get_read_write_lock("doc");
    assert_eq!(rw.name(), "doc");
    assert_eq!(rw.policy(), ferrisson::RwPolicy::Redisson);
    let read = rw.read_lock().lock().unwrap();
    // Another thread reads too, but cannot write.
    let other = rw.clone();
    let writes = elsewhere(move || {
        let read = other
            .read_lock()
            .try_lock()
            .unwrap()
            .expect("a second reader");
        read.unlock().unwrap();
        other.write_lock().try_lock().unwrap().is_some()
    });
    assert!(!writes, "a writer got in beside a reader");
    // A write nested in this thread's read cannot upgrade it; outside the read's scope, this
    // thread's write is another acquisition and waits.
    assert!(matches!(
        read.scope(|| rw.write_lock().try_lock()),
        Err(Error::UpgradeNotSupported { .. })
    ));
    assert!(rw.write_lock().try_lock().unwrap().is_none());
    read.unlock().unwrap();
    // A writer excludes other threads' readers and this thread's outside its scope, and may
    // read itself inside it.
    let write = rw.write_lock().lock().unwrap();
    let own_read = write
        .scope(|| rw.read_lock().try_lock())
        .unwrap()
        .expect("write -> read, nested");
    assert!(rw.read_lock().try_lock().unwrap().is_none());
    let other = rw.clone();
    assert!(elsewhere(move || other
        .read_lock()
        .try_lock()
        .unwrap()
        .is_none()));
    own_read.unlock().unwrap();
    write.unlock().unwrap();
    let preferring = client.get_read_write_lock_with("doc", ferrisson::RwPolicy::PreferWriters);
    assert_eq!(preferring.policy(), ferrisson::RwPolicy::PreferWriters);
}

#[test]
fn a_mutex_is_not_reentrant_even_on_one_thread() {
    let server = RedisServer::start();
    let client = client(&server);
    let mutex = client.get_mutex("mutex");
    assert_eq!(mutex.name(), "mutex");
    let guard = mutex.lock().unwrap();
    assert!(mutex.is_locked().unwrap());
    assert!(mutex.try_lock().unwrap().is_none());
    assert!(
        mutex
            .try_lock_for(Duration::from_millis(100), None)
            .unwrap()
            .is_none()
    );
    // Released on another thread, it is free for this one again.
    std::thread::spawn(move || guard.unlock())
        .join()
        .unwrap()
        .unwrap();
    let guard = mutex.lock_with_lease(Duration::from_secs(5)).unwrap();
    assert_eq!(mutex.request_revocation().unwrap(), 1);
    assert!(mutex.force_unlock().unwrap());
    assert!(matches!(guard.unlock(), Err(Error::LockLost { .. })));
}

#[test]
fn a_latch_lets_waiters_go_at_zero() {
    let server = RedisServer::start();
    let client = client(&server);
    let latch = client.get_count_down_latch("latch");
    assert_eq!(latch.name(), "latch");
    assert!(latch.try_set_count(2).unwrap());
    assert!(!latch.try_set_count(5).unwrap(), "already set");
    assert_eq!(latch.get_count().unwrap(), 2);
    assert!(!latch.await_for(Duration::from_millis(100)).unwrap());
    let waiter = latch.clone();
    let opened = Arc::new(AtomicBool::new(false));
    let seen = opened.clone();
    let waiting = std::thread::spawn(move || {
        waiter.await_zero().unwrap();
        seen.store(true, Ordering::SeqCst);
    });
    assert_eq!(latch.count_down().unwrap(), 1);
    std::thread::sleep(Duration::from_millis(100));
    assert!(!opened.load(Ordering::SeqCst), "opened at 1");
    assert_eq!(latch.count_down().unwrap(), 0);
    waiting.join().unwrap();
    assert!(opened.load(Ordering::SeqCst));
    assert!(latch.await_for(Duration::from_millis(10)).unwrap());
    assert!(latch.try_set_count(1).unwrap());
    assert!(latch.delete().unwrap());
    assert_eq!(latch.get_count().unwrap(), 0);
}

#[test]
fn a_semaphore_counts_permits_across_threads() {
    let server = RedisServer::start();
    let client = client(&server);
    let semaphore = client.get_semaphore("permits");
    assert_eq!(semaphore.name(), "permits");
    assert!(semaphore.try_set_permits(2).unwrap());
    semaphore.acquire(2).unwrap();
    assert_eq!(semaphore.available_permits().unwrap(), 0);
    assert!(!semaphore.try_acquire(1).unwrap());
    assert!(
        !semaphore
            .try_acquire_for(1, Duration::from_millis(100))
            .unwrap()
    );
    // A waiter on another thread gets a permit released here.
    let waiter = semaphore.clone();
    let waiting = std::thread::spawn(move || waiter.try_acquire_for(1, Duration::from_secs(5)));
    std::thread::sleep(Duration::from_millis(100));
    semaphore.release(1).unwrap();
    assert!(waiting.join().unwrap().unwrap());
    semaphore.release(2).unwrap();
    assert_eq!(semaphore.add_permits(1).unwrap(), 3);
    assert_eq!(semaphore.drain_permits().unwrap(), 3);
    assert_eq!(semaphore.available_permits().unwrap(), 0);
}

#[test]
fn a_permit_expirable_semaphore_hands_out_renewed_permits() {
    let server = RedisServer::start();
    let client = builder(&server)
        .watchdog_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let semaphore = client.get_permit_expirable_semaphore("expirable");
    assert_eq!(semaphore.name(), "expirable");
    assert!(semaphore.try_set_permits(3).unwrap());
    let permit = semaphore.acquire().unwrap();
    assert_eq!(permit.name(), "expirable");
    assert_eq!(permit.ids().len(), 1);
    assert!(permit.fencing_token() > 0);
    // Renewed while this thread sleeps past its lease.
    std::thread::sleep(Duration::from_millis(700));
    assert!(!permit.is_lost());
    assert_eq!(semaphore.available_permits().unwrap(), 2);
    let two = semaphore.acquire_many(2).unwrap();
    assert_eq!(two.ids().len(), 2);
    assert!(semaphore.try_acquire().unwrap().is_none());
    assert!(
        semaphore
            .try_acquire_for(1, Duration::from_millis(100), None)
            .unwrap()
            .is_none()
    );
    // A revocation request, heard by the holder waiting for it.
    assert_eq!(semaphore.request_revocation().unwrap(), 3);
    assert!(
        two.wait_revocation_requested(Duration::from_secs(5))
            .unwrap()
    );
    assert!(two.is_revocation_requested());
    two.release().unwrap();
    // Given back by id elsewhere: the guard's own release finds it gone.
    let id = permit.ids()[0].clone();
    let by_id = semaphore.clone();
    elsewhere(move || by_id.release_by_id(&id).unwrap());
    assert!(matches!(permit.release(), Err(Error::PermitLost { .. })));
    // A fixed lease runs out: the guard knows, and the permit came back.
    let fixed = semaphore
        .acquire_with_lease(Duration::from_millis(200))
        .unwrap();
    assert!(fixed.wait_lost(Duration::from_secs(3)).unwrap());
    // A guard counts its lease lost a clock margin (1% + 2 ms) before Redis expires it.
    let all_back = || {
        let by = std::time::Instant::now() + Duration::from_secs(1);
        while semaphore.available_permits().unwrap() != 3 && std::time::Instant::now() < by {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(semaphore.available_permits().unwrap(), 3);
    };
    all_back();
    let updated = semaphore.acquire().unwrap();
    updated.update_lease(Duration::from_millis(200)).unwrap();
    assert!(updated.wait_lost(Duration::from_secs(3)).unwrap());
    all_back();
    assert_eq!(semaphore.add_permits(-1).unwrap(), 2);
}

#[test]
fn a_multilock_takes_locks_of_two_clients_as_one() {
    let server = RedisServer::start();
    let (a, b) = (client(&server), client(&server));
    let multi = MultiLock::new([a.get_lock("account:1"), b.get_lock("account:2")]);
    let guard = multi.lock().unwrap();
    assert_eq!(guard.parts().len(), 2);
    assert!(!guard.is_lost());
    assert!(!guard.wait_lost(Duration::from_millis(50)).unwrap());
    let part = a.get_lock("account:2");
    assert!(elsewhere(move || part.try_lock().unwrap().is_none()));
    let other = multi.clone();
    assert!(elsewhere(move || other.try_lock().unwrap().is_none()));
    guard.unlock().unwrap();
    let guard = multi
        .try_lock_for(Duration::from_secs(1), Some(Duration::from_secs(5)))
        .unwrap()
        .expect("free again");
    guard.unlock().unwrap();
    multi
        .lock_with_lease(Duration::from_secs(5))
        .unwrap()
        .unlock()
        .unwrap();
    assert!(matches!(
        MultiLock::new([]).lock(),
        Err(Error::InvalidArgument(_))
    ));
}

/// A part that fails names its lock and its server, on acquire and on release.
#[test]
fn a_failed_part_names_its_lock_and_server() {
    let one = RedisServer::start();
    let mut two = RedisServer::start();
    let (a, b) = (client(&one), client(&two));
    let multi = MultiLock::new([a.get_lock("stock:1"), b.get_lock("stock:2")]);
    let guard = multi.lock().unwrap();
    two.kill();
    let dead = format!("127.0.0.1:{}", two.port());
    let released = guard.unlock().unwrap_err().to_string();
    assert!(
        released.starts_with(&format!("1 part(s) failed: lock `stock:2` on {dead}: ")),
        "{released}"
    );
    let acquired = multi.lock().unwrap_err();
    assert!(
        matches!(&acquired, Error::Part { name, address, .. } if name == "stock:2" && *address == dead),
        "{acquired:?}"
    );
    assert!(
        acquired
            .to_string()
            .starts_with(&format!("lock `stock:2` on {dead}: ")),
        "{acquired}"
    );
    // The live part was given back before the failure was reported.
    assert!(!a.get_lock("stock:1").is_locked().unwrap());
}

#[test]
fn a_redlock_is_held_on_a_majority_of_servers() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let clients: Vec<Client> = servers.iter().map(client).collect();
    let redlock = RedLock::new(clients.iter().map(|c| c.get_lock("job")))
        .instance_timeout(Duration::from_millis(250))
        .retry_delay(Duration::from_millis(20));
    assert_eq!(redlock.quorum(), 2);
    let guard = redlock.lock().unwrap();
    assert_eq!(guard.granted(), 3);
    assert_eq!(guard.fencing_tokens().len(), 3);
    assert!(!guard.is_lost());
    assert!(guard.validity_deadline() > Instant::now());
    assert!(!guard.wait_lost(Duration::from_millis(50)).unwrap());
    let other = redlock.clone();
    assert!(elsewhere(move || other.try_lock().unwrap().is_none()));
    guard.unlock().unwrap();
    let fixed = redlock
        .try_lock_for(Duration::from_secs(1), Some(Duration::from_millis(400)))
        .unwrap()
        .expect("free again");
    assert!(fixed.wait_lost(Duration::from_secs(3)).unwrap());
    drop(fixed);
    redlock
        .lock_with_lease(Duration::from_secs(5))
        .unwrap()
        .unlock()
        .unwrap();
}

#[test]
fn close_waits_for_dropped_guards_and_refuses_new_acquires() {
    let server = RedisServer::start();
    let client = client(&server);
    let lock = client.get_lock("closing");
    for i in 0..10 {
        drop(client.get_lock(&format!("dropped:{i}")).lock().unwrap());
    }
    let left = client.clone().close().unwrap();
    assert!(left.is_empty(), "still under way: {left:?}");
    assert!(matches!(lock.lock(), Err(Error::Closed)));
    let other = ferrisson::blocking::Client::connect(&server.url()).unwrap();
    for i in 0..10 {
        assert!(!other.get_lock(&format!("dropped:{i}")).is_locked().unwrap());
    }
}

#[test]
fn builder_settings_are_checked() {
    let missing = Client::builder().build();
    assert!(matches!(missing, Err(Error::Config(_))), "{missing:?}");
    let both = Client::builder()
        .url("redis://127.0.0.1:1")
        .cluster(["redis://127.0.0.1:2"])
        .build();
    assert!(matches!(both, Err(Error::Config(_))), "{both:?}");
    let refused = Client::builder()
        .url("redis://127.0.0.1:1")
        .connection_timeout(Duration::from_millis(300))
        .build();
    assert!(matches!(refused, Err(Error::Connect { .. })), "{refused:?}");
}
