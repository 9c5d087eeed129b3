//! Snapshots of the objects stored as a count: the semaphores and the latch; and of a name with
//! nothing under it.

use super::reply::Items;
use super::{FromNow, Revocation, Snapshot, revocations};
use crate::error::Result;

/// A semaphore as Redis holds it at one moment. Its permits are not owned (see
/// [`RSemaphore`](crate::RSemaphore)), so there are no holders to show.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
/// let api = client.get_semaphore("partner-api").snapshot().await?;
/// println!("{:?} permits free, {} connection(s) waiting", api.available, api.subscribers);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct SemaphoreSnapshot {
    /// The semaphore's name, e.g. `partner-api`.
    pub name: String,
    /// The permits free now, e.g. `Some(3)` (below zero when more were removed than were
    /// free, as Redisson allows); `None` when the permits were never set.
    pub available: Option<i64>,
    /// Connections subscribed to the semaphore's channel (`redisson_sc:{name}`), e.g. `1`: one
    /// per client with waiters, Java clients' included.
    pub subscribers: u64,
}

/// A permit-expirable semaphore as Redis holds it at one moment.
///
/// The layout records each permit's id and expiry only, not who holds it.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
/// let slots = client.get_permit_expirable_semaphore("render-slots").snapshot().await?;
/// for permit in &slots.permits {
///     // e.g. "permit 0f1d... expires in 28.7s"
///     println!("permit {} expires {}", permit.id, permit.expires);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct PermitSemaphoreSnapshot {
    /// The semaphore's name, e.g. `render-slots`.
    pub name: String,
    /// The permits free now (the count key), e.g. `Some(2)`; `None` when never set. Permits
    /// that expired but were not yet given back (the next call of any client gives them back)
    /// are not counted here: they are among [`permits`](Self::permits), with a passed expiry.
    pub available: Option<i64>,
    /// Every permit out, soonest to expire first, e.g. two permits expiring in 28.7 s and 29.9
    /// s.
    pub permits: Vec<Permit>,
    /// Pending revocation requests of permits, by permit id, e.g. one made 0.5 s ago.
    pub revocations: Vec<Revocation>,
    /// Connections subscribed to the semaphore's channel (`redisson_sc:{name}`), e.g. `1`.
    pub subscribers: u64,
}

/// One permit out of a permit-expirable semaphore.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
/// let slots = client.get_permit_expirable_semaphore("render-slots").snapshot().await?;
/// let overdue = slots.permits.iter().filter(|p| p.expires.has_passed()).count();
/// println!("{overdue} permit(s) expired, not yet given back");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Permit {
    /// The permit's id (what [`PermitGuard::ids`](crate::PermitGuard::ids) lists), e.g.
    /// `0f1d2c3b4a5968778695a4b3c2d1e0f1`.
    pub id: String,
    /// When it expires unless renewed (its holder's watchdog renews it), by the server's clock,
    /// e.g. in 28.7 s.
    #[cfg_attr(feature = "serde", serde(rename = "expires_ms"))]
    pub expires: FromNow,
}

/// A count-down latch as Redis holds it at one moment.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
/// let ready = client.get_count_down_latch("workers-ready").snapshot().await?;
/// println!("{} to go, {} connection(s) waiting", ready.count, ready.subscribers);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct LatchSnapshot {
    /// The latch's name, e.g. `workers-ready`.
    pub name: String,
    /// The count left, e.g. `2`; `0` when the latch is open (its key is gone, or was never
    /// set).
    pub count: u64,
    /// Connections subscribed to the latch's channel
    /// (`redisson_countdownlatch__channel__{name}`), e.g. `1`: one per client with waiters.
    pub subscribers: u64,
}

