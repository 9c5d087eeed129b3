//! The heartbeat's look at every hold, which changes nothing: so a hold that somebody else
//! removed (DEL, FLUSHALL, a forced unlock) or that the server forgot (a restart, a failover) is
//! noticed within about a second, not at its next renewal; and so a fixed lease, which is never
//! renewed, is looked at at all.

use std::sync::Arc;

use super::{RenewTarget, Renewal};
use crate::error::{Error, Result};
use crate::script::{Executor, HOLDS_PRESENT, ScriptCall};
use crate::slots::key_slot;

/// Holds one presence call looks at, at most: a read of a field each, so a call of this many
/// takes the server well under a millisecond.
const PRESENCE_BATCH: usize = 500;

/// The key and argument of `target`'s hold in a presence call (see `lua/holds_present.lua`).
fn presence(target: &RenewTarget) -> (&str, String) {
    match target {
        RenewTarget::HashField { key, field } => (key, format!("f{field}")),
        RenewTarget::ReadHolds { key, owner, .. } => (key, format!("f{owner}")),
        RenewTarget::Permits { timeouts, ids, .. } => (timeouts, format!("p{ids}")),
    }
}

/// Which of `holds` are gone from Redis: one presence call for all of them on one server (per
/// [`PRESENCE_BATCH`]), one per slot on a cluster, where a script's keys share a slot. Fails
/// when any call fails: then nothing is known of the rest either, and the caller suspects the
/// connection.
pub(super) async fn gone(
    executor: &Executor,
    holds: Vec<(u64, Arc<Renewal>)>,
) -> Result<Vec<(u64, Arc<Renewal>)>> {
    let per_slot = executor.target().is_cluster();
    let mut holds: Vec<_> = holds
        .into_iter()
        .map(|(id, renewal)| {
            let slot = match per_slot {
                true => key_slot(presence(&renewal.target).0),
                false => 0,
            };
            (slot, id, renewal)
        })
        .collect();
    holds.sort_by_key(|(slot, ..)| *slot);
    let chunks: Vec<&[(usize, u64, Arc<Renewal>)]> = holds
        .chunk_by(|a, b| a.0 == b.0)
        .flat_map(|group| group.chunks(PRESENCE_BATCH))
        .collect();
    let calls = chunks.iter().map(|chunk| async move {
        let mut call = ScriptCall::new(&HOLDS_PRESENT);
        let mut args = Vec::with_capacity(chunk.len());
        for (_, _, renewal) in chunk.iter() {
            let (key, arg) = presence(&renewal.target);
            call = call.key(key);
            args.push(arg);
        }
        for arg in args {
            call = call.arg(arg);
        }
        let key = presence(&chunk[0].2.target).0;
        let answers = executor.run::<Vec<i64>>(&call, key).await?;
        if answers.len() != chunk.len() {
            return Err(Error::unexpected(format!(
                "a presence check of {} holds answered {} results",
                chunk.len(),
                answers.len()
            )));
        }
        Ok(chunk
            .iter()
            .zip(answers)
            .filter(|(_, there)| *there == 0)
            .map(|((_, id, renewal), _)| (*id, renewal.clone()))
            .collect::<Vec<_>>())
    });
    let answered = futures::future::join_all(calls).await;
    let mut gone = Vec::new();
    for answer in answered {
        gone.extend(answer?);
    }
    Ok(gone)
}
