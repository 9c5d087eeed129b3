//! What a client's identity says of where its holds were taken, and of its waits for a hold
//! of their own task or thread: written by the heartbeat when it changed (see
//! [`Own::beat`](super::Own::beat)), read back into [`ClientIdentity`](super::ClientIdentity).
//!
//! Three hash fields, each a text of lines, one entry per line and its parts separated by tabs
//! (`%`, tab, CR and LF in a part written `%25`, `%09`, `%0D`, `%0A`):
//!
//! - `held_at`: `<lock>\t<owner>\t<file:line:col>`, for each hold that has lived a second, by
//!   lock and owner, at most 200;
//! - `held_at_total`: how many such holds there are;
//! - `self_waits`: `<lock>\t<waiting owner>\t<held at>\t<called at>\t<since, server unix
//!   ms>\t<task|thread>`.
//!
//! Read defensively: a line or a field that does not parse (another version's, or written by
//! hand) is left out, never an error.

use std::collections::HashMap;
use std::time::Duration;

use crate::watchdog::Sites;

const HELD_AT: &str = "held_at";
const HELD_AT_TOTAL: &str = "held_at_total";
const SELF_WAITS: &str = "self_waits";

/// Where a live client's hold was taken, as its identity says (see
/// [`ClientIdentity::hold_sites`](super::ClientIdentity::hold_sites)).
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
/// for who in client.clients().await? {
///     for hold in &who.hold_sites {
///         // orders:42 held by 1b4e28ba-...:7, acquired at src/orders.rs:42:27
///         println!("{} held by {}, acquired at {}", hold.lock, hold.owner, hold.acquired_at);
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct HoldSite {
    /// The lock's name, e.g. `orders:42` (a read-write lock's for either side).
    pub lock: String,
    /// The owner holding it, `<client-uuid>:<n>`, as a snapshot's holder names it.
    pub owner: String,
    /// Where the acquisition that took the hold was called: `file:line:column`, e.g.
    /// `src/orders.rs:42:27` (a hold nested in it has its place).
    pub acquired_at: String,
}

/// An acquisition of a live client that has waited longer than its client's
/// [`self_wait_warning`](crate::ClientBuilder::self_wait_warning) for a hold its own task
/// (or thread) keeps, as its identity says (see
/// [`ClientIdentity::self_waits`](super::ClientIdentity::self_waits)): most likely waiting
/// for itself, for ever.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
/// for who in client.clients().await? {
///     for wait in &who.self_waits {
///         println!(
///             "{} (pid {}) waits for a hold of its own on {}: taken at {}, asked again at {}, \
///              for {:?}",
///             who.app, who.pid, wait.lock, wait.held_at, wait.called_at, wait.waited
///         );
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct SelfWaitSite {
    /// The lock's name, e.g. `orders:42`.
    pub lock: String,
    /// The waiting acquisition's owner, `<client-uuid>:<n>`.
    pub owner: String,
    /// Where the hold it waits for was taken, `file:line:column`.
    pub held_at: String,
    /// Where the waiting acquisition was called, `file:line:column`.
    pub called_at: String,
    /// Whether the waiter runs outside any task (the [`blocking`](crate::blocking) API): its
    /// own thread keeps the hold; else its own Tokio task does.
    pub thread: bool,
    /// When it began to wait (its first refusal): unix time in milliseconds on the clock of
    /// the server that holds the identity, as [`started_ms`](super::ClientIdentity::started_ms).
    pub since_ms: u64,
    /// How long it had waited when this was read: the server's `TIME` then minus
    /// [`since_ms`](Self::since_ms).
    #[cfg_attr(
        feature = "serde",
        serde(rename = "waited_ms", serialize_with = "crate::inspect::ser::millis")
    )]
    pub waited: Duration,
}

/// What the identity's fields say of the client's holds and self-waits.
#[derive(Debug, Default)]
pub(super) struct Read {
    pub(super) holds: Vec<HoldSite>,
    pub(super) holds_total: usize,
    pub(super) self_waits: Vec<SelfWaitSite>,
}

/// The fields that say so, as the heartbeat writes them; `clock` pairs a moment of this process
/// with the server's unix ms then (the identity's first write), to put the self-waits' starts
/// on the server's clock.
pub(super) fn fields(
    sites: &Sites,
    clock: Option<(std::time::Instant, u64)>,
) -> Vec<(&'static str, String)> {
    let mut held = String::new();
    for hold in &sites.held {
        line(&mut held, &[&hold.lock, &hold.owner, &hold.at.to_string()]);
    }
    let mut waits = String::new();
    for wait in &sites.self_waits {
        let since_ms = match clock {
            Some((then, server_ms)) if wait.since >= then => {
                let ms = u64::try_from((wait.since - then).as_millis()).unwrap_or(u64::MAX);
                server_ms.saturating_add(ms)
            }
            Some((then, server_ms)) => {
                let ms = u64::try_from((then - wait.since).as_millis()).unwrap_or(u64::MAX);
                server_ms.saturating_sub(ms)
            }
            None => 0,
        };
        let whose = if wait.thread { "thread" } else { "task" };
        let (held_at, called_at) = (wait.held_at.to_string(), wait.called_at.to_string());
        let since = since_ms.to_string();
        line(
            &mut waits,
            &[&wait.lock, &wait.owner, &held_at, &called_at, &since, whose],
        );
    }
    vec![
        (HELD_AT, held),
        (HELD_AT_TOTAL, sites.held_total.to_string()),
        (SELF_WAITS, waits),
    ]
}

