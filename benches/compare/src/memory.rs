//! Workload 6: what locking leaves in Redis. MEM_NAMES distinct names are locked and released
//! once each through the library's adapter, and the keys (DBSIZE, from INFO keyspace) and bytes
//! (`used_memory`, INFO memory) Redis holds are compared with before the run: right after the
//! last release, and again MEM_WAIT later, so that keys with a short TTL (release latches and
//! the like) show apart from keys that stay.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::libs::{Lib, Owner};
use crate::workloads::{join, spawn_task};

pub const MEM_NAMES: usize = 20_000;
pub const MEM_TASKS: usize = 8;
/// Names not reached by then are not locked (the result says how many were).
pub const MEM_CAP: Duration = Duration::from_secs(60);
/// The second measurement, this long after the last release.
pub const MEM_WAIT: Duration = Duration::from_secs(6);
/// Idle time before the baseline. Redis shrinks the buffers of a connection idle for over 2 s,
/// so the baseline and the measurement after MEM_WAIT find the library's connections alike (with
/// 1 s, the buffers shrinking during the wait showed as up to 165 kB less than before).
pub const MEM_SETTLE: Duration = Duration::from_secs(4);
/// Redis Cluster hash slots: the most per-slot counters there can be.
pub const SLOTS: usize = 16_384;
/// The per-slot fencing counters of ferrisson; a leftover made only of these is bounded by SLOTS.
pub const SLOT_COUNTER_PREFIX: &str = "ferrisson_token:{";
/// How many key names (one per prefix) the result keeps as samples.
pub const SAMPLES: usize = 3;

fn name(i: usize) -> String {
    format!("bench_mem_{i}")
}

/// Keys and bytes, as differences to before the run.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Left {
    pub keys: i64,
    /// Of `keys`, those with a TTL (they go by themselves).
    pub with_ttl: i64,
    pub bytes: i64,
}

impl std::ops::Sub for Left {
    type Output = Left;
    fn sub(self, o: Left) -> Left {
        Left {
            keys: self.keys - o.keys,
            with_ttl: self.with_ttl - o.with_ttl,
            bytes: self.bytes - o.bytes,
        }
    }
}

pub struct Memory {
    /// Distinct names locked and released (MEM_NAMES unless stopped at MEM_CAP).
    pub names: usize,
    pub capped: bool,
    pub right_after: Left,
    /// MEM_WAIT after the last release.
    pub after_wait: Left,
    /// After the wait, every key in the database is a per-slot counter (SLOT_COUNTER_PREFIX).
    pub only_slot_counters: bool,
    /// Right after the run: up to SAMPLES keys left, one per prefix, each with its TTL.
    pub samples: Vec<String>,
}

impl Memory {
    pub fn bytes_per_name(&self) -> f64 {
        self.after_wait.bytes as f64 / self.names.max(1) as f64
    }
}

/// Keys, keys with a TTL (INFO keyspace, db0) and `used_memory` (INFO memory), now.
pub async fn now(admin: &mut redis::aio::MultiplexedConnection) -> Result<Left> {
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .arg("keyspace")
        .query_async(admin)
        .await?;
    Ok(parse_info(&info))
}

pub fn parse_info(info: &str) -> Left {
    let mut l = Left::default();
    for line in info.lines() {
        if let Some(v) = line.strip_prefix("used_memory:") {
            l.bytes = v.trim().parse().unwrap_or(0);
        }
        if let Some(v) = line.strip_prefix("db0:") {
            for field in v.trim().split(',') {
                match field.split_once('=') {
                    Some(("keys", n)) => l.keys = n.parse().unwrap_or(0),
                    Some(("expires", n)) => l.with_ttl = n.parse().unwrap_or(0),
                    _ => {}
                }
            }
        }
    }
    l
}

/// The part of a key name before its first `:`, `{` or digit: keys with one shape share it.
fn prefix(key: &str) -> &str {
    let end = key
        .find(|c: char| c == ':' || c == '{' || c.is_ascii_digit())
        .unwrap_or(key.len());
    &key[..end]
}

/// Up to SAMPLES keys of the database, one per prefix, each with its TTL.
async fn sample_keys(admin: &mut redis::aio::MultiplexedConnection) -> Result<Vec<String>> {
    let mut picked: Vec<String> = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("COUNT")
            .arg(1000)
            .query_async(admin)
            .await?;
        for k in keys {
            if picked.len() < SAMPLES && !picked.iter().any(|p| prefix(p) == prefix(&k)) {
                picked.push(k);
            }
        }
        cursor = next;
        if cursor == 0 || picked.len() == SAMPLES {
            break;
        }
    }
    let mut out = Vec::new();
    for k in picked {
        let ttl: i64 = redis::cmd("PTTL").arg(&k).query_async(admin).await?;
        out.push(if ttl >= 0 {
            format!("{k} (TTL {:.1} s)", ttl as f64 / 1000.0)
        } else {
            format!("{k} (no TTL)")
        });
    }
    Ok(out)
}

