//! What operators see: `tracing` spans and events, and, with the `metrics` feature, counters,
//! gauges and histograms through the `metrics` facade.
//!
//! Every acquire of every object (the lock family, the semaphores, the latch's wait) runs inside
//! one `ferrisson.acquire` span and ends in one outcome; every release of a lock or of permits in
//! one `ferrisson.release` span. The rest of the crate calls in here with one line per site, so
//! the instrumentation lives in one place. Names and labels are listed in the README's
//! "Observing locks" section.
//!
//! Gauges never drift: every increment is owned by a value whose drop (or explicit end, which
//! happens once) decrements it, so a cancelled acquire or a dropped guard gives it back.

#[cfg(feature = "metrics")]
mod metrics;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Instant;

use tracing::Span;
use tracing::field::Empty;

use crate::error::{Error, Result};

/// Where a client's spans say they go (OpenTelemetry's `server.address` and `server.port`), and
/// whether metrics carry the lock name.
#[derive(Debug)]
pub(crate) struct Context {
    address: Arc<str>,
    port: Option<u16>,
    #[cfg(feature = "metrics")]
    lock_names: bool,
}

impl Context {
    /// The context of a client connected as `info` says; describes the metrics to the recorder
    /// installed now.
    pub(crate) fn new(info: &redis::ConnectionInfo, _config: &crate::config::Config) -> Self {
        let (address, port) = match info.addr() {
            redis::ConnectionAddr::Tcp(host, port) => (host.as_str().into(), Some(*port)),
            redis::ConnectionAddr::TcpTls { host, port, .. } => (host.as_str().into(), Some(*port)),
            other => (other.to_string().into(), None),
        };
        #[cfg(feature = "metrics")]
        metrics::describe();
        Context {
            address,
            port,
            #[cfg(feature = "metrics")]
            lock_names: _config.metrics_lock_names,
        }
    }

    /// The labels of object `name` of `kind`.
    pub(crate) fn labels(&self, kind: &'static str, _name: &str) -> Labels {
        Labels {
            kind,
            #[cfg(feature = "metrics")]
            keys: metrics::Keys::new(kind, self.lock_names.then_some(_name)),
        }
    }

    fn release_span(&self, labels: &Labels, name: &str, token: u64) -> Span {
        tracing::info_span!(
                "ferrisson.release",
                db.system.name = "redis",
                server.address = %self.address,
                server.port = self.port,
                lock = %name,
                kind = labels.kind,
                outcome = Empty,
                token,
                error = Empty,
            otel.status_code = Empty,
        )
    }

    fn acquire_span(&self, labels: &Labels, name: &str) -> Span {
        tracing::info_span!(
                "ferrisson.acquire",
                db.system.name = "redis",
                server.address = %self.address,
                server.port = self.port,
                lock = %name,
                kind = labels.kind,
                outcome = Empty,
                attempts = Empty,
                waited_ms = Empty,
                token = Empty,
                error = Empty,
            otel.status_code = Empty,
        )
    }
}

/// The labels of one object's metrics: its kind, and its name when the client was built with
/// `metrics_lock_names(true)`.
#[derive(Debug, Clone)]
pub(crate) struct Labels {
    kind: &'static str,
    #[cfg(feature = "metrics")]
    keys: metrics::Keys,
}

/// How an acquire ended, as the `outcome` field and label say it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Granted,
    /// The wait budget ran out (a `try_*` that found the object taken included).
    TimedOut,
    Error,
    /// The acquire future was dropped before it ended.
    Cancelled,
}

impl Outcome {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Outcome::Granted => "granted",
            Outcome::TimedOut => "timed_out",
            Outcome::Error => "error",
            Outcome::Cancelled => "cancelled",
        }
    }
}

/// How a release ended, as the `outcome` field and label say it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReleaseOutcome {
    Released,
    /// The hold was gone already.
    Lost,
    Error,
}

impl ReleaseOutcome {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ReleaseOutcome::Released => "released",
            ReleaseOutcome::Lost => "lost",
            ReleaseOutcome::Error => "error",
        }
    }
}

/// What an acquire returns, as far as observing it goes.
pub(crate) trait Acquired {
    /// Whether it got what it asked for.
    fn granted(&self) -> bool;
    /// The fencing token it got, if any.
    fn token(&self) -> Option<u64> {
        None
    }
}

impl Acquired for bool {
    fn granted(&self) -> bool {
        *self
    }
}

/// What one attempt of an acquire answered, as far as observing it goes.
pub(crate) trait Tried {
    /// The attempt was refused: the caller waits (or gives up).
    fn refused(&self) -> bool;
}

impl Tried for bool {
    fn refused(&self) -> bool {
        !*self
    }
}

/// Whether every acquire reads the clock, its span enabled or not: with the `metrics` feature
/// the wait histogram may have a recorder, and the facade cannot tell whether it has one.
const ALWAYS_TIMED: bool = cfg!(feature = "metrics");

