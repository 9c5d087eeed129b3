//! A read-write lock's snapshot.

use std::time::Duration;

use uuid::Uuid;

use super::reply::{Items, holds, remaining};
use super::{FromNow, Holder, Revocation, client_of, revocations};
use crate::error::{Error, Result};

/// Which side of a read-write lock is held (the hash's `mode` field).
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
/// use ferrisson::inspect::RwMode;
///
/// let rw = client.get_read_write_lock("catalog");
/// let read = rw.read_lock().lock().await?;
/// assert_eq!(rw.snapshot().await?.mode, Some(RwMode::Read));
/// read.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[non_exhaustive]
pub enum RwMode {
    /// Readers hold it (`mode` = `read`).
    Read,
    /// A writer holds it (`mode` = `write`); it may hold read holds too (a read nested in its
    /// scope).
    Write,
}

/// A read-write lock as Redis holds it at one moment (see
/// [`RReadWriteLock`](crate::RReadWriteLock) for the layout).
///
/// Not here, because the layout does not record them: when a hold was granted, and its fencing
/// token.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
/// let rw = client.get_read_write_lock("catalog").snapshot().await?;
/// match &rw.writer {
///     Some(writer) => println!("written by {} ({} holds)", writer.owner, writer.holds),
///     None => println!("{} reader(s)", rw.readers.len()),
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct RwLockSnapshot {
    /// The lock's name, e.g. `catalog`.
    pub name: String,
    /// Which side is held, e.g. `Some(RwMode::Read)`; `None` when the lock is free.
    pub mode: Option<RwMode>,
    /// The writer (the `<owner>:write` field, named here by its owner) and its write holds,
    /// e.g. `1b4e28ba-...:3` with 2 holds; `None` without one.
    pub writer: Option<Holder>,
    /// Every owner with read holds, e.g. two readers of two clients, one hold each. The writer
    /// is among them when it also reads.
    pub readers: Vec<Reader>,
    /// The lease left of the whole lock (the hash's PTTL: the longest hold's), e.g.
    /// `Some(29.1 s)`; `None` when free or without a TTL.
    #[cfg_attr(
        feature = "serde",
        serde(rename = "lease_ms", serialize_with = "super::ser::opt_millis")
    )]
    pub lease: Option<Duration>,
    /// Writers waiting under [`RwPolicy::PreferWriters`](crate::RwPolicy::PreferWriters)
    /// (`{name}:ferrisson_writers`), holding new readers of that policy back, e.g. one mark
    /// that lives 4.8 s more.
    pub waiting_writers: Vec<WriterMark>,
    /// Pending revocation requests, e.g. one for `<owner>:write` (the writer) made 0.3 s ago.
    pub revocations: Vec<Revocation>,
    /// Connections subscribed to the lock's channel (`redisson_rwlock:{name}`), e.g. `2`: one
    /// per client with waiters (readers and writers share it), Java clients' included.
    pub subscribers: u64,
    /// The fencing counter of the name's cluster slot (see
    /// [`LockSnapshot::token_counter`](super::LockSnapshot::token_counter)).
    pub token_counter: Option<u64>,
}

/// One owner's read holds of a read-write lock.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
/// for reader in client.get_read_write_lock("catalog").snapshot().await?.readers {
///     // e.g. "1b4e28ba-...:5: 2 read hold(s), leases [Some(29.9s), Some(12s)]"
///     println!("{}: {} read hold(s), leases {:?}", reader.owner, reader.holds, reader.leases);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Reader {
    /// The owner field, e.g. `1b4e28ba-...:5`.
    pub owner: String,
    /// The client it belongs to (see [`Holder::client`]).
    pub client: Option<Uuid>,
    /// How many read holds it has, e.g. `2`.
    pub holds: u32,
    /// Each read hold's own lease left, first hold first (`{name}:<owner>:rwlock_timeout:<k>`),
    /// e.g. `[Some(29.9 s), Some(12 s)]`; `None` for a hold whose key is gone (its lease ran
    /// out: its holder stopped renewing) or has no TTL. Only the first 10,000 are read.
    #[cfg_attr(
        feature = "serde",
        serde(rename = "leases_ms", serialize_with = "super::ser::each_opt_millis")
    )]
    pub leases: Vec<Option<Duration>>,
    /// Where the reader's hold was taken, `file:line:column`: as
    /// [`Holder::acquired_at`], for this client's own readers only.
    pub acquired_at: Option<String>,
}

/// A writer waiting under [`RwPolicy::PreferWriters`](crate::RwPolicy::PreferWriters).
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
/// for mark in client.get_read_write_lock("index").snapshot().await?.waiting_writers {
///     println!("{} waits to write; its mark lives until {}", mark.owner, mark.expires);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct WriterMark {
    /// The waiting writer's owner name, e.g. `1b4e28ba-...:8`.
    pub owner: String,
    /// The client it belongs to (see [`Holder::client`]).
    pub client: Option<Uuid>,
    /// Until when the mark holds readers back unless its writer calls again, e.g. in 4.8 s.
    #[cfg_attr(feature = "serde", serde(rename = "expires_ms"))]
    pub expires: FromNow,
}

/// Reads the 'rwlock' section of `lua/inspect.lua`'s reply.
pub(super) fn parse(name: String, section: &mut Items<'_>) -> Result<RwLockSnapshot> {
    let lease = remaining(section.int()?);
    let mode = match section.opt_text()?.as_deref() {
        None => None,
        Some("read") => Some(RwMode::Read),
        Some("write") => Some(RwMode::Write),
        Some(other) => {
            return Err(Error::unexpected(format!(
                "read-write lock `{name}` has mode `{other}`"
            )));
        }
    };
    let mut written = section.list("writer")?;
    let writer = if written.is_empty() {
        None
    } else {
        let owner = written.text()?;
        let count = holds(&written.text()?, &owner)?;
        Some(Holder::new(owner, count))
    };
    let mut entries = section.list("readers")?;
    let mut readers = Vec::new();
    while !entries.is_empty() {
        let mut entry = entries.list("reader")?;
        let owner = entry.text()?;
        let count = holds(&entry.text()?, &owner)?;
        let mut pttls = entry.list("read leases")?;
        let mut leases = Vec::new();
        while !pttls.is_empty() {
            leases.push(remaining(pttls.int()?));
        }
        readers.push(Reader {
            client: client_of(&owner),
            owner,
            holds: count,
            leases,
            acquired_at: None,
        });
    }
    let mut marks = section.list("writers' marks")?;
    let mut waiting_writers = Vec::new();
    while !marks.is_empty() {
        let owner = marks.text()?;
        waiting_writers.push(WriterMark {
            client: client_of(&owner),
            owner,
            expires: FromNow::from_millis(marks.int()?),
        });
    }
    let revocations = revocations(section)?;
    let subscribers = section.count()?;
    let token_counter = section.opt_stored()?;
    Ok(RwLockSnapshot {
        name,
        mode,
        writer,
        readers,
        lease,
        waiting_writers,
        revocations,
        subscribers,
        token_counter,
    })
}
