//! A wait budget is a deadline: `try_lock_for(wait, ..)` returns within `wait` and a few
//! milliseconds whatever Redis does (here: paused, with a 5 s response timeout), for every
//! lock kind, whether the budget ends in an attempt or in the wait between attempts; a grant
//! whose reply did not come in time is repaired in the background. `connect` honours the
//! connection timeout.

mod support;

use std::time::{Duration, Instant};

use ferrisson::{Client, Error, LockGuard};
use support::{RedisServer, eventually};

const WAIT: Duration = Duration::from_millis(200);
/// What "a few milliseconds" past the budget may be on a loaded 2-core machine.
const SLACK: Duration = Duration::from_millis(250);

async fn patient_client(server: &RedisServer) -> Client {
    support::builder(server)
        .response_timeout(Duration::from_secs(5))
        .build()
        .await
        .unwrap()
}

type TryFor = Box<
    dyn Fn(
        Client,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = ferrisson::Result<Option<LockGuard>>> + Send>,
    >,
>;

/// Every lock kind's `try_lock_for(WAIT, None)` on `name`.
fn kinds() -> Vec<(&'static str, TryFor)> {
    vec![
        (
            "plain",
            Box::new(|c: Client| {
                Box::pin(async move { c.get_lock("d:plain").try_lock_for(WAIT, None).await })
            }),
        ),
        (
            "fair",
            Box::new(|c: Client| {
                Box::pin(async move { c.get_fair_lock("d:fair").try_lock_for(WAIT, None).await })
            }),
        ),
        (
            "read",
            Box::new(|c: Client| {
                Box::pin(async move {
                    let rw = c.get_read_write_lock("d:rw");
                    rw.read_lock().try_lock_for(WAIT, None).await
                })
            }),
        ),
        (
            "write",
            Box::new(|c: Client| {
                Box::pin(async move {
                    let rw = c.get_read_write_lock("d:rw2");
                    rw.write_lock().try_lock_for(WAIT, None).await
                })
            }),
        ),
        (
            "mutex",
            Box::new(|c: Client| {
                Box::pin(async move { c.get_mutex("d:mutex").try_lock_for(WAIT, None).await })
            }),
        ),
    ]
}

fn within_budget(what: &str, took: Duration) {
    eprintln!("{what}: returned after {took:?}");
    assert!(took <= WAIT + SLACK, "{what}: returned after {took:?}");
}

/// The budget ends while the first attempt waits for a paused server: a timeout at the
/// deadline, and once the server is back the grant it made there is repaired away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_unanswered_by_the_deadline_ends_the_call_and_is_repaired() {
    let server = RedisServer::start();
    let client = patient_client(&server).await;
    for (kind, try_for) in kinds() {
        server.pause();
        let asked = Instant::now();
        let answer = try_for(client.clone()).await;
        let took = asked.elapsed();
        server.resume();
        within_budget(kind, took);
        assert!(
            matches!(&answer, Err(Error::Redis(_))),
            "{kind}: {answer:?}"
        );
        assert!(
            answer.unwrap_err().to_string().contains("wait budget"),
            "{kind}: the error says why"
        );
    }
    // The grants the paused server made once it ran the queued acquires are taken back.
    let other = support::client(&server).await;
    for name in ["d:plain", "d:fair", "d:mutex"] {
        let lock = other.get_lock(name);
        assert!(
            eventually(Duration::from_secs(5), || async {
                !lock.is_locked().await.unwrap()
            })
            .await,
            "{name}: a late grant stayed"
        );
    }
    let rw = other.get_read_write_lock("d:rw2").write_lock();
    assert!(
        rw.try_lock_for(Duration::from_secs(5), None)
            .await
            .unwrap()
            .is_some(),
        "the write lock's late grant was taken back"
    );
}

/// The budget ends while the caller waits for a holder, and the server stops answering
/// meanwhile: still back by the deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_cut_short_by_a_paused_server_ends_by_the_deadline() {
    let server = RedisServer::start();
    let holder = patient_client(&server).await;
    let client = patient_client(&server).await;
    let held = [
        holder.get_lock("d:plain").lock().await.unwrap(),
        holder.get_fair_lock("d:fair").lock().await.unwrap(),
        holder
            .get_read_write_lock("d:rw")
            .write_lock()
            .lock()
            .await
            .unwrap(),
        holder
            .get_read_write_lock("d:rw2")
            .write_lock()
            .lock()
            .await
            .unwrap(),
        holder.get_mutex("d:mutex").lock().await.unwrap(),
    ];
    for (kind, try_for) in kinds() {
        let asked = Instant::now();
        let waiting = tokio::spawn(try_for(client.clone()));
        tokio::time::sleep(WAIT / 4).await;
        server.pause();
        let answer = waiting.await.unwrap();
        let took = asked.elapsed();
        server.resume();
        within_budget(kind, took);
        assert!(
            matches!(&answer, Ok(None) | Err(Error::Redis(_))),
            "{kind}: {answer:?}"
        );
    }
    for guard in held {
        guard.unlock().await.unwrap();
    }
}

/// `connect` gives up at the connection timeout when the server does not answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_honours_the_connection_timeout() {
    let server = RedisServer::start();
    server.pause();
    let asked = Instant::now();
    let result = Client::builder()
        .url(server.url())
        .connection_timeout(Duration::from_millis(300))
        .build()
        .await;
    let took = asked.elapsed();
    server.resume();
    eprintln!("connect returned after {took:?}");
    assert!(matches!(result, Err(Error::Connect { .. })), "{result:?}");
    assert!(took <= Duration::from_millis(300) + SLACK, "after {took:?}");
}
