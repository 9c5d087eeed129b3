//! `inspect`'s human-readable snapshot: one section per thing an operator asks about, holders
//! named by their client's identity.

use std::fmt::Write;
use std::time::Duration;

use ferrisson::inspect::{
    LockSnapshot, PermitSemaphoreSnapshot, Revocation, RwLockSnapshot, RwMode, Snapshot,
};

use crate::holds::lock_kind;
use crate::text::{clean, from_now, span};
use crate::who::Directory;

/// The snapshot as text, a line per fact. Every line is [`clean`] as it is written: names,
/// owners, permit ids and identities come from Redis.
pub(crate) fn snapshot(snapshot: &Snapshot, who: &Directory) -> String {
    let mut out = String::new();
    let name = snapshot.name();
    match snapshot {
        Snapshot::Lock(lock) => self::lock(&mut out, lock, who),
        Snapshot::ReadWriteLock(rw) => rwlock(&mut out, rw, who),
        Snapshot::Semaphore(s) => {
            line(&mut out, name, "semaphore (RSemaphore)");
            match s.available {
                Some(n) => field(&mut out, "permits", format!("{n} free")),
                None => field(
                    &mut out,
                    "permits",
                    "not set (try_set_permits was never called)",
                ),
            }
            field(&mut out, "waiting", listening(s.subscribers));
        }
        Snapshot::PermitExpirableSemaphore(p) => permits(&mut out, p),
        Snapshot::CountDownLatch(l) => {
            line(&mut out, name, "count-down latch (RCountDownLatch)");
            let state = if l.count == 0 { " (open)" } else { "" };
            field(&mut out, "count", format!("{}{state}", l.count));
            field(&mut out, "waiting", listening(l.subscribers));
        }
        Snapshot::Count(c) => {
            line(
                &mut out,
                name,
                "a count: a semaphore's free permits or a latch's count (nobody listens to tell \
                 which; --kind semaphore or --kind latch reads it as one)",
            );
            field(&mut out, "count", c.count.to_string());
        }
        Snapshot::Absent(a) => {
            line(
                &mut out,
                name,
                "nothing under this name: a free lock, an open latch or an unset semaphore",
            );
            let listening = a.lock_subscribers
                + a.rwlock_subscribers
                + a.semaphore_subscribers
                + a.latch_subscribers;
            if listening > 0 {
                field(
                    &mut out,
                    "waiting",
                    format!("{listening} connection(s) listening"),
                );
            }
        }
        other => line(&mut out, name, &format!("{other:?}")),
    }
    out
}

fn line(out: &mut String, name: &str, what: &str) {
    let _ = writeln!(out, "{}: {}", clean(name), clean(what));
}

fn field(out: &mut String, label: &str, value: impl AsRef<str>) {
    let _ = writeln!(out, "  {label:<12} {}", clean(value.as_ref()));
}

fn listening(connections: u64) -> String {
    match connections {
        0 => "nobody listening".to_owned(),
        n => format!("{n} client(s) waiting (connections listening)"),
    }
}

fn lease(lease: Option<Duration>, held: bool) -> String {
    match (lease, held) {
        (Some(left), _) => format!("{} left", span(left)),
        (None, true) => "none: held without a TTL, it never frees itself".to_owned(),
        (None, false) => "-".to_owned(),
    }
}

/// `, acquired at src/x.rs:42:7` when the place is known.
pub(crate) fn acquired(at: &Option<String>) -> String {
    at.as_ref()
        .map_or_else(String::new, |at| format!(", acquired at {at}"))
}

fn holds(n: u32) -> String {
    if n == 1 {
        "1 hold".to_owned()
    } else {
        format!("{n} holds")
    }
}

