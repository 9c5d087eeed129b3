//! The blocking read-write lock.

use super::RLock;
use crate::lock::RwPolicy;

/// Redisson's `RReadWriteLock` for synchronous code: the blocking twin of
/// [`ferrisson::RReadWriteLock`](crate::RReadWriteLock). Its two sides are blocking [`RLock`]s,
/// each acquisition an owner of its own; nested in a hold's scope they are one owner: a read
/// inside a writer's `with_lock` is the writer's own, and a write inside a reader's is refused
/// ([`Error::UpgradeNotSupported`](crate::Error::UpgradeNotSupported) at once, never a wait
/// for itself).
///
/// # Examples
///
/// ```no_run
/// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
/// let doc = client.get_read_write_lock("doc:7");
/// let read = doc.read_lock().lock()?;   // shared with other readers
/// read.unlock()?;
/// let write = doc.write_lock().lock()?; // alone
/// write.unlock()?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RReadWriteLock {
    lock: crate::RReadWriteLock,
    read: RLock,
    write: RLock,
    policy: RwPolicy,
}

impl RReadWriteLock {
    pub(super) fn wrap(lock: crate::RReadWriteLock) -> Self {
        RReadWriteLock {
            read: RLock::wrap(lock.read_lock()),
            write: RLock::wrap(lock.write_lock()),
            policy: lock.policy(),
            lock,
        }
    }

    /// The lock's name.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) {
    /// assert_eq!(client.get_read_write_lock("doc:7").name(), "doc:7");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        self.read.name()
    }

    /// Whether this handle's writers hold new readers back while they wait (see [`RwPolicy`]).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) {
    /// use ferrisson::RwPolicy;
    /// let rw = client.get_read_write_lock_with("doc:7", RwPolicy::PreferWriters);
    /// assert_eq!(rw.policy(), RwPolicy::PreferWriters);
    /// # }
    /// ```
    pub fn policy(&self) -> RwPolicy {
        self.policy
    }

    /// The read side: shared among readers, excluded by a writer (except a read nested in the
    /// writer's scope).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
    /// let guard = client.get_read_write_lock("doc:7").read_lock().lock()?;
    /// guard.unlock()?;
    /// # Ok(()) }
    /// ```
    pub fn read_lock(&self) -> RLock {
        self.read.clone()
    }

    /// The write side: excludes every other reader and writer; nested in a reader's scope it
    /// is refused at once (a reader cannot upgrade).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
    /// let guard = client.get_read_write_lock("doc:7").write_lock().lock()?;
    /// guard.unlock()?;
    /// # Ok(()) }
    /// ```
    pub fn write_lock(&self) -> RLock {
        self.write.clone()
    }

    /// What Redis holds for this read-write lock now, read in one round trip that changes nothing: the
    /// blocking twin of [`RReadWriteLock::snapshot`](crate::RReadWriteLock::snapshot).
    ///
    /// # Errors
    ///
    /// [`Error::InsideRuntime`](crate::Error::InsideRuntime), and as
    /// [`RReadWriteLock::snapshot`](crate::RReadWriteLock::snapshot).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(x: ferrisson::blocking::RReadWriteLock) -> ferrisson::Result<()> {
    /// println!("{:?}", x.snapshot()?);
    /// # Ok(()) }
    /// ```
    pub fn snapshot(&self) -> crate::Result<crate::inspect::RwLockSnapshot> {
        self.read.blocker().call(self.lock.snapshot())
    }
}