/// Keys in the database that are not per-slot counters.
async fn other_than_slot_counters(admin: &mut redis::aio::MultiplexedConnection) -> Result<usize> {
    let mut n = 0;
    let mut cursor: u64 = 0;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("COUNT")
            .arg(1000)
            .query_async(admin)
            .await?;
        n += keys
            .iter()
            .filter(|k| !k.starts_with(SLOT_COUNTER_PREFIX))
            .count();
        cursor = next;
        if cursor == 0 {
            return Ok(n);
        }
    }
}

/// `tasks` tasks lock and release names `first..first + count` once each, stopping at `cap`.
/// Returns how many names were locked and released, and whether the cap stopped it.
async fn cycle_names<L: Lib>(
    lib: &Arc<L>,
    tasks: usize,
    first: usize,
    count: usize,
    cap: Duration,
) -> Result<(usize, bool)> {
    let next = Arc::new(AtomicUsize::new(first));
    let done = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let (lib, next, done) = (lib.clone(), next.clone(), done.clone());
        handles.push(spawn_task::<L, _, _>(async move {
            let mut capped = false;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= first + count {
                    break;
                }
                if start.elapsed() > cap {
                    capped = true;
                    break;
                }
                let mut o = lib.owner(&name(i)).await?;
                o.lock().await?;
                o.unlock().await?;
                done.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<_, anyhow::Error>(capped)
        }));
    }
    let mut capped = false;
    let mut first_err = None;
    for h in handles {
        match join(h).await {
            Ok(c) => capped |= c,
            Err(err) => {
                first_err.get_or_insert(err);
            }
        }
    }
    match first_err {
        Some(err) => Err(err),
        None => Ok((done.load(Ordering::Relaxed), capped)),
    }
}

/// On a flushed server: connect, one warm-up name per task (connections, pools and scripts in
/// place before the baseline), MEM_SETTLE idle, measure, lock and release MEM_NAMES new names, measure right
/// after and MEM_WAIT later. The library stays connected until the end, so its connections
/// weigh the same in every measurement.
pub async fn measure<L: Lib>(
    url: String,
    mut admin: redis::aio::MultiplexedConnection,
) -> Result<Memory> {
    let lib = Arc::new(L::connect(&url).await?);
    cycle_names(&lib, MEM_TASKS, MEM_NAMES, MEM_TASKS, MEM_CAP).await?;
    // Redis 7 allocates a command's latency histogram (about 25 kB) on its first call: SCAN and
    // PTTL, which the measurement sends, run once before the baseline.
    let _: (u64, Vec<String>) = redis::cmd("SCAN")
        .arg(0)
        .arg("COUNT")
        .arg(1)
        .query_async(&mut admin)
        .await?;
    let _: i64 = redis::cmd("PTTL")
        .arg(name(MEM_NAMES))
        .query_async(&mut admin)
        .await?;
    tokio::time::sleep(MEM_SETTLE).await;
    let before = now(&mut admin).await?;
    let start = Instant::now();
    let (names, capped) = cycle_names(&lib, MEM_TASKS, 0, MEM_NAMES, MEM_CAP).await?;
    let end = Instant::now();
    let right_after = now(&mut admin).await? - before;
    let samples = sample_keys(&mut admin).await?;
    tokio::time::sleep_until((end + MEM_WAIT).into()).await;
    let after_wait = now(&mut admin).await? - before;
    let only_slot_counters = other_than_slot_counters(&mut admin).await? == 0;
    drop(lib);
    eprintln!(
        "   {names} names in {:.1} s; left right after: {right_after:?}, after {} s: {after_wait:?}; samples: {samples:?}",
        (end - start).as_secs_f64(),
        MEM_WAIT.as_secs()
    );
    Ok(Memory {
        names,
        capped,
        right_after,
        after_wait,
        only_slot_counters,
        samples,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_is_read() {
        let info = "# Memory\r\nused_memory:1234567\r\nused_memory_human:1.18M\r\n\r\n# Keyspace\r\ndb0:keys=42,expires=7,avg_ttl=1000\r\n";
        assert_eq!(
            parse_info(info),
            Left {
                keys: 42,
                with_ttl: 7,
                bytes: 1_234_567
            }
        );
        // An empty database has no db0 line.
        assert_eq!(
            parse_info("used_memory:10\r\n# Keyspace\r\n"),
            Left {
                keys: 0,
                with_ttl: 0,
                bytes: 10
            }
        );
    }

    #[test]
    fn prefixes_group_keys_of_one_shape() {
        assert_eq!(prefix("ferrisson_token:{abc}"), "ferrisson_token");
        assert_eq!(prefix("lock:bench_mem_1"), "lock");
        assert_eq!(prefix("bench_mem_17"), "bench_mem_");
        assert_eq!(prefix("bench_mem_17"), prefix("bench_mem_9"));
    }
}
