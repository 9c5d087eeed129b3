//! The lanes of group commit, driven by hand without a server.

use super::*;
use crate::script::LOCK_ACQUIRE;

/// A commit whose connection is never opened: these tests drive its lanes by hand.
fn commit() -> Arc<Commit> {
    let target = crate::topology::Target::Single(Box::new(
        redis::Client::open("redis://127.0.0.1:1").unwrap(),
    ));
    let peer = crate::outage::Peer {
        client: uuid::Uuid::nil(),
        server: "127.0.0.1:1".into(),
    };
    let conn = Arc::new(Connection::new(
        target,
        Duration::from_secs(1),
        Duration::from_secs(1),
        peer,
    ));
    Arc::new(Commit::new(conn, Duration::from_secs(1), false, None))
}

fn acquire(name: &str) -> ScriptCall {
    ScriptCall::new(&LOCK_ACQUIRE).key(name).arg("owner")
}

fn queued(entry: Option<Entry>) -> Waiting {
    match entry {
        Some(Entry::Listed(waiting)) => waiting,
        _ => panic!("expected to queue"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_lone_call_goes_alone_and_the_next_ones_queue_behind_it() {
    let commit = commit();
    let alone: Vec<_> = (0..CALLS_PER_LANE)
        .map(|_| commit.enter(&acquire("a")))
        .collect();
    assert!(alone.iter().all(|e| matches!(e, Some(Entry::Alone(_)))));
    let b = queued(commit.enter(&acquire("b")));
    let c = queued(commit.enter(&acquire("c")));
    // Cancelled while queued: left out of the list, never sent.
    drop(b);
    let list = commit.take(commit.lane(&acquire("a")).unwrap()).unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].call.first_key(), b"c");
    for queued in list {
        queued.answer(Ok(Value::Int(7)));
    }
    let reply = c.await.unwrap();
    assert_eq!(reply, Value::Int(7));
    // Nothing queued: the lane is idle once the list is back.
    assert!(commit.take(commit.lane(&acquire("a")).unwrap()).is_none());
    drop(alone);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_call_on_an_object_whose_operation_was_given_up_in_flight_waits_for_its_reply() {
    let commit = commit();
    let _alone: Vec<_> = (0..CALLS_PER_LANE)
        .map(|_| commit.enter(&acquire("a")))
        .collect();
    let waiting = queued(commit.enter(&acquire("x")));
    let list = commit.take(commit.lane(&acquire("a")).unwrap()).unwrap();
    // Given up after its list was taken: the object is unsettled.
    drop(waiting);
    assert_eq!(commit.unsettled.count.load(Ordering::Acquire), 1);
    let settle = {
        let commit = commit.clone();
        tokio::spawn(async move { commit.settle(&acquire("x")).await })
    };
    // Another object is not held up.
    commit.settle(&acquire("y")).await;
    tokio::task::yield_now().await;
    assert!(
        !settle.is_finished(),
        "the repair must not overtake the acquire"
    );
    for queued in list {
        queued.answer(Ok(Value::Int(1)));
    }
    tokio::time::timeout(Duration::from_secs(1), settle)
        .await
        .expect("settled once answered")
        .unwrap();
    assert_eq!(commit.unsettled.count.load(Ordering::Acquire), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_queue_whose_lane_stays_taken_goes_out_as_one_more_call() {
    let commit = commit();
    // Turns whose callers are never run again: the lane stays taken.
    let _stuck: Vec<_> = (0..CALLS_PER_LANE)
        .map(|_| commit.enter(&acquire("a")))
        .collect();
    let head = queued(commit.enter(&acquire("b")));
    let next = queued(commit.enter(&acquire("c")));
    assert!(
        head.patience.is_some() && next.patience.is_none(),
        "one timer a queue"
    );
    // The head gives up waiting: its timer stays with the lane.
    drop(head);
    let started = tokio::time::Instant::now();
    // The list goes out (to a server that is not there, so it fails): it was sent.
    let reply = tokio::time::timeout(Duration::from_secs(3), next)
        .await
        .expect("the queue went out as one more call");
    assert!(reply.is_err());
    assert!(started.elapsed() >= QUEUE_PATIENCE - Duration::from_millis(20));
}

#[test]
fn a_caller_on_a_current_thread_runtime_never_takes_a_lane() {
    let commit = commit();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime.block_on(async {
        for _ in 0..=CALLS_PER_LANE {
            assert!(commit.enter(&acquire("a")).is_none());
        }
    });
    assert!(commit.lanes().is_empty());
}

#[test]
fn list_replies_split_into_each_operations_reply_or_error() {
    let reply = Value::Array(vec![
        Value::Int(0),
        Value::Int(5),
        Value::Int(1),
        Value::BulkString(b"WRONGTYPE key k holds a string".to_vec()),
        Value::Int(0),
        Value::Nil,
        Value::Int(0),
        Value::Boolean(false),
    ]);
    let replies = split(reply, 4).unwrap();
    assert_eq!(
        replies[3].as_ref().unwrap(),
        &Value::Nil,
        "RESP3's false is nil"
    );
    assert_eq!(replies[0].as_ref().unwrap(), &Value::Int(5));
    let e = replies[1].as_ref().unwrap_err();
    assert_eq!(e.code(), Some("WRONGTYPE"));
    assert_eq!(e.detail(), Some("key k holds a string"));
    assert_eq!(replies[2].as_ref().unwrap(), &Value::Nil);
    assert!(
        split(Value::Array(vec![Value::Int(0)]), 3)
            .unwrap_err()
            .is_io_error()
    );
    assert!(split(Value::Okay, 1).unwrap_err().is_io_error());
}
