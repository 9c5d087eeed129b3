//! `clients [--json]`: every client with an identity, what each holds (and where it took it)
//! and where it waits in line, and its waits for a hold of its own task; a client that stopped
//! beating (paused, hung or dead while it holds something) says for how long; apart, the holds
//! and waits of owners whose client records no live identity (Java Redisson clients, clients
//! with identities off, clients gone).

use std::collections::BTreeMap;
use std::fmt::Write;

use ferrisson::inspect::Snapshot;
use ferrisson::{Client, SelfWaitSite};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::commands::print_json;
use crate::fail::{Code, Failure};
use crate::holds::{Hold, Wait, holds, kind, waits};
use crate::text::{clean, print, span};
use crate::who::{Directory, WHY_NONE, identity_json};

/// What one client (`None`: owners of no live client) holds and waits for.
#[derive(Default)]
struct Doings<'a> {
    holds: Vec<(Hold, &'a Snapshot)>,
    waits: Vec<(Wait, &'a Snapshot)>,
}

type ByClient<'a> = BTreeMap<Option<Uuid>, Doings<'a>>;

pub(crate) async fn clients(client: &Client, json: bool) -> Result<Code, Failure> {
    let (mut found, who) =
        futures::try_join!(client.inspect_matching("*"), Directory::all(client))?;
    for snapshot in &mut found {
        who.fill_places(snapshot);
    }
    let mut by_client = ByClient::new();
    let live = |id: Option<Uuid>| id.filter(|id| who.get(*id).is_some());
    for snapshot in &found {
        for hold in holds(snapshot) {
            let doings = by_client.entry(live(hold.client)).or_default();
            doings.holds.push((hold, snapshot));
        }
        for wait in waits(snapshot) {
            let doings = by_client.entry(live(wait.client)).or_default();
            doings.waits.push((wait, snapshot));
        }
    }
    if json {
        print_json(&as_json(&who, &by_client))?;
    } else {
        print(&as_text(&who, &by_client));
    }
    Ok(Code::Done)
}

fn as_text(who: &Directory, by_client: &ByClient<'_>) -> String {
    let header = ["CLIENT", "APP", "HOST", "PID", "VERSION", "UP", "HOLDS"].map(str::to_owned);
    let rows: Vec<[String; 7]> = who
        .list()
        .into_iter()
        .map(|c| {
            let held = by_client.get(&Some(c.id)).map_or(0, |d| d.holds.len());
            let this = if who.is_own(c.id) { " (this)" } else { "" };
            [
                c.id.to_string(),
                format!("{}{this}", c.app),
                c.host.clone(),
                c.pid.to_string(),
                c.version.clone(),
                span(c.age),
                held.to_string(),
            ]
            // What a client records comes from Redis.
            .map(|cell| clean(&cell).into_owned())
        })
        .collect();
    let mut widths = header.clone().map(|h| h.len());
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |row: &[String; 7]| {
        let cells: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        cells.join("  ").trim_end().to_owned()
    };
    let mut out = line(&header) + "\n";
    for (row, identity) in rows.iter().zip(who.list()) {
        let _ = writeln!(out, "{}", line(row));
        if !identity.is_live() {
            let _ = writeln!(
                out,
                "    silent for {}: pid {} on {} stopped beating (paused, hung or dead); \
                 listed while its holds may live",
                span(identity.silent_for),
                identity.pid,
                clean(&identity.host)
            );
        }
        let doings = by_client.get(&Some(identity.id));
        if let Some(doings) = doings {
            for (hold, snapshot) in &doings.holds {
                let _ = writeln!(out, "    holds {}", held(hold, snapshot));
            }
            for (wait, snapshot) in &doings.waits {
                let _ = writeln!(out, "    waits for {}", waited(wait, snapshot));
            }
        }
        for wait in &identity.self_waits {
            let _ = writeln!(out, "    {}", self_wait(wait));
        }
        // What a silent client held at its last beat and holds no more (its lease ran out).
        let holds_now = |site: &ferrisson::HoldSite| {
            doings.is_some_and(|d| {
                d.holds
                    .iter()
                    .any(|(h, _)| h.object == site.lock && h.owner == site.owner)
            })
        };
        if !identity.is_live() {
            for site in identity.hold_sites.iter().filter(|s| !holds_now(s)) {
                let text = format!(
                    "held {} at its last beat, acquired at {}; not held now",
                    site.lock, site.acquired_at
                );
                let _ = writeln!(out, "    {}", clean(&text));
            }
        }
    }
    if let Some(unknown) = by_client.get(&None) {
        let _ = writeln!(out, "\nowners with no live client identity {WHY_NONE}:");
        for (hold, snapshot) in &unknown.holds {
            let _ = writeln!(
                out,
                "    {} holds {}",
                clean(&hold.owner),
                held(hold, snapshot)
            );
        }
        for (wait, snapshot) in &unknown.waits {
            let _ = writeln!(
                out,
                "    {} waits for {}",
                clean(&wait.owner),
                waited(wait, snapshot)
            );
        }
    }
    out
}

/// `orders:42 (lock, 2 holds, lease 27.5s left)`, [`clean`].
fn held(hold: &Hold, snapshot: &Snapshot) -> String {
    let mut parts = vec![kind(snapshot).to_owned()];
    if !hold.side.is_empty() {
        parts.push(hold.side.to_owned());
    }
    if hold.holds > 1 {
        parts.push(format!("{} holds", hold.holds));
    }
    match hold.lease {
        Some(left) => parts.push(format!("lease {} left", span(left))),
        // Redisson's layout keeps a reader in the hash until the next release looks.
        None if hold.side == "read" => parts.push("its own lease ran out".to_owned()),
        None => {}
    }
    let at = crate::show::acquired(&hold.acquired_at);
    format!(
        "{} ({}){}",
        clean(&hold.object),
        parts.join(", "),
        clean(&at)
    )
}

/// `waits for a hold of its own task: orders (held at src/a.rs:3:9, waiting at src/b.rs:8:5,
/// for 12.0s)`, [`clean`].
fn self_wait(wait: &SelfWaitSite) -> String {
    let whose = if wait.thread { "thread" } else { "task" };
    let text = format!(
        "waits for a hold of its own {whose}: {} (held at {}, waiting at {}, for {})",
        wait.lock,
        wait.held_at,
        wait.called_at,
        span(wait.waited)
    );
    clean(&text).into_owned()
}

/// `reports:nightly (fair, in line, 1 of 2)`, [`clean`].
fn waited(wait: &Wait, snapshot: &Snapshot) -> String {
    format!("{} ({}, {})", clean(&wait.object), kind(snapshot), wait.how)
}

fn hold_json(hold: &Hold, snapshot: &Snapshot) -> Value {
    json!({
        "name": hold.object,
        "kind": kind(snapshot),
        "owner": hold.owner,
        "client": hold.client.map(|id| id.to_string()),
        "side": if hold.side.is_empty() { Value::Null } else { hold.side.into() },
        "holds": hold.holds,
        "lease_ms": hold.lease.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        "acquired_at": hold.acquired_at,
    })
}

fn wait_json(wait: &Wait, snapshot: &Snapshot) -> Value {
    json!({
        "name": wait.object,
        "kind": kind(snapshot),
        "owner": wait.owner,
        "client": wait.client.map(|id| id.to_string()),
        "how": wait.how,
    })
}

fn as_json(who: &Directory, by_client: &ByClient<'_>) -> Value {
    let of = |id: Option<Uuid>| -> (Vec<Value>, Vec<Value>) {
        let Some(doings) = by_client.get(&id) else {
            return (Vec::new(), Vec::new());
        };
        (
            doings.holds.iter().map(|(h, s)| hold_json(h, s)).collect(),
            doings.waits.iter().map(|(w, s)| wait_json(w, s)).collect(),
        )
    };
    let clients: Vec<Value> = who
        .list()
        .into_iter()
        .map(|c| {
            let (holds, waits) = of(Some(c.id));
            let mut value = identity_json(c);
            value["this"] = who.is_own(c.id).into();
            value["holds"] = holds.into();
            value["waits"] = waits.into();
            value
        })
        .collect();
    let (unknown_holds, unknown_waits) = of(None);
    json!({
        "clients": clients,
        "unknown_holders": unknown_holds,
        "unknown_waiters": unknown_waits,
    })
}