/// A count that a semaphore and a latch store alike, found by
/// [`Client::inspect`](crate::Client::inspect) with nobody (or both kinds) listening to tell
/// which it is.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
/// use ferrisson::inspect::Snapshot;
///
/// if let Snapshot::Count(count) = client.inspect("workers-ready").await? {
///     println!("a semaphore with {0} free permits, or a latch with {0} to go", count.count);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct CountSnapshot {
    /// The name, e.g. `workers-ready`.
    pub name: String,
    /// The count stored, e.g. `3`.
    pub count: i64,
    /// Connections subscribed to the semaphore channel (`redisson_sc:{name}`), e.g. `0`.
    pub semaphore_subscribers: u64,
    /// Connections subscribed to the latch channel, e.g. `0`.
    pub latch_subscribers: u64,
}

/// A name with no key under it: a free lock, an open latch or a semaphore never set look
/// alike. Who listens on each kind's channel tells who waits for something there.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
/// use ferrisson::inspect::Snapshot;
///
/// if let Snapshot::Absent(nothing) = client.inspect("jobs").await? {
///     println!("nothing under {}; {} connection(s) wait for a lock", nothing.name, nothing.lock_subscribers);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct AbsentSnapshot {
    /// The name, e.g. `jobs`.
    pub name: String,
    /// Connections subscribed to the lock channel (`redisson_lock__channel:{name}`), e.g. `0`.
    pub lock_subscribers: u64,
    /// Connections subscribed to the read-write lock channel (`redisson_rwlock:{name}`), e.g.
    /// `0`.
    pub rwlock_subscribers: u64,
    /// Connections subscribed to the semaphore channel (`redisson_sc:{name}`), e.g. `0`.
    pub semaphore_subscribers: u64,
    /// Connections subscribed to the latch channel, e.g. `0`.
    pub latch_subscribers: u64,
}

/// Reads the 'semaphore' section.
pub(super) fn semaphore(name: String, section: &mut Items<'_>) -> Result<SemaphoreSnapshot> {
    Ok(SemaphoreSnapshot {
        name,
        available: section.opt_stored()?,
        subscribers: section.count()?,
    })
}

/// Reads the 'permits' section.
pub(super) fn permits(name: String, section: &mut Items<'_>) -> Result<PermitSemaphoreSnapshot> {
    let available = section.opt_stored()?;
    let mut flat = section.list("permits")?;
    let mut permits = Vec::new();
    while !flat.is_empty() {
        permits.push(Permit {
            id: flat.text()?,
            expires: FromNow::from_millis(flat.int()?),
        });
    }
    Ok(PermitSemaphoreSnapshot {
        name,
        available,
        permits,
        revocations: revocations(section)?,
        subscribers: section.count()?,
    })
}

/// Reads the 'latch' section.
pub(super) fn latch(name: String, section: &mut Items<'_>) -> Result<LatchSnapshot> {
    let count: Option<i64> = section.opt_stored()?;
    Ok(LatchSnapshot {
        name,
        // As `get_count` reads it: a count below zero is an open latch.
        count: count.map_or(0, |n| u64::try_from(n).unwrap_or(0)),
        subscribers: section.count()?,
    })
}

/// Reads the 'count' section: a semaphore or a latch, when only one kind listens.
pub(super) fn count(name: String, section: &mut Items<'_>) -> Result<Snapshot> {
    let count: i64 = section.opt_stored()?.unwrap_or(0);
    let semaphore_subscribers = section.count()?;
    let latch_subscribers = section.count()?;
    Ok(match (semaphore_subscribers, latch_subscribers) {
        (1.., 0) => Snapshot::Semaphore(SemaphoreSnapshot {
            name,
            available: Some(count),
            subscribers: semaphore_subscribers,
        }),
        (0, 1..) => Snapshot::CountDownLatch(LatchSnapshot {
            name,
            count: u64::try_from(count).unwrap_or(0),
            subscribers: latch_subscribers,
        }),
        _ => Snapshot::Count(CountSnapshot {
            name,
            count,
            semaphore_subscribers,
            latch_subscribers,
        }),
    })
}

/// Reads the 'none' section.
pub(super) fn absent(name: String, section: &mut Items<'_>) -> Result<AbsentSnapshot> {
    Ok(AbsentSnapshot {
        name,
        lock_subscribers: section.count()?,
        rwlock_subscribers: section.count()?,
        semaphore_subscribers: section.count()?,
        latch_subscribers: section.count()?,
    })
}
