//! `inspect` and `list`: read, print, and say by the exit code what was found.

use ferrisson::Client;
use ferrisson::inspect::Snapshot;
use serde_json::Value;

use crate::args::Kind;
use crate::fail::{Code, Failure};
use crate::holds::{is_held, parties};
use crate::table::{render, row};
use crate::text::{clean, print};
use crate::who::{Directory, enrich};

/// `inspect NAME [--kind K] [--json]`: exit 1 when held, 0 when free or absent.
pub(crate) async fn inspect(
    client: &Client,
    name: &str,
    as_kind: Option<Kind>,
    json: bool,
) -> Result<Code, Failure> {
    let mut snapshot = read(client, name, as_kind).await?;
    let who = Directory::of(client, &parties(&snapshot)).await?;
    who.fill_places(&mut snapshot);
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
    let (mut found, who) =
        futures::try_join!(client.inspect_matching(pattern), Directory::all(client))?;
    for snapshot in &mut found {
        who.fill_places(snapshot);
    }
    if json {
        let mut value = Value::Array(found.iter().map(to_json).collect::<Result<_, _>>()?);
        enrich(&mut value, &who);
        print_json(&value)?;
    } else if found.is_empty() {
        print(&format!("no object matches `{}`\n", clean(pattern)));
    } else {
        let rows: Vec<_> = found.iter().map(|s| row(s, &who)).collect();
        print(&(render(&rows, None).join("\n") + "\n"));
    }
    Ok(Code::Done)
}

pub(crate) fn to_json(snapshot: &Snapshot) -> Result<Value, Failure> {
    serde_json::to_value(snapshot).map_err(|e| {
        Failure::new(
            Code::Redis,
            format!("cannot write the snapshot as JSON: {e}"),
        )
    })
}

pub(crate) fn print_json(value: &Value) -> Result<(), Failure> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| Failure::new(Code::Redis, format!("cannot write JSON: {e}")))?;
    print(&(text + "\n"));
    Ok(())
}
