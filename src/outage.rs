//! Outages of one connection: what they log, and when the next attempt to reconnect may go.
//!
//! A connection that is lost logs one WARN; while it stays down, at most one more every
//! [`REPORT_EVERY`] (how long it has been down, how many attempts failed); once it is back, one
//! INFO with how long it was down. A connection that drops again within [`REPORT_EVERY`] of its
//! last WARN (a flapping link) is not reported again until then, nor its return.
//!
//! Attempts back off: the first goes at once, and after the n-th failure in a row the next waits
//! `d/2 + random(0, d/2)`, where `d` = [`FIRST_PAUSE`] · 2ⁿ⁻¹ capped at [`MAX_PAUSE`]. The random
//! half keeps a fleet of clients that lost one server together from coming back in step; the
//! fixed half bounds how often one connection may knock (at most 2 attempts a second at the
//! cap). The cap is short because the watchdog re-checks every hold once its connection is back,
//! and a holder whose hold vanished must hear it within about a second of the server's return.
//! An attempt due later fails at once, as a refused connection does, without touching the
//! network.

use std::fmt::Display;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use redis::RedisError;

/// How often a connection that stays down is reported again.
pub(crate) const REPORT_EVERY: Duration = Duration::from_secs(10);

/// The pause after the first failed attempt (before its random part).
pub(crate) const FIRST_PAUSE: Duration = Duration::from_millis(100);

/// The longest pause between two attempts (before its random part).
pub(crate) const MAX_PAUSE: Duration = Duration::from_secs(1);

/// The pause after `failures` failed attempts in a row, `unit` in `[0, 1)` drawing its random
/// half.
pub(crate) fn pause(failures: u32, unit: f64) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    let full = FIRST_PAUSE.saturating_mul(1 << doublings).min(MAX_PAUSE);
    full / 2 + (full / 2).mul_f64(unit.clamp(0.0, 1.0))
}

/// A number in `[0, 1)` from the OS-seeded UUID generator.
fn random_unit() -> f64 {
    let (high, _) = uuid::Uuid::new_v4().as_u64_pair();
    (high >> 11) as f64 / (1u64 << 53) as f64
}

/// Which client's connection to where, as log lines name it.
#[derive(Debug, Clone)]
pub(crate) struct Peer {
    /// The client's id.
    pub(crate) client: uuid::Uuid,
    /// The server: host and port, a cluster's seed, a sentinel's master name.
    pub(crate) server: Arc<str>,
}

/// The outages of one connection.
#[derive(Debug)]
pub(crate) struct Outage {
    /// Which connection: "command", "background", "synced command", "pub/sub".
    kind: &'static str,
    peer: Peer,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    down: Option<Down>,
    /// When this connection was last reported (a WARN).
    warned: Option<Instant>,
    /// Losses left unreported since that report.
    unreported: u32,
    /// Failed attempts in a row.
    failures: u32,
    /// No attempt before this.
    next: Option<Instant>,
}

#[derive(Debug)]
struct Down {
    since: Instant,
    attempts: u32,
    /// A WARN said this outage began: its end is told too.
    reported: bool,
    last_error: String,
}