fn lock(out: &mut String, lock: &LockSnapshot, who: &Directory) {
    let state = if lock.is_held() { "held" } else { "free" };
    let kind = match lock_kind(lock.kind) {
        "lock" => "lock (RLock or RMutex)",
        "fair" => "fair lock (RFairLock)",
        _ => "fenced lock (RFencedLock)",
    };
    line(out, &lock.name, &format!("{kind}, {state}"));
    for h in &lock.holders {
        field(out, "held by", who.long(h.client, &h.owner));
        let at = acquired(&h.acquired_at);
        field(
            out,
            "",
            format!("owner {}, {}{at}", h.owner, holds(h.holds)),
        );
    }
    field(out, "lease", self::lease(lock.lease, lock.is_held()));
    let ferrisson = match lock.subscribers {
        0 => String::new(),
        _ => format!(", {} of them ferrisson", lock.ferrisson_subscribers),
    };
    // Fair waiters listen on channels of their own: the queue below says who waits.
    if lock.queue.is_empty() || lock.subscribers > 0 {
        field(out, "waiting", listening(lock.subscribers) + &ferrisson);
    }
    if !lock.queue.is_empty() {
        field(
            out,
            "fair queue",
            format!("{} waiter(s), first in line first", lock.queue.len()),
        );
        for (place, w) in lock.queue.iter().enumerate() {
            let turn = w
                .turn_timeout
                .map_or("-".to_owned(), |t| from_now(t.as_millis()));
            let alive = w
                .alive_deadline
                .map_or("- (a Java waiter)".to_owned(), |t| {
                    let dead = if t.has_passed() {
                        ", passed: taken for dead at the head"
                    } else {
                        ""
                    };
                    format!("{}{dead}", from_now(t.as_millis()))
                });
            field(
                out,
                "",
                format!("{}. {}", place + 1, who.long(w.client, &w.owner)),
            );
            field(
                out,
                "",
                format!(
                    "   turn times out {turn}, must call again {alive}, {} listening",
                    w.subscribers
                ),
            );
        }
    }
    for w in &lock.starving {
        field(
            out,
            "starving",
            format!(
                "{} for {}, served first",
                who.long(w.client, &w.owner),
                span(w.starving_for)
            ),
        );
    }
    revocations(out, &lock.revocations);
    if let Some(token) = lock.name_token_counter {
        field(out, "fenced", format!("latest token {token}"));
    }
}

fn rwlock(out: &mut String, rw: &RwLockSnapshot, who: &Directory) {
    let state = match rw.mode {
        Some(RwMode::Write) => "held for writing",
        Some(RwMode::Read) => "held for reading",
        _ => "free",
    };
    line(
        out,
        &rw.name,
        &format!("read-write lock (RReadWriteLock), {state}"),
    );
    if let Some(w) = &rw.writer {
        field(out, "writer", who.long(w.client, &w.owner));
        let at = acquired(&w.acquired_at);
        field(
            out,
            "",
            format!("owner {}, {} (write){at}", w.owner, holds(w.holds)),
        );
    }
    for r in &rw.readers {
        let leases: Vec<String> = r
            .leases
            .iter()
            .map(|l| l.map_or("gone".to_owned(), span))
            .collect();
        field(out, "reader", who.long(r.client, &r.owner));
        field(
            out,
            "",
            format!(
                "owner {}, {}, leases left {}{}",
                r.owner,
                holds(r.holds),
                leases.join(", "),
                acquired(&r.acquired_at)
            ),
        );
    }
    field(out, "lease", lease(rw.lease, rw.mode.is_some()));
    field(out, "waiting", listening(rw.subscribers));
    for w in &rw.waiting_writers {
        field(
            out,
            "writer waits",
            format!(
                "{}, mark expires {}",
                who.long(w.client, &w.owner),
                from_now(w.expires.as_millis())
            ),
        );
    }
    revocations(out, &rw.revocations);
}

fn permits(out: &mut String, p: &PermitSemaphoreSnapshot) {
    line(
        out,
        &p.name,
        "permit-expirable semaphore (RPermitExpirableSemaphore)",
    );
    let free = p.available.map_or("not set".to_owned(), |n| n.to_string());
    field(
        out,
        "permits",
        format!("{} out, {free} free", p.permits.len()),
    );
    for permit in &p.permits {
        let state = if permit.expires.has_passed() {
            "expired (given back by the next call)"
        } else {
            "expires"
        };
        field(
            out,
            "",
            format!(
                "{} {state} {}",
                permit.id,
                from_now(permit.expires.as_millis())
            ),
        );
    }
    field(out, "waiting", listening(p.subscribers));
    revocations(out, &p.revocations);
}

fn revocations(out: &mut String, requests: &[Revocation]) {
    for r in requests {
        field(
            out,
            "revocation",
            format!("{} asked to let go {} ago", r.hold, span(r.requested_ago)),
        );
    }
}
