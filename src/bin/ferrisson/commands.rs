//! `inspect`, `list` and `clients`: read, print, and say by the exit code what was found.

use std::collections::BTreeMap;
use std::fmt::Write;

use ferrisson::Client;
use ferrisson::inspect::Snapshot;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::args::Kind;
use crate::fail::{Code, Failure};
use crate::holds::{Hold, holds, is_held, kind, lease, parties};
use crate::table::{render, row};
use crate::text::{print, span};
use crate::who::{Directory, enrich, identity_json};

/// `inspect NAME [--kind K] [--json]`: exit 1 when held, 0 when free or absent.
pub(crate) async fn inspect(
    client: &Client,
    name: &str,
    as_kind: Option<Kind>,
    json: bool,
) -> Result<Code, Failure> {
    let snapshot = read(client, name, as_kind).await?;
    let who = Directory::of(client, &parties(&snapshot)).await?;
    if json {
        let mut value = to_json(&snapshot)?;
        enrich(&mut value, &who);
        print_json(&value)?;
    } else {
        print(&crate::show::snapshot(&snapshot, &who));
    }
    Ok(if is_held(&snapshot) {
        Code::Held
    } else {
        Code::Done
    })
}

/// `name`'s snapshot, read as `as_kind`, or of whatever kind its keys say.
async fn read(client: &Client, name: &str, as_kind: Option<Kind>) -> ferrisson::Result<Snapshot> {
    Ok(match as_kind {
        None => client.inspect(name).await?,
        Some(Kind::Lock) => Snapshot::Lock(client.get_lock(name).snapshot().await?),
        Some(Kind::Fair) => Snapshot::Lock(client.get_fair_lock(name).snapshot().await?),
        Some(Kind::Fenced) => Snapshot::Lock(client.get_fenced_lock(name).snapshot().await?),
        Some(Kind::Rwlock) => {
            Snapshot::ReadWriteLock(client.get_read_write_lock(name).snapshot().await?)
        }
        Some(Kind::Semaphore) => Snapshot::Semaphore(client.get_semaphore(name).snapshot().await?),
        Some(Kind::Permits) => Snapshot::PermitExpirableSemaphore(
            client
                .get_permit_expirable_semaphore(name)
                .snapshot()
                .await?,
        ),
        Some(Kind::Latch) => {
            Snapshot::CountDownLatch(client.get_count_down_latch(name).snapshot().await?)
        }
    })
}

/// `list [PATTERN] [--json]`.
pub(crate) async fn list(client: &Client, pattern: &str, json: bool) -> Result<Code, Failure> {
    let (found, who) =
        futures::try_join!(client.inspect_matching(pattern), Directory::all(client))?;
    if json {
        let mut value = Value::Array(found.iter().map(to_json).collect::<Result<_, _>>()?);
        enrich(&mut value, &who);
        print_json(&value)?;
    } else if found.is_empty() {
        print(&format!("no object matches `{pattern}`\n"));
    } else {
        let rows: Vec<_> = found.iter().map(|s| row(s, &who)).collect();
        print(&(render(&rows, None).join("\n") + "\n"));
    }
    Ok(Code::Done)
}

/// `clients [--json]`: every live client, what each holds, and the holds of clients that
/// have no live identity (dead ones, Java ones) apart.
pub(crate) async fn clients(client: &Client, json: bool) -> Result<Code, Failure> {
    let (found, who) = futures::try_join!(client.inspect_matching("*"), Directory::all(client))?;
    let mut by_client: BTreeMap<Option<Uuid>, Vec<(Hold, &Snapshot)>> = BTreeMap::new();
    for snapshot in &found {
        for hold in holds(snapshot) {
            let key = hold.client.filter(|id| who.get(*id).is_some());
            by_client.entry(key).or_default().push((hold, snapshot));
        }
    }
    if json {
        print_json(&clients_json(&who, &by_client))?;
    } else {
        print(&clients_text(&who, &by_client));
    }
    Ok(Code::Done)
}

type ByClient<'a> = BTreeMap<Option<Uuid>, Vec<(Hold, &'a Snapshot)>>;