/// One acquire under way: its span, its attempts, and whether it counts as a waiter. Dropped
/// before [`finish`](Self::finish) (the caller dropped the acquire future), it counts as
/// cancelled; either way the waiters gauge gets back what this acquire added to it.
#[derive(Debug)]
pub(crate) struct Acquire {
    #[cfg(feature = "metrics")]
    labels: Labels,
    span: Span,
    /// `None` when nothing would be told how long the acquire waited.
    started: Option<Instant>,
    /// Counted only for the span, so only while it is enabled.
    attempts: AtomicU32,
    /// Whether a budget allows waiting at all (`try_lock` does not wait).
    may_wait: bool,
    waiting: AtomicBool,
    finished: bool,
}

impl Acquire {
    /// An acquire of `name` (`kind`) with a wait budget of `wait` (`None`: for ever).
    pub(crate) fn start(
        context: &Context,
        kind: &'static str,
        name: &str,
        wait: Option<std::time::Duration>,
    ) -> Self {
        let labels = context.labels(kind, name);
        let span = context.acquire_span(&labels, name);
        Acquire {
            started: (ALWAYS_TIMED || !span.is_disabled()).then(Instant::now),
            span,
            #[cfg(feature = "metrics")]
            labels,
            attempts: AtomicU32::new(0),
            may_wait: wait != Some(std::time::Duration::ZERO),
            waiting: AtomicBool::new(false),
            finished: false,
        }
    }

    /// The span to run the acquire in.
    pub(crate) fn span(&self) -> Span {
        self.span.clone()
    }

    /// Counts one attempt; the first refusal makes this acquire a waiter.
    pub(crate) async fn attempt<T: Tried>(
        &self,
        attempt: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        self.attempt_started();
        let answer = attempt.await;
        self.attempt_answered(&answer);
        answer
    }

    /// Counts one attempt, about to be sent. With [`attempt_answered`](Self::attempt_answered),
    /// what [`attempt`](Self::attempt) does, for a caller that awaits the attempt itself (an
    /// async fn awaiting a future it was given keeps two copies of it in its state).
    pub(crate) fn attempt_started(&self) {
        // Only the span reports the count.
        if !self.span.is_disabled() {
            self.attempts.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// An attempt answered; the first refusal makes this acquire a waiter.
    pub(crate) fn attempt_answered<T: Tried>(&self, answer: &Result<T>) {
        if self.may_wait
            && matches!(answer, Ok(a) if a.refused())
            && !self.waiting.swap(true, Ordering::AcqRel)
        {
            #[cfg(feature = "metrics")]
            metrics::waiters(&self.labels, 1.0);
        }
    }

    /// Records how the acquire ended and hands its result back.
    pub(crate) fn finish<T: Acquired>(mut self, result: Result<T>) -> Result<T> {
        let outcome = match &result {
            Ok(got) if got.granted() => Outcome::Granted,
            Ok(_) => Outcome::TimedOut,
            Err(_) => Outcome::Error,
        };
        let token = result.as_ref().ok().and_then(Acquired::token);
        self.end(outcome, token, result.as_ref().err());
        result
    }

    fn end(&mut self, outcome: Outcome, token: Option<u64>, error: Option<&Error>) {
        self.finished = true;
        let waited = self.started.map(|started| started.elapsed());
        let span = &self.span;
        if !span.is_disabled() {
            span.record("outcome", outcome.as_str());
            span.record("attempts", self.attempts.load(Ordering::Relaxed));
            if let Some(waited) = waited {
                span.record("waited_ms", waited.as_secs_f64() * 1e3);
            }
            if let Some(token) = token {
                span.record("token", token);
            }
            if let Some(error) = error {
                span.record("error", tracing::field::display(error));
                span.record("otel.status_code", "ERROR");
            }
        }
        #[cfg(feature = "metrics")]
        metrics::acquired(&self.labels, outcome, waited);
    }
}

impl Drop for Acquire {
    fn drop(&mut self) {
        if !self.finished {
            self.end(Outcome::Cancelled, None, None);
        }
        if self.waiting.load(Ordering::Acquire) {
            #[cfg(feature = "metrics")]
            metrics::waiters(&self.labels, -1.0);
        }
    }
}

/// One release under way: its span, ended with the release's result.
#[derive(Debug)]
pub(crate) struct Release {
    #[cfg(feature = "metrics")]
    labels: Labels,
    span: Span,
}

impl Release {
    /// A release of `name` (`kind`), of a hold with fencing token `token`.
    pub(crate) fn start(context: &Context, kind: &'static str, name: &str, token: u64) -> Self {
        let labels = context.labels(kind, name);
        Release {
            span: context.release_span(&labels, name, token),
            #[cfg(feature = "metrics")]
            labels,
        }
    }

    /// The span to run the release in.
    pub(crate) fn span(&self) -> Span {
        self.span.clone()
    }

    /// Records how the release ended: `released`, `lost` (the hold was gone already) or
    /// `error`.
    pub(crate) fn finish(self, result: Result<()>) -> Result<()> {
        let outcome = match &result {
            Ok(()) => ReleaseOutcome::Released,
            Err(Error::LockLost { .. } | Error::PermitLost { .. }) => ReleaseOutcome::Lost,
            Err(_) => ReleaseOutcome::Error,
        };
        if !self.span.is_disabled() {
            self.span.record("outcome", outcome.as_str());
            if let Err(e) = &result {
                self.span.record("error", tracing::field::display(e));
                if outcome == ReleaseOutcome::Error {
                    self.span.record("otel.status_code", "ERROR");
                }
            }
        }
        #[cfg(feature = "metrics")]
        metrics::released(&self.labels, outcome);
        result
    }
}

/// A hold of a lease: counted in the held-leases gauge from [`began`](Held::began) until
/// [`end`](Held::end) or its drop, whichever comes first, and then timed.
#[derive(Debug)]
pub(crate) struct Held {
    #[cfg(feature = "metrics")]
    labels: Labels,
    #[cfg(feature = "metrics")]
    since: Instant,
    ended: AtomicBool,
}

impl Held {
    /// A hold that began now.
    pub(crate) fn began(_labels: &Labels) -> Self {
        #[cfg(feature = "metrics")]
        metrics::held(_labels, 1.0);
        Held {
            #[cfg(feature = "metrics")]
            labels: _labels.clone(),
            #[cfg(feature = "metrics")]
            since: Instant::now(),
            ended: AtomicBool::new(false),
        }
    }

    /// The hold is over (released or given up); later calls do nothing.
    pub(crate) fn end(&self) {
        if !self.ended.swap(true, Ordering::AcqRel) {
            #[cfg(feature = "metrics")]
            metrics::hold_ended(&self.labels, self.since.elapsed());
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.end();
    }
}

/// A lock's lease got its first live guard (`live` guards now): it counts as held from then on.
/// Paired with [`lock_hold_ended`], which the last guard's end calls.
pub(crate) fn lock_hold_began(_labels: &Labels, live: usize) {
    if live == 1 {
        #[cfg(feature = "metrics")]
        metrics::held(_labels, 1.0);
    }
}

/// A guard of a lock's lease is gone (`live` guards left); the last one ends the hold, which
/// began at `since`.
pub(crate) fn lock_hold_ended(_labels: &Labels, live: usize, _since: tokio::time::Instant) {
    if live == 0 {
        #[cfg(feature = "metrics")]
        metrics::hold_ended(_labels, _since.elapsed());
    }
}

/// A release handed the lock `name` straight to a waiter of the same client.
pub(crate) fn handed_over(labels: &Labels, name: &str, to: &str, token: u64) {
    tracing::debug!(lock = %name, kind = labels.kind, to = %to, token, "lock handed over to a waiter of this client");
    #[cfg(feature = "metrics")]
    metrics::handover(labels);
}

/// A waiter listening on `channel` was woken by a message.
pub(crate) fn woken(channel: &str) {
    tracing::debug!(channel = %channel, "waiter woken by a message; trying again");
}

/// Why the watchdog gave a lease up.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Lost {
    /// A renewal found the hold gone (expired, deleted, forced open).
    NotHeld,
    /// Renewals failed until the lease's deadline passed.
    Expired,
}

impl Lost {
    /// The `reason` field and label.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Lost::NotHeld => "not_held",
            Lost::Expired => "expired",
        }
    }
}

