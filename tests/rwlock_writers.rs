//! RReadWriteLock with `RwPolicy::PreferWriters`: a waiting writer holds new readers back and
//! gets in behind a steady stream of overlapping readers (which starves it under Redisson's
//! policy); its mark goes when it gets in, gives up, is dropped or dies; a read nested in the
//! scope of a reader inside (or of the writer) re-enters past it, while the same task's reads
//! outside it are held back; held-back readers sleep; exclusion and fencing tokens under a mixed
//! workload.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use ferrisson::{Client, RReadWriteLock, RwPolicy};
use redis::AsyncCommands;
use support::{HolderProcess, Listener, RedisServer, builder, client, eventually, join_within};

/// How long each reader of the stream holds its read lock.
const HOLD: Duration = Duration::from_millis(400);

fn preferring(client: &Client, name: &str) -> RReadWriteLock {
    client.get_read_write_lock_with(name, RwPolicy::PreferWriters)
}

/// The marks key of lock `name` (no hash tag in the name).
fn marks(name: &str) -> String {
    format!("{{{name}}}:ferrisson_writers")
}

/// Waits until a writer's mark on `name` is there.
async fn wait_for_mark(server: &RedisServer, name: &str) {
    let mut raw = server.raw().await;
    let key = marks(name);
    assert!(
        eventually(Duration::from_secs(5), || {
            let mut raw = raw.clone();
            let key = key.clone();
            async move { raw.zcard::<_, u64>(&key).await.unwrap() > 0 }
        })
        .await,
        "the waiting writer left no mark"
    );
    let _: () = raw.ping().await.unwrap();
}

