//! `RReadWriteLock`: Redisson's read-write lock, a read side and a write side on one hash.

use std::sync::Arc;

use crate::client::Client;
use crate::lock::holder::{Holder, LockOps, ReleaseRequest, flag};
use crate::lock::rlock::RLock;
use crate::script::{
    LOCK_FORCE_UNLOCK, RWLOCK_READ_ACQUIRE, RWLOCK_READ_RELEASE, RWLOCK_REPAIR,
    RWLOCK_WRITE_ACQUIRE, RWLOCK_WRITE_RELEASE, ScriptCall,
};
use crate::watchdog::RenewTarget;
use crate::{names, slots};

/// The message that wakes every waiter: a write hold ended (readers may all enter).
const WAKE_ALL: &str = "1";

/// A read-write lock, Redisson's `RReadWriteLock`: many readers or one writer.
///
/// [`read_lock`](Self::read_lock) and [`write_lock`](Self::write_lock) are [`RLock`]s of one
/// owner: the write holder may also take read holds (write→read reentry), and releasing the
/// write hold while still reading downgrades the lock to a read lock. A reader asking for the
/// write side gets [`Error::UpgradeNotSupported`](crate::Error::UpgradeNotSupported) at once instead of waiting for itself.
///
/// In Redis it is a hash named like the lock with `mode` = `read`|`write`, `<owner>` → read
/// holds and `<owner>:write` → write holds; each read hold has its own key
/// `{name}:<owner>:rwlock_timeout:<k>` with its own lease, and the hash lives as long as the
/// longest hold. The watchdog renews only this client's own read holds, so a crashed reader's
/// holds expire even while other readers go on. Releases publish on `redisson_rwlock:{name}`:
/// `1` (wake everybody) when a write hold ends, `0` when the last reader leaves.
///
/// Readers are not fair to writers: a steady stream of overlapping readers keeps a writer
/// waiting (as in Redisson).
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
/// let doc = client.get_read_write_lock("doc:7");
/// let read = doc.read_lock().lock().await?;   // shared with other readers
/// read.unlock().await?;
/// let write = doc.write_lock().lock().await?; // alone
/// write.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RReadWriteLock {
    read: RLock,
    write: RLock,
}

impl RReadWriteLock {
    pub(crate) fn new(client: Client, name: &str) -> Self {
        let owner = client.inner.owners.next_owner();
        let sides = RwNames::new(name, &owner);
        let read = Holder::with_owner(
            client.clone(),
            Box::new(ReadOps(sides.clone())),
            owner.clone(),
        );
        let write = Holder::with_owner(client, Box::new(WriteOps(sides)), owner);
        RReadWriteLock {
            read: RLock::from_holder(read, name),
            write: RLock::from_holder(write, name),
        }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.read.name()
    }

    /// The read side: shared among readers, excluded by a writer (except the writer itself).
    /// Every call returns the same owner.
    pub fn read_lock(&self) -> RLock {
        self.read.clone()
    }

    /// The write side: excludes every other reader and writer. Every call returns the same
    /// owner, which is also the read side's.
    pub fn write_lock(&self) -> RLock {
        self.write.clone()
    }
}

/// The names one owner of a read-write lock uses.
#[derive(Debug, Clone)]
struct RwNames {
    name: Arc<str>,
    channel: String,
    /// The fencing counter of the lock's cluster slot.
    counter: String,
    /// `{name}`: what every owner's read-hold timeout keys start with.
    base: String,
    /// This owner's read-hold timeout prefix.
    timeouts: Arc<str>,
    owner: Arc<str>,
    write_field: Arc<str>,
}

impl RwNames {
    fn new(name: &str, owner: &Arc<str>) -> Self {
        RwNames {
            name: Arc::from(name),
            channel: names::rwlock_channel(name),
            counter: slots::token_counter(name),
            base: names::suffix_base(name),
            timeouts: names::read_timeouts(name, owner).into(),
            owner: owner.clone(),
            write_field: format!("{owner}:write").into(),
        }
    }

    fn repair(&self, field: &str, holds: u32, side: &str, lease_ms: u64) -> ScriptCall {
        ScriptCall::new(&RWLOCK_REPAIR)
            .key(&*self.name)
            .key(&self.channel)
            .key(&*self.timeouts)
            .arg(field)
            .arg(holds)
            .arg(side)
            .arg(lease_ms)
    }