/// Reads what `fields` (an identity's hash) says, aged by the server's clock `now_ms`.
pub(super) fn read(fields: &HashMap<String, String>, now_ms: u64) -> Read {
    let lines = |name: &str| {
        fields
            .get(name)
            .map(|text| text.lines().map(parts).collect::<Vec<_>>())
            .unwrap_or_default()
    };
    let holds: Vec<HoldSite> = lines(HELD_AT)
        .into_iter()
        .filter_map(|parts| match <[String; 3]>::try_from(parts) {
            Ok([lock, owner, acquired_at]) => Some(HoldSite {
                lock,
                owner,
                acquired_at,
            }),
            Err(_) => None,
        })
        .collect();
    let self_waits = lines(SELF_WAITS)
        .into_iter()
        .filter_map(|parts| {
            let [lock, owner, held_at, called_at, since, whose] =
                <[String; 6]>::try_from(parts).ok()?;
            let since_ms: u64 = since.parse().ok()?;
            let thread = match whose.as_str() {
                "thread" => true,
                "task" => false,
                _ => return None,
            };
            Some(SelfWaitSite {
                lock,
                owner,
                held_at,
                called_at,
                thread,
                since_ms,
                waited: Duration::from_millis(now_ms.saturating_sub(since_ms)),
            })
        })
        .collect();
    let holds_total = fields
        .get(HELD_AT_TOTAL)
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
        .max(holds.len());
    Read {
        holds,
        holds_total,
        self_waits,
    }
}

/// Appends one entry of `parts` and its line's end.
fn line(out: &mut String, parts: &[&str]) {
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            out.push('\t');
        }
        for c in part.chars() {
            match c {
                '%' => out.push_str("%25"),
                '\t' => out.push_str("%09"),
                '\n' => out.push_str("%0A"),
                '\r' => out.push_str("%0D"),
                c => out.push(c),
            }
        }
    }
    out.push('\n');
}

/// The parts of one line, each unescaped (an escape that is none of ours is left as it is).
fn parts(line: &str) -> Vec<String> {
    line.split('\t')
        .map(|part| {
            let mut out = String::with_capacity(part.len());
            let mut rest = part;
            while let Some(at) = rest.find('%') {
                out.push_str(&rest[..at]);
                let code = rest.get(at + 1..at + 3);
                let c = match code {
                    Some("25") => Some('%'),
                    Some("09") => Some('\t'),
                    Some("0A") => Some('\n'),
                    Some("0D") => Some('\r'),
                    _ => None,
                };
                match c {
                    Some(c) => {
                        out.push(c);
                        rest = &rest[at + 3..];
                    }
                    None => {
                        out.push('%');
                        rest = &rest[at + 1..];
                    }
                }
            }
            out.push_str(rest);
            out
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::panic::Location;
    use std::sync::Arc;
    use std::time::Instant;

    use super::*;
    use crate::watchdog::{HeldSite, SelfWaitEntry};

    #[test]
    fn what_is_written_reads_back_odd_names_included() {
        let here = Location::caller();
        let then = Instant::now();
        let sites = Sites {
            held: vec![HeldSite {
                lock: Arc::from("tab\there%0A and\nline"),
                owner: Arc::from("c:1"),
                at: here,
            }],
            held_total: 350,
            self_waits: vec![SelfWaitEntry {
                lock: Arc::from("orders"),
                owner: Arc::from("c:2"),
                held_at: here,
                called_at: here,
                since: then + Duration::from_millis(1500),
                thread: true,
            }],
        };
        let written: HashMap<String, String> = fields(&sites, Some((then, 1_000_000)))
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        let read = read(&written, 1_004_000);
        assert_eq!(read.holds_total, 350);
        assert_eq!(read.holds.len(), 1);
        assert_eq!(read.holds[0].lock, "tab\there%0A and\nline");
        assert_eq!(
            (
                read.holds[0].owner.as_str(),
                read.holds[0].acquired_at.as_str()
            ),
            ("c:1", here.to_string().as_str())
        );
        let wait = &read.self_waits[0];
        assert_eq!((wait.lock.as_str(), wait.owner.as_str()), ("orders", "c:2"));
        assert_eq!(wait.held_at, here.to_string());
        assert_eq!(wait.called_at, here.to_string());
        assert!(wait.thread);
        assert_eq!(wait.since_ms, 1_001_500);
        assert_eq!(wait.waited, Duration::from_millis(2500));
    }

    #[test]
    fn foreign_or_malformed_fields_are_left_out() {
        let fields = HashMap::from([
            (
                HELD_AT.to_owned(),
                "only\ttwo\nl\to\tk\textra\n\n%zz\t%\t%2".to_owned(),
            ),
            (HELD_AT_TOTAL.to_owned(), "many".to_owned()),
            (
                SELF_WAITS.to_owned(),
                "a\tb\tc\td\tnot-a-number\ttask\na\tb\tc\td\t5\tfiber\na\tb\tc\td\t5\ttask"
                    .to_owned(),
            ),
        ]);
        let read = read(&fields, 3);
        assert_eq!(read.holds.len(), 1, "{:?}", read.holds);
        assert_eq!(read.holds[0].lock, "%zz");
        assert_eq!(read.holds[0].acquired_at, "%2");
        assert_eq!(read.holds_total, 1, "at least the holds listed");
        assert_eq!(read.self_waits.len(), 1);
        assert_eq!(read.self_waits[0].waited, Duration::ZERO);
        let none = super::read(&HashMap::new(), 0);
        assert!(none.holds.is_empty() && none.self_waits.is_empty() && none.holds_total == 0);
    }
}
