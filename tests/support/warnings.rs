//! Every WARN a test process logs, with its message and the object it names (the `lock` or
//! `semaphore` field), for tests that check what a failure logs. The first call installs the
//! collector as the process's global subscriber.

use std::sync::{Mutex, OnceLock};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

/// Every WARN's message and the name it gave, in the order logged.
pub fn warnings() -> &'static Mutex<Vec<(String, String)>> {
    static WARNINGS: OnceLock<Mutex<Vec<(String, String)>>> = OnceLock::new();
    WARNINGS.get_or_init(|| {
        let subscriber = tracing_subscriber::registry().with(Warnings);
        tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
        Mutex::default()
    })
}

struct Warnings;

#[derive(Default)]
struct Fields {
    message: String,
    name: String,
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "message" => self.message = format!("{value:?}"),
            "lock" | "semaphore" => self.name = format!("{value:?}"),
            _ => {}
        }
    }
}

impl<S: Subscriber> Layer<S> for Warnings {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        if *event.metadata().level() == Level::WARN {
            let mut fields = Fields::default();
            event.record(&mut fields);
            warnings()
                .lock()
                .unwrap()
                .push((fields.message, fields.name));
        }
    }
}