    fn force_unlock(&self) -> ScriptCall {
        ScriptCall::new(&LOCK_FORCE_UNLOCK)
            .key(&*self.name)
            .key(&self.channel)
            .arg(WAKE_ALL)
    }
}

#[derive(Debug)]
struct ReadOps(RwNames);

impl LockOps for ReadOps {
    fn kind(&self) -> &'static str {
        "read"
    }

    fn name(&self) -> &Arc<str> {
        &self.0.name
    }

    fn channel(&self, _owner: &str) -> String {
        self.0.channel.clone()
    }

    fn renewal(&self, owner: &Arc<str>) -> RenewTarget {
        RenewTarget::ReadHolds {
            key: self.0.name.clone(),
            owner: owner.clone(),
            timeouts: self.0.timeouts.clone(),
        }
    }

    fn acquire(&self, owner: &str, lease_ms: u64, _waiting: bool, stale: bool) -> ScriptCall {
        let n = &self.0;
        ScriptCall::new(&RWLOCK_READ_ACQUIRE)
            .key(&*n.name)
            .key(&*n.timeouts)
            .key(&n.counter)
            .arg(owner)
            .arg(&*n.write_field)
            .arg(lease_ms)
            .arg(flag(stale))
    }

    fn release(&self, owner: &str, _lease_ms: u64, request: ReleaseRequest<'_>) -> ScriptCall {
        let n = &self.0;
        ScriptCall::new(&RWLOCK_READ_RELEASE)
            .key(&*n.name)
            .key(&n.channel)
            .key(&*n.timeouts)
            .key(names::unlock_latch_key(&n.name, request.id))
            .arg(owner)
            .arg(request.latch_ttl_ms)
            .arg(&n.base)
            .arg(request.resend_flag())
    }

    fn repair(&self, owner: &str, holds: u32, lease_ms: u64) -> ScriptCall {
        self.0.repair(owner, holds, "read", lease_ms)
    }

    fn force_unlock(&self) -> ScriptCall {
        self.0.force_unlock()
    }
}

#[derive(Debug)]
struct WriteOps(RwNames);

impl LockOps for WriteOps {
    fn kind(&self) -> &'static str {
        "write"
    }

    fn name(&self) -> &Arc<str> {
        &self.0.name
    }

    fn channel(&self, _owner: &str) -> String {
        self.0.channel.clone()
    }

    fn renewal(&self, _owner: &Arc<str>) -> RenewTarget {
        RenewTarget::HashField {
            key: self.0.name.clone(),
            field: self.0.write_field.clone(),
        }
    }

    /// Replies `{3, 0}` when the owner holds read holds but no write hold: an upgrade, which
    /// would wait for itself, is refused.
    fn acquire(&self, _owner: &str, lease_ms: u64, _waiting: bool, stale: bool) -> ScriptCall {
        let n = &self.0;
        ScriptCall::new(&RWLOCK_WRITE_ACQUIRE)
            .key(&*n.name)
            .key(&n.counter)
            .arg(&*n.write_field)
            .arg(lease_ms)
            .arg(&*n.owner)
            .arg(&n.base)
            .arg(flag(stale))
    }

    fn release(&self, _owner: &str, lease_ms: u64, request: ReleaseRequest<'_>) -> ScriptCall {
        let n = &self.0;
        ScriptCall::new(&RWLOCK_WRITE_RELEASE)
            .key(&*n.name)
            .key(&n.channel)
            .key(&*n.timeouts)
            .key(names::unlock_latch_key(&n.name, request.id))
            .arg(&*n.write_field)
            .arg(lease_ms)
            .arg(request.latch_ttl_ms)
            .arg(&*n.owner)
            .arg(request.resend_flag())
    }

    fn repair(&self, _owner: &str, holds: u32, lease_ms: u64) -> ScriptCall {
        self.0.repair(&self.0.write_field, holds, "write", lease_ms)
    }

    fn field<'a>(&'a self, _owner: &'a str) -> &'a str {
        &self.0.write_field
    }

    fn force_unlock(&self) -> ScriptCall {
        self.0.force_unlock()
    }
}
