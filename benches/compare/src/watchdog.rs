//! Workload 5: hold many locks whose leases are renewed, and count what the renewals cost: Redis
//! commands per renewal tick (INFO commandstats deltas) and CPU time of this process and of
//! redis-server over the window. Only for libraries that renew leases.

use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow};
use futures::{StreamExt, TryStreamExt};

use crate::libs::{RETRY, e};
use crate::server::{commandstats, cpu_now};

pub const WD_LOCKS: usize = 10_000;
/// Lease of 3 s, renewed every 1 s (ferrisson: watchdog_timeout / 3).
pub const WD_LEASE: Duration = Duration::from_secs(3);
pub const WD_INTERVAL: Duration = Duration::from_secs(1);
/// The measured window: a whole number of renewal intervals.
pub const WD_TICKS: u32 = 5;
const ACQUIRE_CONCURRENCY: usize = 200;

pub struct Watchdog {
    pub locks: usize,
    pub acquire_s: f64,
    pub script_calls_per_tick: f64,
    pub cmds_per_tick: f64,
    pub client_cpu_ms_per_tick: f64,
    pub server_cpu_ms_per_tick: f64,
}

type Hold = Box<dyn Any + Send>;

fn key(i: usize) -> String {
    format!("bench_wd_{i}")
}

pub async fn hold_ferrisson(url: &str) -> Result<Hold> {
    let client = ferrisson::Client::builder()
        .url(url)
        .watchdog_timeout(WD_LEASE)
        .build()
        .await
        .map_err(e)?;
    let guards: Vec<ferrisson::LockGuard> = futures::stream::iter(0..WD_LOCKS)
        .map(|i| {
            let lock = client.get_lock(&key(i));
            async move { lock.lock().await.map_err(e) }
        })
        .buffer_unordered(ACQUIRE_CONCURRENCY)
        .try_collect()
        .await?;
    Ok(Box::new((client, guards)))
}

pub async fn hold_rlock(url: &str) -> Result<Hold> {
    let mgr = rlock::async_lock::RLock::new(url).await?;
    let opts = rlock::AcquireOptions::builder()
        .ttl(WD_LEASE)
        .renewal_mode(rlock::RenewalMode::Interval(WD_INTERVAL))
        .retry_interval(RETRY)
        .build()
        .map_err(e)?;
    let guards: Vec<_> = futures::stream::iter(0..WD_LOCKS)
        .map(|i| {
            let (mgr, opts) = (mgr.clone(), opts.clone());
            async move {
                mgr.acquire_mutex_with_options(key(i), opts)
                    .await
                    .map_err(e)
            }
        })
        .buffer_unordered(ACQUIRE_CONCURRENCY)
        .try_collect()
        .await?;
    Ok(Box::new((mgr, guards)))
}

pub async fn hold_async_redis_lock(url: &str) -> Result<Hold> {
    let locker = async_redis_lock::Locker::from_redis_url(url)
        .await
        .map_err(e)?;
    // The defaults already are a 3 s TTL extended every 1 s.
    let opts = async_redis_lock::Options::new()
        .ttl(WD_LEASE)
        .extend(WD_INTERVAL)
        .retry(RETRY)
        .timeout(None);
    let guards: Vec<_> = futures::stream::iter(0..WD_LOCKS)
        .map(|i| {
            let (locker, opts) = (locker.clone(), opts.clone());
            async move { locker.acquire_with_options(&opts, key(i)).await.map_err(e) }
        })
        .buffer_unordered(ACQUIRE_CONCURRENCY)
        .try_collect()
        .await?;
    Ok(Box::new((locker, guards)))
}

pub async fn hold_distkit(url: &str) -> Result<Hold> {
    let client = redis::Client::open(url)?;
    let conn = client.get_connection_manager().await?;
    let guards: Vec<_> = futures::stream::iter(0..WD_LOCKS)
        .map(|i| {
            let conn = conn.clone();
            async move {
                let k = distkit::DistkitRedisKey::try_from(key(i)).map_err(e)?;
                // distkit renews every ttl/3, so a 3 s TTL renews every 1 s.
                let m = distkit::lock::Mutex::new(
                    distkit::lock::LockOptions::builder(k, conn)
                        .ttl(WD_LEASE)
                        .build(),
                );
                let g = m.lock().await.map_err(e)?;
                Ok::<_, anyhow::Error>((m, g))
            }
        })
        .buffer_unordered(ACQUIRE_CONCURRENCY)
        .try_collect()
        .await?;
    Ok(Box::new(guards))
}

/// rslock renews only inside `LockManager::using`, each lock on its own timer firing at
/// validity - 500 ms; a 1.5 s TTL makes that about every 1 s. Each `using` routine waits until
/// the returned hold is dropped.
pub async fn hold_rslock(url: &str) -> Result<Hold> {
    let mgr = rslock::LockManager::new(vec![url.to_owned()]);
    let (tx, rx) = tokio::sync::watch::channel(());
    let held = Arc::new(AtomicUsize::new(0));
    let sem = Arc::new(tokio::sync::Semaphore::new(ACQUIRE_CONCURRENCY));
    let mut handles = Vec::with_capacity(WD_LOCKS);
    for i in 0..WD_LOCKS {
        let (mgr, mut rx, held, sem) = (mgr.clone(), rx.clone(), held.clone(), sem.clone());
        handles.push(tokio::spawn(async move {
            let permit = sem.acquire_owned().await.unwrap();
            let mut permit = Some(permit);
            let k = key(i);
            mgr.using(k.as_bytes(), Duration::from_millis(1500), async || {
                held.fetch_add(1, Ordering::SeqCst);
                drop(permit.take());
                let _ = rx.changed().await;
            })
            .await
            .map_err(e)
        }));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while held.load(Ordering::SeqCst) < WD_LOCKS {
        if let Some(h) = handles.iter().find(|h| h.is_finished()) {
            let _ = h;
            return Err(anyhow!(
                "an rslock `using` call ended before the hold was released"
            ));
        }
        if Instant::now() > deadline {
            return Err(anyhow!(
                "rslock: only {} of {WD_LOCKS} locks held after 60 s",
                held.load(Ordering::SeqCst)
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(Box::new((tx, handles)))
}

pub async fn measure(
    hold: impl std::future::Future<Output = Result<Hold>>,
    interval: Duration,
    mut admin: redis::aio::MultiplexedConnection,
) -> Result<Watchdog> {
    let t = Instant::now();
    let hold = hold.await?;
    let acquire_s = t.elapsed().as_secs_f64();
    // Let the acquisition burst settle and the first renewals happen.
    tokio::time::sleep(interval + interval / 2).await;
    let s0 = commandstats(&mut admin).await?;
    let (c0, r0) = cpu_now();
    tokio::time::sleep(interval * WD_TICKS).await;
    let s1 = commandstats(&mut admin).await?;
    let (c1, r1) = cpu_now();
    drop(hold);
    // Give background releases a moment before the caller flushes the keyspace.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let ticks = WD_TICKS as f64;
    Ok(Watchdog {
        locks: WD_LOCKS,
        acquire_s,
        script_calls_per_tick: (s1.scripts - s0.scripts) as f64 / ticks,
        cmds_per_tick: (s1.total - s0.total) as f64 / ticks,
        client_cpu_ms_per_tick: (c1 - c0) / ticks,
        server_cpu_ms_per_tick: (r1 - r0) / ticks,
    })
}