/// Readers on 3 clients, 2 each, holding [`HOLD`] and starting again at once, staggered so that
/// one of them is always inside. Stops when `stop` is set; counts grants in `reads`.
struct Stream {
    stop: Arc<AtomicBool>,
    reads: Arc<AtomicUsize>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Stream {
    async fn start(server: &RedisServer, name: &str, policy: RwPolicy) -> Stream {
        let stop = Arc::new(AtomicBool::new(false));
        let reads = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for c in 0..3u32 {
            let client = client(server).await;
            for r in 0..2u32 {
                let rw = client.get_read_write_lock_with(name, policy);
                let (stop, reads) = (stop.clone(), reads.clone());
                let offset = HOLD / 6 * (2 * c + r);
                tasks.push(tokio::spawn(async move {
                    tokio::time::sleep(offset).await;
                    while !stop.load(Ordering::SeqCst) {
                        let g = rw.read_lock().lock().await.unwrap();
                        reads.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(HOLD).await;
                        g.unlock().await.unwrap();
                    }
                }));
            }
        }
        // Every reader is in the stream by now.
        tokio::time::sleep(HOLD + HOLD / 2).await;
        Stream { stop, reads, tasks }
    }

    async fn stop(self) {
        self.stop.store(true, Ordering::SeqCst);
        join_within(Duration::from_secs(20), self.tasks, "the readers stop").await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preferred_writer_gets_in_behind_overlapping_readers() {
    let server = RedisServer::start();
    let stream = Stream::start(&server, "stream", RwPolicy::PreferWriters).await;
    let client = client(&server).await;
    let writer = preferring(&client, "stream");
    let started = Instant::now();
    let w = tokio::time::timeout(Duration::from_secs(10), writer.write_lock().lock())
        .await
        .expect("the writer got in within 10 s")
        .unwrap();
    let waited = started.elapsed();
    // The readers inside when it asked finish their holds (at most one HOLD); the last one's
    // release wakes it. The rest is slack for a loaded debug build on two cores.
    assert!(
        waited <= HOLD + Duration::from_millis(1000),
        "the writer waited {waited:?} behind readers holding {HOLD:?} each"
    );
    let reads_while_held = stream.reads.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        stream.reads.load(Ordering::SeqCst),
        reads_while_held,
        "a reader entered beside the writer"
    );
    w.unlock().await.unwrap();
    let mut raw = server.raw().await;
    let left: bool = raw.exists(marks("stream")).await.unwrap();
    assert!(!left, "the grant took the writer's mark away");
    // The write release wakes the held-back readers.
    let reads = stream.reads.clone();
    assert!(
        eventually(Duration::from_secs(2), || {
            let reads = reads.clone();
            async move { reads.load(Ordering::SeqCst) >= reads_while_held + 6 }
        })
        .await,
        "the readers came back after the writer"
    );
    eprintln!("PreferWriters: writer got in {waited:?} after asking (read hold {HOLD:?})");
    stream.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_redissons_policy_the_same_readers_starve_the_writer() {
    let server = RedisServer::start();
    let stream = Stream::start(&server, "starve", RwPolicy::Redisson).await;
    let client = client(&server).await;
    let writer = client.get_read_write_lock("starve");
    let window = HOLD * 10;
    let during = writer
        .write_lock()
        .try_lock_for(window, None)
        .await
        .unwrap();
    let starved = during.is_none();
    if let Some(g) = during {
        g.unlock().await.unwrap();
    }
    let reads = stream.reads.load(Ordering::SeqCst);
    stream.stop().await;
    assert!(
        starved,
        "the writer got in within {window:?}: the readers did not overlap all the time"
    );
    // The readers went on meanwhile (about 6 per HOLD).
    assert!(reads > 30, "only {reads} reads");
    let mut raw = server.raw().await;
    let keys: Vec<String> = raw.keys("*ferrisson_writers*").await.unwrap();
    assert!(
        keys.is_empty(),
        "Redisson's policy leaves no mark: {keys:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_that_gives_up_or_is_dropped_stops_holding_readers_back_at_once() {
    let server = RedisServer::start();
    // Held-back readers wake by message here: their timed re-check (the mark's remaining life,
    // 5 s by default, or the 30 s re-check interval) lies beyond the test's bounds.
    let client = support::message_only_client(&server).await;
    let mut raw = server.raw().await;
    let inside = preferring(&client, "quit")
        .read_lock()
        .lock()
        .await
        .unwrap();
    let mut listener = Listener::on(&server, "redisson_rwlock:{quit}").await;

    // A writer whose wait runs out.
    let writer = preferring(&client, "quit");
    let wait = {
        let write = writer.write_lock();
        tokio::spawn(async move { write.try_lock_for(Duration::from_millis(700), None).await })
    };
    wait_for_mark(&server, "quit").await;
    let (score, life): (f64, i64) = {
        let members: Vec<(String, f64)> =
            raw.zrange_withscores(marks("quit"), 0, -1).await.unwrap();
        assert_eq!(members.len(), 1, "{members:?}");
        assert!(members[0].0.starts_with(&client.id().to_string()));
        (members[0].1, raw.pttl(marks("quit")).await.unwrap())
    };
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(&mut raw).await.unwrap();
    let now_ms = (secs * 1000 + micros / 1000) as f64;
    assert!(
        score > now_ms && score <= now_ms + 5000.0,
        "a mark lives the fair lock queue timeout (5 s) from the server's now: {score} vs {now_ms}"
    );
    assert!(life > 0 && life <= 5000, "the marks key expires: {life}");
    let held_back = preferring(&client, "quit");
    assert!(
        support::Elsewhere::new(held_back.read_lock())
            .try_lock()
            .await
            .unwrap()
            .is_none(),
        "a new reader (of another task) is held back by the mark"
    );
    let reader = {
        let read = held_back.read_lock();
        tokio::spawn(async move { read.lock().await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!reader.is_finished());
    assert!(wait.await.unwrap().unwrap().is_none(), "the writer gave up");
    let gave_up = Instant::now();
    let r = tokio::time::timeout(Duration::from_secs(2), reader)
        .await
        .expect("the reader got in once the writer gave up")
        .unwrap()
        .unwrap();
    assert!(gave_up.elapsed() < Duration::from_millis(1500));
    assert_eq!(listener.next().await, "1", "giving up wakes everybody");
    let left: bool = raw.exists(marks("quit")).await.unwrap();
    assert!(!left, "the mark went with the writer");
    r.unlock().await.unwrap();

    // A writer whose lock() future is dropped mid-wait.
    let wait = {
        let write = writer.write_lock();
        tokio::spawn(async move { write.lock().await })
    };
    wait_for_mark(&server, "quit").await;
    let reader = {
        let read = held_back.read_lock();
        tokio::spawn(async move { read.lock().await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!reader.is_finished(), "held back by the waiting writer");
    wait.abort();
    let dropped = Instant::now();
    let r = tokio::time::timeout(Duration::from_secs(2), reader)
        .await
        .expect("the reader got in once the writer's wait was dropped")
        .unwrap()
        .unwrap();
    assert!(dropped.elapsed() < Duration::from_millis(1500));
    let left: bool = raw.exists(marks("quit")).await.unwrap();
    assert!(!left, "the dropped wait took its mark away");
    r.unlock().await.unwrap();
    inside.unlock().await.unwrap();
    // And the writer's handle still works.
    let w = writer.write_lock().try_lock().await.unwrap().expect("free");
    w.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_writer_holds_readers_back_only_until_its_mark_runs_out() {
    let server = RedisServer::start();
    let life = Duration::from_millis(800);
    let client = builder(&server)
        .fair_lock_queue_timeout(life)
        .build()
        .await
        .unwrap();
    let inside = preferring(&client, "dead")
        .read_lock()
        .lock()
        .await
        .unwrap();
    let mut dead = HolderProcess::spawn(&server, "dead", life.as_millis() as u64, "prefer-write");
    wait_for_mark(&server, "dead").await;
    // A reader of another task (this task's own new reads, outside the inside reader's scope,
    // are held back too).
    let reader = support::Elsewhere::new(preferring(&client, "dead").read_lock());
    assert!(
        reader.try_lock().await.unwrap().is_none(),
        "held back by the live writer's mark"
    );
    // Still held back after more than a mark's life: the waiting writer refreshes its mark.
    tokio::time::sleep(life + life / 2).await;
    assert!(
        reader.try_lock().await.unwrap().is_none(),
        "the live writer's mark ran out while it waited"
    );
    dead.kill().await;
    let killed = Instant::now();
    let r = tokio::time::timeout(Duration::from_secs(5), reader.lock())
        .await
        .expect("the dead writer's mark ran out")
        .unwrap();
    // Its last refresh ran before the kill, so the mark ends within its life of the kill; the
    // reader re-checks when it ends (it was told the mark's remaining life).
    let took = killed.elapsed();
    assert!(
        took <= life + Duration::from_millis(700),
        "held back {took:?} after the writer died (mark life {life:?})"
    );
    r.unlock().await.unwrap();
    inside.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_nested_in_a_reader_inside_re_enter_past_a_waiting_writer() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let reader = preferring(&client, "reenter");
    let first = reader.read_lock().lock().await.unwrap();
    let writer = preferring(&client, "reenter");
    let wait = {
        let write = writer.write_lock();
        tokio::spawn(async move { write.lock().await })
    };
    wait_for_mark(&server, "reenter").await;
    // A read nested in the reader inside enters again: waiting here for the writer, which
    // waits for this reader, would deadlock both.
    let again = tokio::time::timeout(
        Duration::from_secs(2),
        first.scope(reader.read_lock().lock()),
    )
    .await
    .expect("a read nested in a reader inside re-enters past a waiting writer")
    .unwrap();
    assert_eq!(again.fencing_token(), first.fencing_token());
    assert_eq!(first.hold_count().await.unwrap(), 2);
    // A new reader of this policy waits, this task's own outside the reader's scope included;
    // one of Redisson's policy ignores the mark (as Java Redisson readers do).
    assert!(
        reader.read_lock().try_lock().await.unwrap().is_none(),
        "a new read of this task, outside the scope, is held back"
    );
    let newcomer = support::Elsewhere::new(preferring(&client, "reenter").read_lock());
    assert!(newcomer.try_lock().await.unwrap().is_none());
    let plain = support::Elsewhere::new(client.get_read_write_lock("reenter").read_lock());
    let ignoring = plain
        .try_lock()
        .await
        .unwrap()
        .expect("Redisson's policy ignores the mark");
    ignoring.unlock().await.unwrap();
    assert!(!wait.is_finished());
    again.unlock().await.unwrap();
    first.unlock().await.unwrap();
    let w = tokio::time::timeout(Duration::from_secs(2), wait)
        .await
        .expect("the writer got in once the reader left")
        .unwrap()
        .unwrap();
    // Write->read: a read nested in the writer's scope, while another writer waits with a mark.
    let second = preferring(&client, "reenter");
    let wait2 = {
        let write = second.write_lock();
        tokio::spawn(async move { write.lock().await })
    };
    wait_for_mark(&server, "reenter").await;
    let own_read = tokio::time::timeout(Duration::from_secs(2), w.scope(writer.read_lock().lock()))
        .await
        .expect("the writer reads past another writer's mark")
        .unwrap();
    own_read.unlock().await.unwrap();
    let first_write = w.fencing_token();
    w.unlock().await.unwrap();
    let w2 = tokio::time::timeout(Duration::from_secs(2), wait2)
        .await
        .expect("the second writer got in")
        .unwrap()
        .unwrap();
    assert!(w2.fencing_token() > first_write);
    w2.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_back_readers_sleep_instead_of_polling() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let inside = preferring(&client, "sleep")
        .read_lock()
        .lock()
        .await
        .unwrap();
    let writer = preferring(&client, "sleep");
    let wait = {
        let write = writer.write_lock();
        tokio::spawn(async move { write.lock().await })
    };
    wait_for_mark(&server, "sleep").await;
    let readers: Vec<_> = (0..4)
        .map(|_| {
            let read = preferring(&client, "sleep").read_lock();
            tokio::spawn(async move { read.lock().await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.reset_stats().await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let calls = server.calls("evalsha").await;
    // The writer calls again every third of its mark's life (5 s), each reader when the mark
    // would run out, and once, half a second into its wait, to look whether a holder is gone
    // (see `presence`): within a second, a few calls at most. A polling reader would make
    // hundreds.
    assert!(
        calls <= 10,
        "{calls} script calls in 1 s while 4 readers were held back"
    );
    inside.unlock().await.unwrap();
    let w = tokio::time::timeout(Duration::from_secs(2), wait)
        .await
        .expect("the writer got in")
        .unwrap()
        .unwrap();
    w.unlock().await.unwrap();
    for r in join_within(Duration::from_secs(2), readers, "the readers get in").await {
        r.unwrap().unlock().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_and_preferred_writers_never_mix_and_tokens_go_up() {
    let server = RedisServer::start();
    let readers_in = Arc::new(AtomicUsize::new(0));
    let writers_in = Arc::new(AtomicUsize::new(0));
    // The highest token of any grant recorded so far, and the last writer's.
    let highest = Arc::new(AtomicU64::new(0));
    let last_write = Arc::new(AtomicU64::new(0));
    let (writes, reads) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut tasks = Vec::new();
    for c in 0..3 {
        let client = client(&server).await;
        for h in 0..4 {
            let rw = preferring(&client, "mixed");
            let (readers_in, writers_in) = (readers_in.clone(), writers_in.clone());
            let (highest, last_write) = (highest.clone(), last_write.clone());
            let (writes, reads) = (writes.clone(), reads.clone());
            let writer = h == 0;
            tasks.push(tokio::spawn(async move {
                for round in 0..10 {
                    if writer {
                        let g = rw.write_lock().lock().await.unwrap();
                        assert_eq!(writers_in.fetch_add(1, Ordering::SeqCst), 0, "two writers");
                        assert_eq!(
                            readers_in.load(Ordering::SeqCst),
                            0,
                            "a writer among readers"
                        );
                        let token = g.fencing_token();
                        // Every grant recorded so far ended before this one began.
                        assert!(
                            highest.fetch_max(token, Ordering::SeqCst) < token,
                            "a write token not above every earlier grant"
                        );
                        last_write.store(token, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(3)).await;
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
                        let token = g.fencing_token();
                        assert!(
                            token > last_write.load(Ordering::SeqCst),
                            "a read token below the last write's"
                        );
                        highest.fetch_max(token, Ordering::SeqCst);
                        if (c + h + round) % 2 == 0 {
                            tokio::time::sleep(Duration::from_millis(5)).await;
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
    assert_eq!(writes.load(Ordering::SeqCst), 3 * 10);
    assert_eq!(reads.load(Ordering::SeqCst), 3 * 3 * 10);
    let mut raw = server.raw().await;
    let left: bool = raw.exists(marks("mixed")).await.unwrap();
    assert!(!left, "every writer's mark went with its grant");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_reader_wakes_a_writer_queued_behind_held_back_readers_of_its_client() {
    let server = RedisServer::start();
    let inside_client = client(&server).await;
    let inside = preferring(&inside_client, "wake")
        .read_lock()
        .lock()
        .await
        .unwrap();
    // A first writer's mark holds the readers back before the writer under test waits.
    let first_client = client(&server).await;
    let first = {
        let write = preferring(&first_client, "wake").write_lock();
        tokio::spawn(async move { write.lock().await })
    };
    wait_for_mark(&server, "wake").await;
    // On one client: held-back readers wait on the lock's channel first, then the writer. Its
    // timed attempts are far apart here (a 30 s mark, a 30 s re-check), so only a message wakes
    // it within the test's bounds.
    let waiting_client = builder(&server)
        .fair_lock_queue_timeout(Duration::from_secs(30))
        .recheck_interval(Duration::from_secs(30))
        .build()
        .await
        .unwrap();
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let read = preferring(&waiting_client, "wake").read_lock();
            tokio::spawn(async move { read.lock().await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let writer = {
        let write = preferring(&waiting_client, "wake").write_lock();
        tokio::spawn(async move { write.lock().await })
    };
    let mut raw = server.raw().await;
    let key = marks("wake");
    assert!(
        eventually(Duration::from_secs(5), || {
            let mut raw = raw.clone();
            let key = key.clone();
            async move { raw.zcard::<_, u64>(&key).await.unwrap() == 2 }
        })
        .await,
        "both writers wait with a mark"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    first.abort();
    assert!(
        eventually(Duration::from_secs(5), || {
            let mut raw = raw.clone();
            let key = key.clone();
            async move { raw.zcard::<_, u64>(&key).await.unwrap() == 1 }
        })
        .await,
        "the dropped writer's mark went"
    );
    let released = Instant::now();
    inside.unlock().await.unwrap();
    // A '0' would wake one waiter of that client, the reader that waited longest, which is
    // refused again; the '1' a release sends while marks exist wakes the writer too.
    let w = tokio::time::timeout(Duration::from_secs(3), writer)
        .await
        .expect("the last reader's release woke the writer")
        .unwrap()
        .unwrap();
    assert!(released.elapsed() < Duration::from_secs(3));
    w.unlock().await.unwrap();
    for r in join_within(
        Duration::from_secs(3),
        readers,
        "the write release wakes the readers",
    )
    .await
    {
        r.unwrap().unlock().await.unwrap();
    }
    let _: () = raw.ping().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_value_in_the_marks_key_is_refused_and_left_alone() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let mut raw = server.raw().await;
    let _: () = raw.set(marks("foreign"), "not a zset").await.unwrap();
    let rw = preferring(&client, "foreign");
    for result in [
        rw.read_lock().try_lock().await,
        rw.write_lock().try_lock().await,
    ] {
        assert!(
            matches!(&result, Err(ferrisson::Error::WrongType { key }) if *key == marks("foreign")),
            "{result:?}"
        );
    }
    let kept: String = raw.get(marks("foreign")).await.unwrap();
    assert_eq!(kept, "not a zset");
    let locked: bool = raw.exists("foreign").await.unwrap();
    assert!(!locked, "nothing was written");
    // Redisson's policy never reads the key.
    let plain = client.get_read_write_lock("foreign");
    plain
        .read_lock()
        .lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
}