/// Seconds with one decimal, as log lines show durations.
fn secs(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

impl Outage {
    pub(crate) fn new(kind: &'static str, peer: Peer) -> Self {
        Outage {
            kind,
            peer,
            state: Mutex::default(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Every change is a handful of assignments that cannot panic halfway.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a WARN is due now (and is then counted as made).
    fn report_due(state: &mut State, now: Instant) -> bool {
        if state
            .warned
            .is_some_and(|at| now.duration_since(at) < REPORT_EVERY)
        {
            return false;
        }
        state.warned = Some(now);
        true
    }

    /// The connection was lost (it broke, or it was given up as silent): the next attempt goes
    /// at once.
    pub(crate) fn lost(&self, why: &dyn Display) {
        let now = Instant::now();
        let unreported = {
            let mut state = self.state();
            if state.down.is_some() {
                return;
            }
            let reported = Self::report_due(&mut state, now);
            state.down = Some(Down {
                since: now,
                attempts: 0,
                reported,
                last_error: why.to_string(),
            });
            if !reported {
                state.unreported += 1;
                None
            } else {
                Some(std::mem::take(&mut state.unreported))
            }
        };
        let Peer { client, server } = &self.peer;
        match unreported {
            Some(earlier) => tracing::warn!(
                connection = self.kind,
                %client,
                %server,
                error = %why,
                unreported_losses = earlier,
                "lost the connection to redis; reconnecting"
            ),
            None => tracing::debug!(
                connection = self.kind,
                %client,
                %server,
                error = %why,
                "lost the connection to redis again; reconnecting"
            ),
        }
    }

    /// An attempt to connect failed with `error`. Answers how long the next one must wait.
    pub(crate) fn failed(&self, error: &dyn Display) -> Duration {
        let now = Instant::now();
        let (report, pause) = {
            let mut state = self.state();
            state.failures = state.failures.saturating_add(1);
            let pause = pause(state.failures, random_unit());
            state.next = Some(now + pause);
            let due = Self::report_due(&mut state, now);
            let report = match &mut state.down {
                Some(down) => {
                    down.attempts = down.attempts.saturating_add(1);
                    down.last_error = error.to_string();
                    down.reported |= due;
                    due.then(|| Some((now.duration_since(down.since), down.attempts)))
                }
                None => {
                    state.down = Some(Down {
                        since: now,
                        attempts: 1,
                        reported: due,
                        last_error: error.to_string(),
                    });
                    due.then_some(None)
                }
            };
            (report, pause)
        };
        let Peer { client, server } = &self.peer;
        match report {
            Some(Some((down_for, attempts))) => tracing::warn!(
                connection = self.kind,
                %client,
                %server,
                down_for = %secs(down_for),
                attempts,
                error = %error,
                next_attempt_in = %secs(pause),
                "still cannot reach redis; retrying with backoff"
            ),
            Some(None) => tracing::warn!(
                connection = self.kind,
                %client,
                %server,
                error = %error,
                next_attempt_in = %secs(pause),
                "cannot connect to redis; retrying with backoff"
            ),
            None => tracing::debug!(
                connection = self.kind,
                %client,
                %server,
                error = %error,
                next_attempt_in = %secs(pause),
                "reconnection attempt failed"
            ),
        }
        pause
    }

    /// An attempt to connect succeeded.
    pub(crate) fn opened(&self) {
        let down = {
            let mut state = self.state();
            state.failures = 0;
            state.next = None;
            state.down.take()
        };
        let Some(down) = down else {
            return;
        };
        let Peer { client, server } = &self.peer;
        let down_for = secs(down.since.elapsed());
        if down.reported {
            tracing::info!(
                connection = self.kind,
                %client,
                %server,
                down_for = %down_for,
                attempts = down.attempts,
                "the connection to redis is back"
            );
        } else {
            tracing::debug!(connection = self.kind, %client, %server, down_for = %down_for, "reconnected to redis");
        }
    }

    /// How long the next attempt must still wait (`None`: it may go now).
    pub(crate) fn wait(&self) -> Option<Duration> {
        let next = self.state().next?;
        let left = next.saturating_duration_since(Instant::now());
        (!left.is_zero()).then_some(left)
    }

    /// The error of a call that needs a connection while the next attempt must still wait
    /// `left`: a refusal, since nothing was sent.
    pub(crate) fn not_yet(&self, left: Duration) -> RedisError {
        let state = self.state();
        let (down_for, attempts, last) = match &state.down {
            Some(down) => (
                down.since.elapsed(),
                down.attempts,
                down.last_error.as_str(),
            ),
            None => (Duration::ZERO, 0, "none"),
        };
        std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            format!(
                "not connected to redis at {} (down for {}, {attempts} failed attempt(s), the last: {last}); the next attempt is in {}",
                self.peer.server,
                secs(down_for),
                secs(left),
            ),
        )
        .into()
    }
}

/// At most one report per [`REPORT_EVERY`] of something that may happen many times a second
/// (a failing renewal, a dropped subscription), with how many were left out in between.
#[derive(Debug, Default)]
pub(crate) struct Every {
    last: Option<Instant>,
    left_out: u64,
}

impl Every {
    pub(crate) const fn new() -> Self {
        Every {
            last: None,
            left_out: 0,
        }
    }

    /// Whether to report this one: `Some(how many were left out since the last report)`.
    pub(crate) fn due(&mut self) -> Option<u64> {
        let now = Instant::now();
        if self
            .last
            .is_some_and(|at| now.duration_since(at) < REPORT_EVERY)
        {
            self.left_out += 1;
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.left_out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_double_from_the_first_up_to_the_cap_and_keep_their_fixed_half() {
        let fixed: Vec<u128> = (1..=7).map(|n| pause(n, 0.0).as_millis()).collect();
        assert_eq!(fixed, [50, 100, 200, 400, 500, 500, 500]);
        let whole: Vec<u128> = (1..=7).map(|n| pause(n, 0.999_999).as_millis()).collect();
        assert_eq!(whole, [99, 199, 399, 799, 999, 999, 999]);
        assert_eq!(pause(u32::MAX, 0.5), Duration::from_millis(750));
    }

    #[test]
    fn random_units_are_in_range_and_vary() {
        let draws: Vec<f64> = (0..64).map(|_| random_unit()).collect();
        assert!(draws.iter().all(|u| (0.0..1.0).contains(u)));
        assert!(draws.iter().any(|u| *u != draws[0]));
    }

    fn outage() -> Outage {
        Outage::new(
            "command",
            Peer {
                client: uuid::Uuid::nil(),
                server: "127.0.0.1:1".into(),
            },
        )
    }

    #[test]
    fn the_first_attempt_goes_at_once_and_failures_make_the_next_wait() {
        let outage = outage();
        outage.lost(&"reset");
        assert_eq!(outage.wait(), None);
        let pause = outage.failed(&"refused");
        let left = outage.wait().expect("the next attempt waits");
        assert!(left <= pause && pause <= MAX_PAUSE);
        let err = outage.not_yet(left);
        assert!(err.is_connection_refusal(), "{err}");
        let shown = err.to_string();
        assert!(
            shown.contains("127.0.0.1:1") && shown.contains("refused"),
            "{shown}"
        );
        outage.opened();
        assert_eq!(outage.wait(), None);
        assert!(outage.state().down.is_none());
    }

    #[test]
    fn losses_within_the_report_interval_are_reported_once() {
        let outage = outage();
        outage.lost(&"reset");
        assert!(outage.state().down.as_ref().unwrap().reported);
        outage.opened();
        outage.lost(&"reset again");
        assert!(!outage.state().down.as_ref().unwrap().reported);
        assert_eq!(outage.state().unreported, 1);
    }

    #[test]
    fn every_reports_the_first_then_counts_what_it_leaves_out() {
        let mut every = Every::new();
        assert_eq!(every.due(), Some(0));
        assert_eq!(every.due(), None);
        assert_eq!(every.due(), None);
        every.last = Some(Instant::now() - REPORT_EVERY);
        assert_eq!(every.due(), Some(2));
    }
}
