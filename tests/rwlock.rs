//! RReadWriteLock: sharing, exclusion, nesting (a write in a write, a read in a write), downgrade,
//! the refused upgrade (a write nested in a read), per-hold leases, the Redisson layout, dead
//! readers, and a many-client checker.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use ferrisson::Error;
use futures::StreamExt;
use redis::AsyncCommands;
use support::{Elsewhere, HolderProcess, RedisServer, builder, client, join_within};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_share_and_writers_exclude() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let a = client.get_read_write_lock("doc");
    // Two more tasks, each with handles of both sides; every acquisition is an owner of its own.
    let b = Elsewhere::rw(&client.get_read_write_lock("doc"));
    let c = Elsewhere::rw(&client.get_read_write_lock("doc"));

    let ra = a.read_lock().lock().await.unwrap();
    let rb = b.0.try_lock().await.unwrap().expect("readers share");
    assert!(
        c.1.try_lock().await.unwrap().is_none(),
        "a writer waits for readers"
    );
    assert!(
        a.write_lock().try_lock().await.unwrap().is_none(),
        "a writer waits for the readers of its own task too"
    );
    ra.unlock().await.unwrap();
    assert!(
        c.1.try_lock().await.unwrap().is_none(),
        "one reader is enough to exclude"
    );
    rb.unlock().await.unwrap();

    let w =
        c.1.try_lock()
            .await
            .unwrap()
            .expect("free once the readers left");
    assert!(
        a.read_lock().try_lock().await.unwrap().is_none(),
        "a writer excludes readers"
    );
    assert!(
        b.1.try_lock().await.unwrap().is_none(),
        "a writer excludes writers"
    );
    assert!(
        c.1.try_lock().await.unwrap().is_none(),
        "a writer excludes another write of the task that took it"
    );
    // The queries answer for the hold whose scope the caller runs in, through any handle.
    assert!(w.scope(a.write_lock().is_held()).await.unwrap());
    assert!(
        !w.scope(a.read_lock().is_held()).await.unwrap(),
        "the writer holds no read"
    );
    assert!(!c.1.is_held().await.unwrap(), "outside any scope");
    assert!(
        !a.write_lock().is_held().await.unwrap(),
        "outside any scope"
    );
    w.unlock().await.unwrap();
    assert!(!a.read_lock().is_locked().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_write_holds_count_and_the_writer_reads_inside_its_scope() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let rw = client.get_read_write_lock("reentry");
    let w1 = rw.write_lock().lock().await.unwrap();
    // Outside the write's scope, this task's next write and read are other acquisitions.
    assert!(rw.write_lock().try_lock().await.unwrap().is_none());
    assert!(
        rw.read_lock().try_lock().await.unwrap().is_none(),
        "a reader beside the writer in its task waits"
    );
    let w2 = w1.scope(rw.write_lock().lock()).await.unwrap();
    assert_eq!(w1.fencing_token(), w2.fencing_token());
    let (r1, r2) = w1
        .scope(async {
            let r1 = rw.read_lock().lock().await.unwrap();
            let r2 = rw.read_lock().try_lock().await.unwrap();
            (r1, r2.expect("write->read, nested"))
        })
        .await;
    assert_eq!(w1.hold_count().await.unwrap(), 2);
    assert_eq!(w2.hold_count().await.unwrap(), 2);
    assert_eq!(r1.hold_count().await.unwrap(), 2);
    assert_eq!(w1.scope(rw.write_lock().hold_count()).await.unwrap(), 2);
    assert_eq!(w1.scope(rw.read_lock().hold_count()).await.unwrap(), 2);
    // Another handle of the name nests in the scope too; another task does not.
    let same = client.get_read_write_lock("reentry");
    let r3 = w1
        .scope(same.read_lock().try_lock())
        .await
        .unwrap()
        .expect("any handle of the name");
    assert_eq!(r1.hold_count().await.unwrap(), 3);
    r3.unlock().await.unwrap();
    let other = Elsewhere::rw(&client.get_read_write_lock("reentry"));
    assert!(other.0.try_lock().await.unwrap().is_none());
    for g in [r2, r1, w2, w1] {
        g.unlock().await.unwrap();
    }
    assert!(!rw.read_lock().is_locked().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releasing_the_write_hold_while_reading_downgrades() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let rw = client.get_read_write_lock("downgrade");
    let w = rw.write_lock().lock().await.unwrap();
    // The writer's own read, nested in its scope; it outlives the write hold below.
    let r = w.scope(rw.read_lock().lock()).await.unwrap();
    let other = client.get_read_write_lock("downgrade");
    let waiting_reader = {
        let read = other.read_lock();
        tokio::spawn(async move { read.lock().await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiting_reader.is_finished());

    w.unlock().await.unwrap();
    let mut raw = server.raw().await;
    let mode: String = raw.hget("downgrade", "mode").await.unwrap();
    assert_eq!(mode, "read");
    assert_eq!(r.hold_count().await.unwrap(), 1, "the read hold stays");
    let other_read = tokio::time::timeout(Duration::from_secs(2), waiting_reader)
        .await
        .expect("the write release woke the reader")
        .unwrap()
        .unwrap();
    let third = Elsewhere::rw(&client.get_read_write_lock("downgrade"));
    assert!(
        third.1.try_lock().await.unwrap().is_none(),
        "still read-locked"
    );
    r.unlock().await.unwrap();
    other_read.unlock().await.unwrap();
    assert!(!rw.read_lock().is_locked().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_nested_in_a_read_scope_is_refused_at_once() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let rw = client.get_read_write_lock("upgrade");
    let r = rw.read_lock().lock().await.unwrap();
    let started = Instant::now();
    let err = r.scope(rw.write_lock().lock()).await.unwrap_err();
    assert!(
        matches!(&err, Error::UpgradeNotSupported { name } if name == "upgrade"),
        "{err:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(1));
    assert!(err.to_string().contains("upgrade"));
    // Also when other readers are in, for a bounded wait, and inside `with_lock`'s work.
    let other = client.get_read_write_lock("upgrade");
    let r2 = other.read_lock().lock().await.unwrap();
    let started = Instant::now();
    assert!(matches!(
        r.scope(rw.write_lock().try_lock_for(Duration::from_secs(5), None))
            .await,
        Err(Error::UpgradeNotSupported { .. })
    ));
    let write = rw.write_lock();
    let in_work = rw
        .read_lock()
        .with_lock(|_| async { write.try_lock().await.map(|g| g.is_some()) })
        .await
        .unwrap();
    assert!(
        matches!(in_work, Err(Error::UpgradeNotSupported { .. })),
        "{in_work:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(1));
    // Outside any read scope, this task's write is another acquisition: it waits, no error.
    assert!(
        rw.write_lock()
            .try_lock_for(Duration::from_millis(200), None)
            .await
            .unwrap()
            .is_none()
    );
    r2.unlock().await.unwrap();
    r.unlock().await.unwrap();
    let w = rw
        .write_lock()
        .try_lock()
        .await
        .unwrap()
        .expect("free after the reads");
    w.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_layout_and_messages_follow_redisson() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let mut raw = server.raw().await;
    let subscriber = redis::Client::open(server.url()).unwrap();
    let mut pubsub = subscriber.get_async_pubsub().await.unwrap();
    pubsub.subscribe("redisson_rwlock:{layout}").await.unwrap();
    let mut messages = pubsub.into_on_message();

    let rw = client.get_read_write_lock("layout");
    let r1 = rw
        .read_lock()
        .lock_with_lease(Duration::from_secs(20))
        .await
        .unwrap();
    // A read nested in the first: one owner, hold count 2, one timeout key per hold.
    let r2 = r1
        .scope(rw.read_lock().lock_with_lease(Duration::from_secs(20)))
        .await
        .unwrap();
    let fields: Vec<(String, String)> = raw.hgetall("layout").await.unwrap();
    let owner = fields.iter().find(|(f, _)| f != "mode").unwrap().0.clone();
    assert!(owner.starts_with(&client.id().to_string()));
    assert!(fields.contains(&("mode".into(), "read".into())));
    assert!(fields.contains(&(owner.clone(), "2".into())));
    for k in 1..=2 {
        let key = format!("{{layout}}:{owner}:rwlock_timeout:{k}");
        let ttl: i64 = raw.pttl(&key).await.unwrap();
        assert!(ttl > 18_000 && ttl <= 20_000, "{key}: {ttl}");
    }
    r2.unlock().await.unwrap();
    r1.unlock().await.unwrap();
    let msg = tokio::time::timeout(Duration::from_secs(2), messages.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        msg.get_payload::<String>().unwrap(),
        "0",
        "the last reader's release wakes one"
    );

    let w = rw.write_lock().lock().await.unwrap();
    let fields: Vec<(String, String)> = raw.hgetall("layout").await.unwrap();
    assert!(fields.contains(&("mode".into(), "write".into())));
    // A new acquisition is a new owner (which may take the readers' name again, gone with their
    // last hold): `<client-uuid>:<n>:write`.
    assert!(
        fields
            .iter()
            .any(|(f, v)| f.starts_with(&client.id().to_string())
                && f.ends_with(":write")
                && v == "1"),
        "{fields:?}"
    );
    let counter = rw.write_lock().token_counter_key();
    let token: u64 = raw.get(&counter).await.unwrap();
    assert_eq!(token, w.fencing_token());
    w.unlock().await.unwrap();
    let msg = tokio::time::timeout(Duration::from_secs(2), messages.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        msg.get_payload::<String>().unwrap(),
        "1",
        "a write release wakes everybody"
    );

    // Two reads of this task outside each other's scope are two owners: a field each.
    let s1 = rw
        .read_lock()
        .lock_with_lease(Duration::from_secs(20))
        .await
        .unwrap();
    let s2 = rw
        .read_lock()
        .lock_with_lease(Duration::from_secs(20))
        .await
        .unwrap();
    let fields: Vec<(String, String)> = raw.hgetall("layout").await.unwrap();
    let readers: Vec<&(String, String)> = fields.iter().filter(|(f, _)| f != "mode").collect();
    assert_eq!(readers.len(), 2, "{fields:?}");
    assert!(readers.iter().all(|(_, count)| count == "1"), "{fields:?}");
    s1.unlock().await.unwrap();
    s2.unlock().await.unwrap();
    // Left: the fencing counter, and the release latches until their few seconds are up.
    let mut left: Vec<String> = raw.keys("*").await.unwrap();
    left.retain(|k| {
        !k.starts_with("redisson_unlock_latch:{layout}:") && !k.starts_with("ferrisson_client:")
    });
    assert_eq!(left, vec![counter]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_read_lease_never_shortens_a_long_one() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let long = client.get_read_write_lock("leases");
    let short = Elsewhere::rw(&client.get_read_write_lock("leases"));
    let long_lease = Duration::from_millis(1500);
    let acquired = Instant::now();
    let _g_long = long.read_lock().lock_with_lease(long_lease).await.unwrap();
    let _g_short = short
        .0
        .lock_with_lease(Duration::from_millis(200))
        .await
        .unwrap();
    let ttl = long.read_lock().remaining_ttl().await.unwrap().unwrap();
    // Shortened by the short hold, it would be 200 ms at most; the rest of the way down from
    // 1500 ms is the time two round trips took.
    assert!(
        ttl > Duration::from_millis(1000),
        "the hash follows the longest hold: {ttl:?}"
    );

    let writer = Elsewhere::rw(&client.get_read_write_lock("leases"));
    let w = tokio::time::timeout(Duration::from_secs(5), writer.1.lock())
        .await
        .expect("the writer gets in once the longest lease ends")
        .unwrap();
    let waited = acquired.elapsed();
    assert!(
        waited >= long_lease - Duration::from_millis(50),
        "got in before the long lease ended: {waited:?}"
    );
    assert!(
        waited <= long_lease + Duration::from_millis(600),
        "got in late: {waited:?}"
    );
    w.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_reader_stops_counting_while_another_reader_renews() {
    let server = RedisServer::start();
    let lease = Duration::from_millis(600);
    let mut dead = HolderProcess::spawn(&server, "readers", lease.as_millis() as u64, "read");
    dead.locked(Duration::from_secs(10)).await;
    let mut raw = server.raw().await;
    let dead_hold = format!(
        "{{readers}}:{}:rwlock_timeout:1",
        only_reader(&mut raw, "readers").await
    );
    let client = builder(&server)
        .watchdog_timeout(lease)
        .build()
        .await
        .unwrap();
    let live = client.get_read_write_lock("readers");
    let live_guard = live.read_lock().lock().await.unwrap();
    dead.kill().await;

    let writer = client.get_read_write_lock("readers");
    let write = writer.write_lock();
    let task = tokio::spawn(async move { write.lock().await });
    // The live reader renews its own holds the whole time; the dead one's expire.
    tokio::time::sleep(lease * 2).await;
    assert!(
        !task.is_finished(),
        "the writer must still wait for the live reader"
    );
    assert!(!live_guard.is_lost());
    let fields: Vec<String> = raw.hkeys("readers").await.unwrap();
    assert!(
        fields.len() >= 2,
        "mode and the live reader remain: {fields:?}"
    );
    // The dead reader's hold was last renewed before the kill, a lease or more ago: Redis has
    // expired it unless the live reader's renewals extended it too.
    let kept: bool = raw.exists(&dead_hold).await.unwrap();
    assert!(!kept, "the live reader's renewals kept the dead one's hold");
    live_guard.unlock().await.unwrap();
    let w = tokio::time::timeout(Duration::from_secs(3), task)
        .await
        .expect("the writer gets in")
        .unwrap()
        .unwrap();
    w.unlock().await.unwrap();

    // A dead reader alone: the writer gets in once its lease has run out.
    let mut dead = HolderProcess::spawn(&server, "readers2", lease.as_millis() as u64, "read");
    dead.locked(Duration::from_secs(10)).await;
    dead.kill().await;
    let killed = Instant::now();
    let other = client.get_read_write_lock("readers2");
    let w2 = tokio::time::timeout(Duration::from_secs(3), other.write_lock().lock())
        .await
        .expect("freed by the dead reader's lease")
        .unwrap();
    // Its last grant or renewal ran before the kill, so Redis expires it within the lease;
    // the rest is for the writer to notice and retry in a loaded debug build.
    assert!(
        killed.elapsed() <= lease + Duration::from_millis(600),
        "took {:?}",
        killed.elapsed()
    );
    w2.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_purges_a_dead_reader_even_while_a_live_one_renews() {
    let server = RedisServer::start();
    let lease = Duration::from_millis(600);
    let client = builder(&server)
        .watchdog_timeout(lease)
        .build()
        .await
        .unwrap();
    // The live reader and the writer take turns without overlapping; only the dead reader's
    // holds would keep the writer out if they were kept alive by the live reader's renewals.
    let mut dead = HolderProcess::spawn(&server, "mixed", lease.as_millis() as u64, "read");
    dead.locked(Duration::from_secs(10)).await;
    let mut raw = server.raw().await;
    let dead_hold = format!(
        "{{mixed}}:{}:rwlock_timeout:1",
        only_reader(&mut raw, "mixed").await
    );
    dead.kill().await;
    let killed = Instant::now();
    // When the dead reader's hold expires, as Redis counts it: its last renewal ran anywhere
    // up to a third of the lease (or more, in a loaded build) before the kill, so the kill says
    // little. Nothing renews the hold any more; a renewal on its way at the kill would only
    // push the expiry later. (Already gone, it gives no lower bound: -2 counts as 0.)
    let asked = Instant::now();
    let ttl: i64 = raw.pttl(&dead_hold).await.unwrap();
    let expires = asked + Duration::from_millis(ttl.max(0) as u64);
    let live = client.get_read_write_lock("mixed");
    let writer = client.get_read_write_lock("mixed");
    let got_in = loop {
        let r = live.read_lock().lock().await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        r.unlock().await.unwrap();
        if let Some(w) = writer.write_lock().try_lock().await.unwrap() {
            let got_in = Instant::now();
            w.unlock().await.unwrap();
            break got_in;
        }
        // The hold expires within the lease of the kill; this leaves two leases for the
        // rounds around it.
        assert!(
            killed.elapsed() < lease * 3,
            "the dead reader kept the writer out"
        );
    };
    // Redis clocks expiry in whole milliseconds on the wall clock: a few of slack.
    assert!(
        got_in + Duration::from_millis(10) >= expires,
        "the writer got in {:?} before the dead reader's hold expired",
        expires - got_in
    );
}

/// The owner of the only read hold on `name` (its one field besides `mode`).
async fn only_reader(raw: &mut redis::aio::MultiplexedConnection, name: &str) -> String {
    let fields: Vec<String> = raw.hkeys(name).await.unwrap();
    let owners: Vec<String> = fields.into_iter().filter(|f| f != "mode").collect();
    assert_eq!(owners.len(), 1, "one reader on {name}: {owners:?}");
    owners.into_iter().next().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_readers_and_writers_never_mix() {
    let server = RedisServer::start();
    let readers_in = Arc::new(AtomicI64::new(0));
    let writers_in = Arc::new(AtomicI64::new(0));
    let writes = Arc::new(AtomicUsize::new(0));
    let reads = Arc::new(AtomicUsize::new(0));
    let last_write_token = Arc::new(AtomicI64::new(0));
    let mut tasks = Vec::new();
    for c in 0..3 {
        let client = client(&server).await;
        for h in 0..4 {
            let rw = client.get_read_write_lock("checked");
            let (readers_in, writers_in) = (readers_in.clone(), writers_in.clone());
            let (writes, reads, last) = (writes.clone(), reads.clone(), last_write_token.clone());
            let writer = h == 0;
            tasks.push(tokio::spawn(async move {
                for round in 0..12 {
                    if writer {
                        let g = rw.write_lock().lock().await.unwrap();
                        assert_eq!(writers_in.fetch_add(1, Ordering::SeqCst), 0, "two writers");
                        assert_eq!(
                            readers_in.load(Ordering::SeqCst),
                            0,
                            "a writer among readers"
                        );
                        let token = g.fencing_token() as i64;
                        assert!(
                            last.swap(token, Ordering::SeqCst) < token,
                            "write tokens go up"
                        );
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        writers_in.fetch_sub(1, Ordering::SeqCst);
                        writes.fetch_add(1, Ordering::SeqCst);
                        g.unlock().await.unwrap();
                    } else {
                        let g = rw.read_lock().lock().await.unwrap();
                        readers_in.fetch_add(1, Ordering::SeqCst);
                        assert_eq!(
                            writers_in.load(Ordering::SeqCst),
                            0,
                            "a reader beside a writer"
                        );
                        if (c + h + round) % 3 == 0 {
                            tokio::time::sleep(Duration::from_millis(3)).await;
                        }
                        readers_in.fetch_sub(1, Ordering::SeqCst);
                        reads.fetch_add(1, Ordering::SeqCst);
                        g.unlock().await.unwrap();
                    }
                }
            }));
        }
    }
    join_within(
        Duration::from_secs(60),
        tasks,
        "nobody starves for a minute",
    )
    .await;
    assert_eq!(writes.load(Ordering::SeqCst), 3 * 12);
    assert_eq!(reads.load(Ordering::SeqCst), 3 * 3 * 12);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_behind_a_steady_stream_of_readers() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Four readers whose holds always overlap: one of them is inside at any moment.
    let readers: Vec<_> = (0..4)
        .map(|i| {
            let rw = client.get_read_write_lock("stream");
            let stop = stop.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(5 * i)).await;
                while !stop.load(Ordering::SeqCst) {
                    let g = rw.read_lock().lock().await.unwrap();
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    g.unlock().await.unwrap();
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let writer = client.get_read_write_lock("stream");
    let started = Instant::now();
    let during = writer
        .write_lock()
        .try_lock_for(Duration::from_secs(1), None)
        .await
        .unwrap();
    let starved = during.is_none();
    if let Some(g) = during {
        g.unlock().await.unwrap();
    }
    stop.store(true, Ordering::SeqCst);
    let g = writer.write_lock().lock().await.unwrap();
    let waited = started.elapsed();
    g.unlock().await.unwrap();
    for r in readers {
        r.await.unwrap();
    }
    eprintln!(
        "writer behind 4 overlapping readers: {} within 1 s; got in {waited:?} after asking (readers stopped at 1 s)",
        if starved { "starved" } else { "got in" }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_and_write_cycles_cost_one_round_trip_each_way() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let rw = client.get_read_write_lock("trips");
    rw.read_lock().lock().await.unwrap().unlock().await.unwrap();
    rw.write_lock()
        .lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    server.reset_stats().await;
    for _ in 0..50 {
        rw.read_lock().lock().await.unwrap().unlock().await.unwrap();
        rw.write_lock()
            .lock()
            .await
            .unwrap()
            .unlock()
            .await
            .unwrap();
    }
    assert_eq!(
        server.calls("evalsha").await,
        200,
        "one EVALSHA per acquire and per release"
    );
    assert_eq!(
        server.calls("subscribe").await
            + server.calls("script|load").await
            + server.calls("eval").await,
        0
    );
}