/// The watchdog found the lease of `name` lost.
pub(crate) fn lease_lost(labels: &Labels, name: &str, why: Lost, error: Option<&Error>) {
    let reason = why.as_str();
    match (why, error) {
        (_, Some(e)) => {
            tracing::warn!(lock = %name, kind = labels.kind, reason, error = %e, "lease lost: renewals failed until its deadline")
        }
        (Lost::Expired, None) => {
            tracing::warn!(lock = %name, kind = labels.kind, reason, "lease lost: renewals failed until its deadline")
        }
        (Lost::NotHeld, None) => {
            tracing::warn!(lock = %name, kind = labels.kind, reason, "lease lost: the lock is no longer ours")
        }
    }
    #[cfg(feature = "metrics")]
    metrics::lease_lost(labels, why);
}

/// A renewal call for `leases` leases failed (they are tried again until their deadline).
///
/// While Redis is down the watchdog retries every fifth of a second: one WARN per ten seconds
/// says so, with how many failures it left out. Each client's watchdog runs on that client's
/// own thread, so a limit kept per thread is one per client.
pub(crate) fn renewals_failed(leases: usize, error: &Error) {
    thread_local! {
        static REPORTS: std::cell::RefCell<crate::outage::Every> =
            const { std::cell::RefCell::new(crate::outage::Every::new()) };
    }
    match REPORTS.with(|every| every.borrow_mut().due()) {
        Some(left_out) => tracing::warn!(
            leases,
            error = %error,
            failures_since_last_report = left_out,
            "lease renewal failed; retrying until the leases' deadline"
        ),
        None => tracing::debug!(leases, error = %error, "lease renewal failed again"),
    }
    #[cfg(feature = "metrics")]
    metrics::renewals_failed(leases);
}

#[cfg(test)]
mod tests;
