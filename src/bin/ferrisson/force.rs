//! `force-unlock NAME [--yes]`: say who holds it, ask, read it again, and free it through the
//! library only if the same holders still hold it.
//!
//! The operator decides about the holders shown; minutes may pass before the answer, and the
//! lock may meanwhile have been released and taken by somebody else, whom nobody decided to
//! interrupt. So the object is read again after the answer (and with `--yes`, after the
//! first read), and a change of holders or kind refuses with exit 5. What remains is the
//! window between that second read and the unlock: one round trip, milliseconds. The
//! library's force unlock is unconditional (it deletes whatever hold is there); closing that
//! window too would take a script of the tool's own beside the library's, for a race an
//! operator cannot lose in practice, and a holder that won it is told by its guard's `lost()`
//! as any forced holder is.

use std::collections::BTreeSet;
use std::io::{BufRead, IsTerminal, Write};

use ferrisson::Client;
use ferrisson::inspect::{LockKind, RwMode, Snapshot};

use crate::fail::{Code, Failure};
use crate::holds::{holds, parties};
use crate::text::{clean, print, span};
use crate::who::Directory;

/// A held lock as read once: what was (or is to be) shown, and who holds it.
struct Held {
    snapshot: Snapshot,
    /// `lock` or `read-write lock`: the kind as shown.
    what: &'static str,
    /// `NAME (lock) held by …; lease … left`, with the holders' identities.
    held_by: String,
}

impl Held {
    /// The holders as the operator decides about them: the kind shown, a read-write lock's
    /// mode, and the set of owners (with their side). Reentrant counts and leases may change
    /// without making them other holders.
    fn holders(
        &self,
    ) -> (
        &'static str,
        Option<RwMode>,
        BTreeSet<(&'static str, String)>,
    ) {
        let mode = match &self.snapshot {
            Snapshot::ReadWriteLock(rw) => rw.mode,
            _ => None,
        };
        let owners = holds(&self.snapshot)
            .into_iter()
            .map(|h| (h.side, h.owner))
            .collect();
        (self.what, mode, owners)
    }
}

pub(crate) async fn force_unlock(client: &Client, name: &str, yes: bool) -> Result<Code, Failure> {
    let shown = clean(name);
    let Some(first) = read(client, name).await? else {
        print(&format!("{shown} is not held: nothing to unlock\n"));
        return Ok(Code::NOTHING_HELD);
    };
    if !yes {
        confirm(&shown, &first.held_by).await?;
    }
    // Read again: what is freed is what the operator decided about, or nothing. No lock any
    // more (deleted, and written again as a semaphore, say) is a change like any other.
    let now = match read(client, name).await {
        Err(e) if e.code == Code::WrongKind => {
            return Err(Failure::new(
                Code::Declined,
                format!(
                    "{shown} changed while you decided: {}. Not unlocked",
                    e.message
                ),
            ));
        }
        read => read?,
    };
    let Some(now) = now else {
        print(&format!(
            "{shown} was released meanwhile: nothing to unlock\n"
        ));
        return Ok(Code::NOTHING_HELD);
    };
    if now.holders() != first.holders() {
        return Err(Failure::new(
            Code::Declined,
            format!(
                "the holders changed while you decided: now {}. Not unlocked: run it again to \
                 decide about them (before: {})",
                now.held_by, first.held_by
            ),
        ));
    }
    // The second read's kind: a lock's kind shows once its keys say it, and a fair lock whose
    // queue appeared meanwhile must take the fair path, which wakes the first in line.
    let freed = match &now.snapshot {
        Snapshot::ReadWriteLock(_) => {
            client
                .get_read_write_lock(name)
                .write_lock()
                .force_unlock()
                .await?
        }
        Snapshot::Lock(lock) if lock.kind == LockKind::Fair => {
            client.get_fair_lock(name).force_unlock().await?
        }
        _ => client.get_lock(name).force_unlock().await?,
    };
    if !freed {
        print(&format!(
            "{shown} was no longer held: nothing was unlocked\n"
        ));
        return Ok(Code::NOTHING_HELD);
    }
    print(&format!(
        "force-unlocked {}\nits holders' guards report the hold lost within about a second \
         (their client's heartbeat)\n",
        now.held_by
    ));
    Ok(Code::Done)
}

/// `name` as a held lock; `None` when nothing holds it; a failure (exit 4) when it is of
/// another kind.
async fn read(client: &Client, name: &str) -> Result<Option<Held>, Failure> {
    let snapshot = client.inspect(name).await?;
    let (what, lease) = match &snapshot {
        Snapshot::Lock(lock) if lock.is_held() => ("lock", lock.lease),
        Snapshot::ReadWriteLock(rw) if rw.mode.is_some() => ("read-write lock", rw.lease),
        Snapshot::Lock(_) | Snapshot::ReadWriteLock(_) | Snapshot::Absent(_) => return Ok(None),
        other => {
            let shown = clean(name);
            return Err(Failure::new(
                Code::WrongKind,
                format!(
                    "{shown} is {}, not a lock: force-unlock frees locks and read-write locks \
                     only (a permit-expirable semaphore's permits come back when their lease \
                     ends; `ferrisson inspect {shown}` shows it)",
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
    let held_by = format!(
        "{} ({what}) held by {}; {left}",
        clean(name),
        holders.join("; ")
    );
    Ok(Some(Held {
        snapshot,
        what,
        held_by,
    }))
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
async fn confirm(name: &str, held_by: &str) -> Result<(), Failure> {
    if !std::io::stdin().is_terminal() {
        return Err(Failure::new(
            Code::Declined,
            format!(
                "{held_by}. Not unlocked: stdin is no terminal to ask on; pass --yes to \
                 force-unlock {name} without asking"
            ),
        ));
    }
    // The operator may think for minutes: the blocking read runs on tokio's blocking pool,
    // so that this runtime stays free for the connection's own tasks meanwhile. (The
    // client's heartbeat, which keeps its identity alive, runs on the client's own thread.)
    let question = format!("Force-unlock {held_by}? [y/N] ");
    let answer = tokio::task::spawn_blocking(move || {
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "{question}");
        let _ = err.flush();
        let mut answer = String::new();
        if std::io::stdin().lock().read_line(&mut answer).is_err() {
            answer.clear();
        }
        answer
    })
    .await
    .unwrap_or_default();
    match answer.trim() {
        "y" | "Y" | "yes" | "YES" | "Yes" => Ok(()),
        _ => Err(Failure::new(
            Code::Declined,
            format!("declined: {name} is left as it is"),
        )),
    }
}