fn clients_text(who: &Directory, by_client: &ByClient<'_>) -> String {
    let mut out = String::new();
    let rows: Vec<[String; 7]> = who
        .list()
        .into_iter()
        .map(|c| {
            let held = by_client.get(&Some(c.id)).map_or(0, Vec::len);
            let app = if who.is_own(c.id) {
                format!("{} (this)", c.app)
            } else {
                c.app.clone()
            };
            [
                c.id.to_string(),
                app,
                c.host.clone(),
                c.pid.to_string(),
                c.version.clone(),
                span(c.age),
                held.to_string(),
            ]
        })
        .collect();
    let header = ["CLIENT", "APP", "HOST", "PID", "VERSION", "UP", "HOLDS"].map(str::to_owned);
    let mut widths = header.clone().map(|h| h.len());
    for r in &rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    for (i, r) in std::iter::once(&header).chain(&rows).enumerate() {
        let cells: Vec<String> = r
            .iter()
            .zip(widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        let _ = writeln!(out, "{}", cells.join("  ").trim_end());
        if i > 0 {
            let id = rows[i - 1][0].parse().ok();
            for (hold, snapshot) in by_client.get(&id).into_iter().flatten() {
                let _ = writeln!(out, "    holds {}", described(hold, snapshot));
            }
        }
    }
    if let Some(orphans) = by_client.get(&None) {
        let _ = writeln!(
            out,
            "\nheld by clients with no live identity (gone for more than 5 s, Java Redisson \
             clients, or identities off):"
        );
        for (hold, snapshot) in orphans {
            let _ = writeln!(
                out,
                "    {} holds {}",
                hold.owner,
                described(hold, snapshot)
            );
        }
    }
    out
}

/// `orders:42 (lock, 2 holds, lease 27.5s left)`.
fn described(hold: &Hold, snapshot: &Snapshot) -> String {
    let mut parts = vec![kind(snapshot).to_owned()];
    if !hold.side.is_empty() {
        parts.push(hold.side.to_owned());
    }
    if hold.holds > 1 {
        parts.push(format!("{} holds", hold.holds));
    }
    if let Some(left) = lease(snapshot) {
        parts.push(format!("lease {} left", span(left)));
    }
    format!("{} ({})", hold.object, parts.join(", "))
}

fn hold_json(hold: &Hold, snapshot: &Snapshot) -> Value {
    json!({
        "name": hold.object,
        "kind": kind(snapshot),
        "owner": hold.owner,
        "side": if hold.side.is_empty() { Value::Null } else { hold.side.into() },
        "holds": hold.holds,
        "lease_ms": lease(snapshot).map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
    })
}

fn clients_json(who: &Directory, by_client: &ByClient<'_>) -> Value {
    let holds_of = |id: Option<Uuid>| -> Vec<Value> {
        by_client
            .get(&id)
            .into_iter()
            .flatten()
            .map(|(hold, snapshot)| hold_json(hold, snapshot))
            .collect()
    };
    let clients: Vec<Value> = who
        .list()
        .into_iter()
        .map(|c| {
            let mut value = identity_json(c);
            value["this"] = who.is_own(c.id).into();
            value["holds"] = holds_of(Some(c.id)).into();
            value
        })
        .collect();
    let orphans: Vec<Value> = by_client
        .get(&None)
        .into_iter()
        .flatten()
        .map(|(hold, snapshot)| {
            let mut value = hold_json(hold, snapshot);
            value["client"] = hold.client.map(|id| id.to_string()).into();
            value
        })
        .collect();
    json!({ "clients": clients, "unknown_holders": orphans })
}

fn to_json(snapshot: &Snapshot) -> Result<Value, Failure> {
    serde_json::to_value(snapshot).map_err(|e| {
        Failure::new(
            Code::Redis,
            format!("cannot write the snapshot as JSON: {e}"),
        )
    })
}

fn print_json(value: &Value) -> Result<(), Failure> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| Failure::new(Code::Redis, format!("cannot write JSON: {e}")))?;
    print(&(text + "\n"));
    Ok(())
}
