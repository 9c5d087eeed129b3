//! `force-unlock NAME [--yes]`: say who holds it, ask, free it through the library.

use std::io::{BufRead, IsTerminal, Write};

use ferrisson::Client;
use ferrisson::inspect::{LockKind, Snapshot};

use crate::fail::{Code, Failure};
use crate::holds::{holds, parties};
use crate::text::{print, span};
use crate::who::Directory;

pub(crate) async fn force_unlock(client: &Client, name: &str, yes: bool) -> Result<Code, Failure> {
    let snapshot = client.inspect(name).await?;
    let (what, lease) = match &snapshot {
        Snapshot::Lock(lock) if lock.is_held() => ("lock", lock.lease),
        Snapshot::ReadWriteLock(rw) if rw.mode.is_some() => ("read-write lock", rw.lease),
        Snapshot::Lock(_) | Snapshot::ReadWriteLock(_) | Snapshot::Absent(_) => {
            print(&format!("{name} is not held: nothing to unlock\n"));
            return Ok(Code::NOTHING_HELD);
        }
        other => {
            return Err(Failure::new(
                Code::WrongKind,
                format!(
                    "{name} is {}, not a lock: force-unlock frees locks and read-write locks \
                     only (a permit-expirable semaphore's permits come back when their lease \
                     ends; `ferrisson inspect {name}` shows it)",
                    noun(other)
                ),
            ));
        }
    };
    let who = Directory::of(client, &parties(&snapshot)).await?;
    let holders: Vec<String> = holds(&snapshot)
        .iter()
        .map(|h| {
            let side = if h.side.is_empty() {
                String::new()
            } else {
                format!(" ({})", h.side)
            };
            format!("{}{side}", who.long(h.client, &h.owner))
        })
        .collect();
    let left = lease.map_or("no lease: it never frees itself".to_owned(), |l| {
        format!("lease {} left", span(l))
    });
    let held_by = format!("{name} ({what}) held by {}; {left}", holders.join("; "));
    if !yes {
        confirm(name, &held_by)?;
    }
    let freed = match &snapshot {
        Snapshot::ReadWriteLock(_) => {
            client
                .get_read_write_lock(name)
                .write_lock()
                .force_unlock()
                .await?
        }
        // A fair lock's own force unlock also wakes the first in its queue.
        Snapshot::Lock(lock) if lock.kind == LockKind::Fair => {
            client.get_fair_lock(name).force_unlock().await?
        }
        _ => client.get_lock(name).force_unlock().await?,
    };
    if !freed {
        print(&format!(
            "{name} was no longer held: nothing was unlocked\n"
        ));
        return Ok(Code::NOTHING_HELD);
    }
    print(&format!(
        "force-unlocked {held_by}\nits holders' guards report the hold lost within about a \
         second (their client's heartbeat)\n"
    ));
    Ok(Code::Done)
}

/// What a snapshot that is no lock is, in words.
fn noun(snapshot: &Snapshot) -> &'static str {
    match snapshot {
        Snapshot::Semaphore(_) => "a semaphore",
        Snapshot::PermitExpirableSemaphore(_) => "a permit-expirable semaphore",
        Snapshot::CountDownLatch(_) => "a count-down latch",
        Snapshot::Count(_) => "a count (a semaphore's or a latch's)",
        _ => "another kind of object",
    }
}

/// Asks on the terminal; a refusal, or no terminal to ask on, is exit code 5.
fn confirm(name: &str, held_by: &str) -> Result<(), Failure> {
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return Err(Failure::new(
            Code::Declined,
            format!(
                "{held_by}. Not unlocked: stdin is no terminal to ask on; pass --yes to \
                 force-unlock {name} without asking"
            ),
        ));
    }
    let mut err = std::io::stderr().lock();
    let _ = write!(err, "Force-unlock {held_by}? [y/N] ");
    let _ = err.flush();
    let mut answer = String::new();
    if stdin.lock().read_line(&mut answer).is_err() {
        answer.clear();
    }
    match answer.trim() {
        "y" | "Y" | "yes" | "YES" | "Yes" => Ok(()),
        _ => Err(Failure::new(
            Code::Declined,
            format!("declined: {name} is left as it is"),
        )),
    }
}
