//! Leftover holds after a restart that kept the data: a hold whose release failed because its
//! server was killed is still in Redis when the server comes back with its AOF. The client
//! removes such a leftover in the background as soon as Redis answers again (docs/faults.md,
//! "Retries and repairs"), so the lock is free again within seconds of the restart, not when
//! the hold's 20 s lease runs out. For every kind, for a guard unlocked and a guard dropped
//! while the server was down, and for a hold the watchdog renews.

mod support;

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use ferrisson::{Client, LockGuard};
use redis::AsyncCommands;
use support::{RedisServer, builder};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

/// The lease of the holds left over: far longer than the grant the test waits for.
const LEASE: Duration = Duration::from_secs(20);
/// How long the server stays down after the release failed: as a real restart would, long
/// enough for the background removal's retries to back off to their longest pause (2 s).
const DOWN: Duration = Duration::from_secs(3);
/// How soon after the restart the lock must be granted to another acquire.
const SOON: Duration = Duration::from_secs(6);

#[derive(Debug, Clone, Copy)]
enum Kind {
    Plain,
    Fenced,
    Fair,
    Read,
    Write,
}

/// How the holder gives its hold back while the server is down.
#[derive(Debug, Clone, Copy)]
enum Release {
    /// `guard.unlock()`, which answers an error.
    Unlock,
    /// The guard is dropped: its release runs in the background and fails there.
    Drop,
}

