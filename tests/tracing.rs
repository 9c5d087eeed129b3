//! `tracing` output: the fields of the `ferrisson.acquire` and `ferrisson.release` spans for a
//! grant and a timeout, and the WARN event of a lost lease, as a subscriber sees them. A layer
//! installed as this process's global subscriber records every closed span's fields and every
//! event; each test looks only at spans and events of its own lock names.

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use support::{RedisServer, builder, client};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// A span or event: its name (or message) and fields, values as text.
#[derive(Debug, Clone, Default)]
struct Seen {
    name: String,
    level: Option<Level>,
    fields: HashMap<String, String>,
}

impl Visit for Seen {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.fields
            .insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.fields
            .insert(field.name().to_owned(), value.to_owned());
    }
}

#[derive(Default)]
struct Captured {
    closed: Mutex<Vec<Seen>>,
    events: Mutex<Vec<Seen>>,
}

struct Capture(Arc<Captured>);

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut seen = Seen {
            name: attrs.metadata().name().to_owned(),
            ..Seen::default()
        };
        attrs.record(&mut seen);
        ctx.span(id).unwrap().extensions_mut().insert(seen);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(seen) = ctx.span(id).unwrap().extensions_mut().get_mut::<Seen>() {
            values.record(seen);
        }
    }

    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let mut seen = Seen {
            level: Some(*event.metadata().level()),
            ..Seen::default()
        };
        event.record(&mut seen);
        seen.name = seen.fields.remove("message").unwrap_or_default();
        self.0.events.lock().unwrap().push(seen);
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        if let Some(seen) = ctx.span(&id).unwrap().extensions_mut().remove::<Seen>() {
            self.0.closed.lock().unwrap().push(seen);
        }
    }
}

fn captured() -> &'static Arc<Captured> {
    static CAPTURED: OnceLock<Arc<Captured>> = OnceLock::new();
    CAPTURED.get_or_init(|| {
        let captured = Arc::new(Captured::default());
        let subscriber = tracing_subscriber::registry().with(Capture(captured.clone()));
        tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
        captured
    })
}

/// The closed spans named `name` of lock `lock`, once there are `count` of them.
async fn spans(name: &str, lock: &str, count: usize) -> Vec<Seen> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let found: Vec<Seen> = captured()
            .closed
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.name == name && s.fields.get("lock").is_some_and(|l| l == lock))
            .cloned()
            .collect();
        if found.len() >= count || tokio::time::Instant::now() >= deadline {
            assert_eq!(found.len(), count, "{name} spans of {lock}: {found:#?}");
            return found;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_spans_of_a_grant_and_a_timeout() {
    captured();
    let server = RedisServer::start();
    let client = client(&server).await;
    let lock = client.get_lock("traced:one");
    let guard = lock.lock().await.unwrap();
    let token = guard.fencing_token();
    let contender = support::Elsewhere::new(client.get_lock("traced:one"));
    assert!(
        contender
            .try_lock_for(Duration::from_millis(150), None)
            .await
            .unwrap()
            .is_none()
    );
    guard.unlock().await.unwrap();

    let acquires = spans("ferrisson.acquire", "traced:one", 2).await;
    let granted = &acquires[0].fields;
    assert_eq!(granted["outcome"], "granted", "{granted:#?}");
    assert_eq!(granted["kind"], "lock");
    assert_eq!(granted["attempts"], "1");
    assert_eq!(granted["token"], token.to_string());
    assert_eq!(granted["db.system.name"], "redis");
    assert_eq!(granted["server.address"], "127.0.0.1");
    assert_eq!(granted["server.port"], server.port().to_string());
    let waited: f64 = granted["waited_ms"].parse().unwrap();
    assert!((0.0..5000.0).contains(&waited), "{waited}");
    assert!(!granted.contains_key("error"));

    let timed_out = &acquires[1].fields;
    assert_eq!(timed_out["outcome"], "timed_out", "{timed_out:#?}");
    assert!(!timed_out.contains_key("token"), "no token without a grant");
    let attempts: u32 = timed_out["attempts"].parse().unwrap();
    assert!(
        attempts >= 2,
        "tried, then waited and tried again: {attempts}"
    );
    let waited: f64 = timed_out["waited_ms"].parse().unwrap();
    assert!(waited >= 150.0, "waited its budget: {waited}");

    let releases = spans("ferrisson.release", "traced:one", 1).await;
    assert_eq!(releases[0].fields["outcome"], "released");
    assert_eq!(releases[0].fields["token"], token.to_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lease_is_a_warning_and_its_release_says_lost() {
    captured();
    let server = RedisServer::start();
    let client = builder(&server)
        .watchdog_timeout(Duration::from_millis(300))
        .build()
        .await
        .unwrap();
    let guard = client.get_lock("traced:lost").lock().await.unwrap();
    client.get_lock("traced:lost").force_unlock().await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), guard.lost())
        .await
        .expect("the watchdog finds it lost");
    assert!(guard.unlock().await.is_err());

    let warnings: Vec<Seen> = captured()
        .events
        .lock()
        .unwrap()
        .iter()
        .filter(|e| e.fields.get("lock").is_some_and(|l| l == "traced:lost"))
        .filter(|e| e.level == Some(Level::WARN))
        .cloned()
        .collect();
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert!(warnings[0].name.contains("lease lost"), "{warnings:#?}");
    assert_eq!(warnings[0].fields["kind"], "lock");
    assert_eq!(warnings[0].fields["reason"], "not_held");

    let releases = spans("ferrisson.release", "traced:lost", 1).await;
    assert_eq!(releases[0].fields["outcome"], "lost");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphores_and_latches_have_acquire_spans_too() {
    captured();
    let server = RedisServer::start();
    let client = client(&server).await;
    let semaphore = client.get_semaphore("traced:semaphore");
    assert!(!semaphore.try_acquire(1).await.unwrap());
    let permits = client.get_permit_expirable_semaphore("traced:permit");
    permits.try_set_permits(1).await.unwrap();
    let permit = permits.acquire().await.unwrap();
    let token = permit.fencing_token();
    permit.release().await.unwrap();
    let latch = client.get_count_down_latch("traced:latch");
    latch.try_set_count(1).await.unwrap();
    assert!(!latch.await_for(Duration::from_millis(50)).await.unwrap());

    let semaphore = spans("ferrisson.acquire", "traced:semaphore", 1).await;
    assert_eq!(semaphore[0].fields["kind"], "semaphore");
    assert_eq!(semaphore[0].fields["outcome"], "timed_out");
    let permit = spans("ferrisson.acquire", "traced:permit", 1).await;
    assert_eq!(permit[0].fields["kind"], "permit");
    assert_eq!(permit[0].fields["outcome"], "granted");
    assert_eq!(permit[0].fields["token"], token.to_string());
    let released = spans("ferrisson.release", "traced:permit", 1).await;
    assert_eq!(released[0].fields["outcome"], "released");
    let latch = spans("ferrisson.acquire", "traced:latch", 1).await;
    assert_eq!(latch[0].fields["kind"], "latch");
    assert_eq!(latch[0].fields["outcome"], "timed_out");
}
