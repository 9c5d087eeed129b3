//! The heartbeat: while the client holds leases the watchdog keeps, a call every second that
//! finds out whether what it holds is gone: each hold removed by somebody else (DEL, FLUSHALL, a
//! forced unlock) is marked lost at once; and a failed call (a restart, a cut connection) or a
//! failover has the watchdog re-check every hold at once instead of at its next renewal. It also
//! keeps the client's identity alive.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::{RECHECK_RETRY, Shared, Sites, check};
use crate::identity::Own;
use crate::script::Executor;

/// How often the client makes sure its connection still stands while it holds renewed leases.
const HEARTBEAT: Duration = Duration::from_secs(1);

/// While any lease is renewed, a call every [`HEARTBEAT`], so an idle client learns within about
/// a second that what it holds may be gone, and the watchdog re-checks every hold (at once, and
/// every [`RECHECK_RETRY`] until a round gets through). Its own task, so that a server that does
/// not answer delays no renewal.
/// - Everywhere, a presence check of every hold (`lua/holds_present.lua`, one call for up to 500
///   holds; on a cluster one per slot): a hold it finds gone is lost, and its holder hears so.
/// - On one server (alone, or a sentinel's master) that is the whole beat: when it fails the
///   server restarted or the connection was cut, and the connection is given up, so the next
///   call opens a new one.
/// - On a cluster, `CLUSTER SLOTS` (which the redis crate needs anyway): when it fails, or names
///   other masters than a second before, a master died or a failover happened. A probe sent to
///   every master would not do: the redis crate leaves a node it cannot reach out of such a call
///   and answers for the others.
///
/// With the client's `identity`, it beats every second whether it holds anything or not: the
/// identity's refresh (see [`Own::beat`]), sent beside the presence check when there are holds,
/// which keeps the identity as long as the longest of them may live (`lease`, the watchdog
/// timeout, for a renewed one; what is left of a fixed one's), so that a process stopped or
/// hung while it holds something can still be found; it also says where the client's holds
/// were taken and which of its acquisitions wait for a hold of their own task, when that
/// changed (see [`sites`](super::sites)). Its failure alone suspects nothing (a hold's check does that for what matters).
pub(super) async fn heartbeat(
    shared: std::sync::Weak<Shared>,
    executor: Executor,
    mut shutdown: watch::Receiver<()>,
    identity: Option<Arc<Own>>,
    lease: Duration,
) {
    let refresh = |sites: Option<Sites>, hold_for: Option<Duration>| {
        let (identity, executor) = (&identity, &executor);
        async move {
            if let Some(identity) = identity
                && let Err(e) = identity.beat(executor, sites.as_ref(), hold_for).await
            {
                tracing::debug!(error = %e, "the client's identity was not refreshed");
            }
        }
    };
    let cluster = executor.target().is_cluster();
    let mut slots = redis::cmd("CLUSTER");
    slots.arg("SLOTS");
    // The masters a cluster named at the last heartbeat while holding.
    let mut masters: Option<u64> = None;
    let mut pause = HEARTBEAT;
    loop {
        tokio::select! {
            biased;
            _ = shutdown.changed() => return,
            () = tokio::time::sleep(pause) => {}
        }
        // What the identity says of the holds and self-waits, when there is one, and how long
        // it must outlive this beat.
        let (holds, sites, hold_for) = match shared.upgrade() {
            Some(shared) => {
                let sites = identity.as_ref().map(|_| super::sites::current(&shared));
                let hold_for = super::longest_hold(&shared, lease);
                (super::live(&shared), sites, hold_for)
            }
            None => return,
        };
        if holds.is_empty() {
            masters = None;
            pause = HEARTBEAT;
            refresh(sites, hold_for).await;
            continue;
        }
        // The presence check is the beat on one server (it fails like any call when the server
        // restarted or the connection was cut); a cluster's beat is `CLUSTER SLOTS` beside it.
        let looked = futures::future::join(check::gone(&executor, holds), refresh(sites, hold_for));
        let looked = async { looked.await.0 };
        let beat = if cluster {
            let listed = executor.read::<redis::Value>(&slots, "heartbeat");
            let (listed, looked) = futures::future::join(listed, looked).await;
            listed.and_then(|map| {
                let now = masters_digest(&map);
                let moved = masters.replace(now).is_some_and(|before| before != now);
                looked.map(|gone| (moved, gone))
            })
        } else {
            looked.await.map(|gone| (false, gone))
        };
        let beat = beat.map(|(moved, gone)| {
            if let Some(shared) = shared.upgrade() {
                for (id, renewal) in &gone {
                    super::found_gone(&shared, *id, renewal);
                }
            }
            moved
        });
        pause = match beat {
            Ok(false) => HEARTBEAT,
            Ok(true) => {
                tracing::debug!("the cluster names other masters: re-checking every hold");
                executor.suspect();
                HEARTBEAT
            }
            // Soon again, so a server that is back is found within a fraction of a second.
            Err(_) => {
                executor.suspect();
                RECHECK_RETRY
            }
        };
    }
}

/// A digest of which master serves which slots, from a `CLUSTER SLOTS` reply: each range's
/// bounds and its master's node id (replicas left out), in a fixed order whichever node
/// answered.
fn masters_digest(map: &redis::Value) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut ranges: Vec<String> = match map {
        redis::Value::Array(ranges) => ranges
            .iter()
            .map(|range| match range {
                // The range and its master's node id (the address differs by who answers: an
                // IP, a hostname).
                redis::Value::Array(parts) => {
                    let master_id = match parts.get(2) {
                        Some(redis::Value::Array(node)) => node.get(2),
                        _ => None,
                    };
                    format!("{:?} {:?} {master_id:?}", parts.first(), parts.get(1))
                }
                other => format!("{other:?}"),
            })
            .collect(),
        other => vec![format!("{other:?}")],
    };
    ranges.sort_unstable();
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    ranges.hash(&mut hasher);
    hasher.finish()
}