/// Who asks for the lock after the restart.
#[derive(Debug, Clone, Copy)]
enum Next {
    AnotherClient,
    SameClient,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_leftover_goes_soon_after_a_restart_that_kept_it() {
    leftover_goes_soon(
        "leftover:plain",
        Kind::Plain,
        Some(LEASE),
        Release::Unlock,
        Next::AnotherClient,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_leftover_goes_soon_after_a_restart_that_kept_it() {
    leftover_goes_soon(
        "leftover:fenced",
        Kind::Fenced,
        Some(LEASE),
        Release::Unlock,
        Next::AnotherClient,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_leftover_goes_soon_after_a_restart_that_kept_it() {
    leftover_goes_soon(
        "leftover:fair",
        Kind::Fair,
        Some(LEASE),
        Release::Unlock,
        Next::AnotherClient,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_leftover_goes_soon_after_a_restart_that_kept_it() {
    leftover_goes_soon(
        "leftover:read",
        Kind::Read,
        Some(LEASE),
        Release::Unlock,
        Next::AnotherClient,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_leftover_goes_soon_after_a_restart_that_kept_it() {
    leftover_goes_soon(
        "leftover:write",
        Kind::Write,
        Some(LEASE),
        Release::Unlock,
        Next::AnotherClient,
    )
    .await;
}

/// The guard dropped while the server is down: its background release fails the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leftover_of_a_dropped_guard_goes_soon_after_a_restart_that_kept_it() {
    leftover_goes_soon(
        "leftover:dropped",
        Kind::Plain,
        Some(LEASE),
        Release::Drop,
        Next::AnotherClient,
    )
    .await;
}

/// A hold the watchdog renewed (a 20 s watchdog lease here): its release fails the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_leftover_goes_soon_after_a_restart_that_kept_it() {
    leftover_goes_soon(
        "leftover:renewed",
        Kind::Plain,
        None,
        Release::Unlock,
        Next::AnotherClient,
    )
    .await;
}

/// The client whose unlock failed takes the lock again itself, as a new acquisition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_client_gets_the_lock_soon_after_a_restart_that_kept_its_leftover() {
    leftover_goes_soon(
        "leftover:same-client",
        Kind::Plain,
        Some(LEASE),
        Release::Unlock,
        Next::SameClient,
    )
    .await;
}

/// Takes a hold of `kind` on `name` (fixed `lease`, or the watchdog's with `None`), kills the
/// server, gives the hold back as `release` says (which fails), restarts the server with its
/// data [`DOWN`] later and checks the hold came back with it; then the lock must be granted to `next` within
/// [`SOON`] of the restart.
async fn leftover_goes_soon(
    name: &str,
    kind: Kind,
    lease: Option<Duration>,
    release: Release,
    next: Next,
) {
    captured();
    let mut server = RedisServer::start_persistent();
    let client = builder(&server)
        .watchdog_timeout(LEASE)
        .build()
        .await
        .expect("client connects to the test server");
    let guard = take(&client, kind, name, lease).await;

    server.kill();
    let started = Instant::now();
    match release {
        Release::Unlock => {
            let err = guard
                .unlock()
                .await
                .expect_err("no server: the unlock must fail");
            assert!(matches!(err, ferrisson::Error::Redis(_)), "{err:?}");
            eprintln!("{name}: unlock failed after {:?}: {err}", started.elapsed());
        }
        Release::Drop => {
            drop(guard);
            // Restarted only once the background release has failed: one that met the
            // restarted server would simply succeed.
            assert!(
                support::eventually(Duration::from_secs(10), || async {
                    seen(name, "background release failed")
                })
                .await,
                "{name}: the background release never failed"
            );
            eprintln!(
                "{name}: the background release failed after {:?}",
                started.elapsed()
            );
        }
    }

    tokio::time::sleep(DOWN).await;
    server.restart_keeping_data();
    let restarted = Instant::now();
    // The test means something only if the hold came back with the restart: the key is there
    // (with most of its lease left), or the client's background removal already found the hold
    // there and took it away in the moment before this look.
    let mut raw = server.raw().await;
    let kept: bool = raw.exists(name).await.unwrap();
    let ttl_ms: i64 = raw.pttl(name).await.unwrap();
    assert!(
        kept || seen(name, "hold count repaired"),
        "{name}: the restart lost the hold, so this test shows nothing"
    );
    if kept {
        assert!(
            ttl_ms > 10_000,
            "{name}: only {ttl_ms} ms of lease left after the restart"
        );
    }

    let rival_client;
    let contender = match next {
        Next::AnotherClient => {
            rival_client = support::client(&server).await;
            &rival_client
        }
        Next::SameClient => &client,
    };
    let granted = try_take(contender, kind, name).await;
    let waited = restarted.elapsed();
    eprintln!(
        "{name}: key kept across the restart: {kept} (PTTL {ttl_ms} ms); {} {waited:?} after the restart",
        if granted.is_some() {
            "granted"
        } else {
            "still taken"
        }
    );
    let granted = granted.unwrap_or_else(|| {
        panic!(
            "{name}: not granted within 8 s of the restart: the leftover hold kept the lock \
             taken (PTTL {ttl_ms} ms at the restart)"
        )
    });
    assert!(
        waited < SOON,
        "{name}: granted only {waited:?} after the restart (PTTL {ttl_ms} ms at the restart)"
    );
    granted.unlock().await.unwrap();
}

/// A hold of `kind`: fixed `lease`, or the watchdog's (`None`).
async fn take(client: &Client, kind: Kind, name: &str, lease: Option<Duration>) -> LockGuard {
    let taken = match kind {
        Kind::Fenced => {
            let lock = client.get_fenced_lock(name);
            match lease {
                Some(lease) => lock.lock_and_get_token_with_lease(lease).await,
                None => lock.lock_and_get_token().await,
            }
            .map(|(_, guard)| guard)
        }
        _ => {
            let lock = match kind {
                Kind::Plain => client.get_lock(name),
                Kind::Fair => client.get_fair_lock(name),
                Kind::Read => client.get_read_write_lock(name).read_lock(),
                _ => client.get_read_write_lock(name).write_lock(),
            };
            match lease {
                Some(lease) => lock.lock_with_lease(lease).await,
                None => lock.lock().await,
            }
        }
    };
    taken.unwrap_or_else(|e| panic!("{name}: the first hold: {e}"))
}

/// Another acquire that the leftover of `kind` excludes (the write side for either side of a
/// read-write lock: a second reader would share a read hold), waiting up to 8 s with a 5 s lease.
async fn try_take(client: &Client, kind: Kind, name: &str) -> Option<LockGuard> {
    let (wait, lease) = (Duration::from_secs(8), Some(Duration::from_secs(5)));
    let taken = match kind {
        Kind::Plain => client.get_lock(name).try_lock_for(wait, lease).await,
        Kind::Fenced => client
            .get_fenced_lock(name)
            .try_lock_and_get_token_for(wait, lease)
            .await
            .map(|taken| taken.map(|(_, guard)| guard)),
        Kind::Fair => client.get_fair_lock(name).try_lock_for(wait, lease).await,
        Kind::Read | Kind::Write => {
            client
                .get_read_write_lock(name)
                .write_lock()
                .try_lock_for(wait, lease)
                .await
        }
    };
    taken.unwrap_or_else(|e| panic!("{name}: the acquire after the restart: {e}"))
}

/// The `lock` field and message of every event that has a `lock` field.
type Events = Arc<Mutex<Vec<(String, String)>>>;

/// The events recorded by this process's global subscriber.
fn captured() -> &'static Events {
    static CAPTURED: OnceLock<Events> = OnceLock::new();
    CAPTURED.get_or_init(|| {
        let captured = Arc::new(Mutex::default());
        let subscriber = tracing_subscriber::registry().with(Capture(captured.clone()));
        tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
        captured
    })
}

/// Whether an event of lock `name` whose message starts with `message` was seen.
fn seen(name: &str, message: &str) -> bool {
    captured()
        .lock()
        .unwrap()
        .iter()
        .any(|(lock, text)| lock == name && text.starts_with(message))
}

struct Capture(Events);

impl<S: Subscriber> Layer<S> for Capture {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        if let Some(lock) = fields.lock {
            self.0.lock().unwrap().push((lock, fields.message));
        }
    }
}

#[derive(Default)]
struct Fields {
    lock: Option<String>,
    message: String,
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let text = format!("{value:?}");
        match field.name() {
            "lock" => self.lock = Some(text),
            "message" => self.message = text,
            _ => {}
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "lock" => self.lock = Some(value.to_owned()),
            "message" => self.message = value.to_owned(),
            _ => {}
        }
    }
}
