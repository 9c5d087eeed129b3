//! The blocking permit-expirable semaphore and its guard.

use std::time::Duration;

use super::Blocker;
use crate::error::Result;

/// Redisson's `RPermitExpirableSemaphore` for synchronous code: the blocking twin of
/// [`ferrisson::RPermitExpirableSemaphore`](crate::RPermitExpirableSemaphore). Every permit taken
/// has an id and a lease, renewed by the client's watchdog while its [`PermitGuard`] lives
/// (whatever the holding thread does), so the permits of a process that dies come back by
/// themselves.
///
/// # Examples
///
/// ```no_run
/// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
/// let workers = client.get_permit_expirable_semaphore("render-slots");
/// workers.try_set_permits(4)?;
/// let permit = workers.acquire()?; // renewed by the watchdog while it lives
/// let token = permit.fencing_token(); // hand it to the resource with every write
/// # let _ = token;
/// permit.release()?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RPermitExpirableSemaphore {
    pub(super) semaphore: crate::RPermitExpirableSemaphore,
    pub(super) blocker: Blocker,
}

impl RPermitExpirableSemaphore {
    /// The most permits one guard may hold
    /// ([`acquire_many`](Self::acquire_many), [`try_acquire_for`](Self::try_acquire_for)).
    pub const MAX_PERMITS_PER_GUARD: u64 = crate::RPermitExpirableSemaphore::MAX_PERMITS_PER_GUARD;

    pub(super) fn wrap(semaphore: crate::RPermitExpirableSemaphore, blocker: Blocker) -> Self {
        RPermitExpirableSemaphore { semaphore, blocker }
    }

    fn guard(&self, guard: crate::PermitGuard) -> PermitGuard {
        PermitGuard {
            guard,
            blocker: self.blocker.clone(),
        }
    }

    /// The semaphore's name.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson::blocking::Client) {
    /// assert_eq!(client.get_permit_expirable_semaphore("gpu").name(), "gpu");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        self.semaphore.name()
    }

    /// Sets the permits to `permits` when none were ever set; returns whether they were set.
    /// With 0 the semaphore starts closed: acquirers wait until
    /// [`add_permits`](Self::add_permits) opens it.
    ///
    /// # Errors
    ///
    /// [`Error::InsideRuntime`](crate::Error::InsideRuntime); otherwise as
    /// [`ferrisson::RPermitExpirableSemaphore::try_set_permits`](crate::RPermitExpirableSemaphore::try_set_permits).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(semaphore: ferrisson::blocking::RPermitExpirableSemaphore) -> ferrisson::Result<()> {
    /// semaphore.try_set_permits(4)?;
    /// # Ok(()) }
    /// ```
    pub fn try_set_permits(&self, permits: u64) -> Result<bool> {
        self.blocker.call(self.semaphore.try_set_permits(permits))
    }

    /// Adds `delta` permits (negative: removes free ones) and returns the permits free now.
    ///
    /// # Errors
    ///
    /// As [`try_set_permits`](Self::try_set_permits).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(semaphore: ferrisson::blocking::RPermitExpirableSemaphore) -> ferrisson::Result<()> {
    /// semaphore.add_permits(2)?;
    /// # Ok(()) }
    /// ```
    pub fn add_permits(&self, delta: i64) -> Result<i64> {
        self.blocker.call(self.semaphore.add_permits(delta))
    }

    /// The permits free now, expired ones counted as free.
    ///
    /// # Errors
    ///
    /// As [`try_set_permits`](Self::try_set_permits).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(semaphore: ferrisson::blocking::RPermitExpirableSemaphore) -> ferrisson::Result<()> {
    /// println!("{} free", semaphore.available_permits()?);
    /// # Ok(()) }
    /// ```
    pub fn available_permits(&self) -> Result<i64> {
        self.blocker.call(self.semaphore.available_permits())
    }

    /// What Redis holds for this semaphore now, read in one round trip that changes nothing: the
    /// blocking twin of [`RPermitExpirableSemaphore::snapshot`](crate::RPermitExpirableSemaphore::snapshot).
    ///
    /// # Errors
    ///
    /// [`Error::InsideRuntime`](crate::Error::InsideRuntime), and as
    /// [`RPermitExpirableSemaphore::snapshot`](crate::RPermitExpirableSemaphore::snapshot).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(x: ferrisson::blocking::RPermitExpirableSemaphore) -> ferrisson::Result<()> {
    /// println!("{:?}", x.snapshot()?);
    /// # Ok(()) }
    /// ```
    pub fn snapshot(&self) -> Result<crate::inspect::PermitSemaphoreSnapshot> {
        self.blocker.call(self.semaphore.snapshot())
    }

    /// Blocks until a permit is free and takes it; the watchdog renews its lease while the
    /// guard lives.
    ///
    /// # Errors
    ///
    /// As [`ferrisson::RPermitExpirableSemaphore::acquire`](crate::RPermitExpirableSemaphore::acquire),
    /// and [`Error::InsideRuntime`](crate::Error::InsideRuntime).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(semaphore: ferrisson::blocking::RPermitExpirableSemaphore) -> ferrisson::Result<()> {
    /// let permit = semaphore.acquire()?;
    /// permit.release()?;
    /// # Ok(()) }
    /// ```
    pub fn acquire(&self) -> Result<PermitGuard> {
        let guard = self.blocker.call(self.semaphore.acquire())?;
        Ok(self.guard(guard))
    }

    /// Blocks until a permit is free and takes it with a fixed `lease`, never renewed.
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire); [`Error::InvalidArgument`](crate::Error::InvalidArgument)
    /// for a lease under 1 ms.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(semaphore: ferrisson::blocking::RPermitExpirableSemaphore) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// let permit = semaphore.acquire_with_lease(Duration::from_secs(30))?;
    /// permit.release()?;
    /// # Ok(()) }
    /// ```
    pub fn acquire_with_lease(&self, lease: Duration) -> Result<PermitGuard> {
        let guard = self
            .blocker
            .call(self.semaphore.acquire_with_lease(lease))?;
        Ok(self.guard(guard))
    }

    /// Blocks until `n` permits are free and takes them in one atomic step, under one guard.
    ///
    /// # Errors
    ///
    /// As [`ferrisson::RPermitExpirableSemaphore::acquire_many`](crate::RPermitExpirableSemaphore::acquire_many),
    /// and [`Error::InsideRuntime`](crate::Error::InsideRuntime).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(semaphore: ferrisson::blocking::RPermitExpirableSemaphore) -> ferrisson::Result<()> {
    /// let three = semaphore.acquire_many(3)?;
    /// assert_eq!(three.ids().len(), 3);
    /// three.release()?;
    /// # Ok(()) }
    /// ```
    pub fn acquire_many(&self, n: u64) -> Result<PermitGuard> {
        let guard = self.blocker.call(self.semaphore.acquire_many(n))?;
        Ok(self.guard(guard))
    }

    /// Takes a permit if one is free now (watchdog lease).
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(semaphore: ferrisson::blocking::RPermitExpirableSemaphore) -> ferrisson::Result<()> {
    /// if let Some(permit) = semaphore.try_acquire()? {
    ///     permit.release()?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn try_acquire(&self) -> Result<Option<PermitGuard>> {
        let guard = self.blocker.call(self.semaphore.try_acquire())?;
        Ok(guard.map(|g| self.guard(g)))
    }

    /// Blocks at most `wait` for `n` permits and takes them in one atomic step; `lease` fixes
    /// their lease (else the watchdog renews it). `None` when they did not become free in time.
    ///
    /// # Errors
    ///
    /// As [`acquire_many`](Self::acquire_many) and [`acquire_with_lease`](Self::acquire_with_lease).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(semaphore: ferrisson::blocking::RPermitExpirableSemaphore) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// if let Some(two) = semaphore.try_acquire_for(2, Duration::from_secs(1), None)? {
    ///     two.release()?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn try_acquire_for(
        &self,
        n: u64,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Option<PermitGuard>> {
        let guard = self
            .blocker
            .call(self.semaphore.try_acquire_for(n, wait, lease))?;
        Ok(guard.map(|g| self.guard(g)))
    }

    /// Gives back the permit `id`, taken by any client.
    ///
    /// # Errors
    ///
    /// As [`ferrisson::RPermitExpirableSemaphore::release_by_id`](crate::RPermitExpirableSemaphore::release_by_id),
    /// and [`Error::InsideRuntime`](crate::Error::InsideRuntime).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(semaphore: ferrisson::blocking::RPermitExpirableSemaphore) -> ferrisson::Result<()> {
    /// semaphore.release_by_id("8c7e0c5e4e4d4c2a9f3e1b2a3c4d5e6f")?;
    /// # Ok(()) }
    /// ```
    pub fn release_by_id(&self, id: &str) -> Result<()> {
        self.blocker.call(self.semaphore.release_by_id(id))
    }

    /// Asks the holders of every permit out to let go; returns how many permits were asked.
    ///
    /// # Errors
    ///
    /// As [`try_set_permits`](Self::try_set_permits).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(semaphore: ferrisson::blocking::RPermitExpirableSemaphore) -> ferrisson::Result<()> {
    /// let asked = semaphore.request_revocation()?;
    /// println!("asked {asked} permits back");
    /// # Ok(()) }
    /// ```
    pub fn request_revocation(&self) -> Result<usize> {
        self.blocker.call(self.semaphore.request_revocation())
    }
}

/// Permits of an [`RPermitExpirableSemaphore`], held: the blocking twin of
/// [`ferrisson::PermitGuard`](crate::PermitGuard). `Send` and `'static`.
///
/// Give the permits back with [`release`](Self::release), which reports errors. Dropping the
/// guard instead stops the renewal at once and sends the release from the client's thread
/// without blocking (failures are logged; the lease gives the permits back otherwise).
///
/// # Examples
///
/// ```no_run
/// # fn demo(client: ferrisson::blocking::Client) -> ferrisson::Result<()> {
/// let permit = client.get_permit_expirable_semaphore("gpu").acquire()?;
/// if !permit.is_lost() {
///     // ... use the GPU slot ...
/// }
/// permit.release()?;
/// # Ok(()) }
/// ```
#[must_use = "if unused the permits are released immediately"]
#[clippy::has_significant_drop]
#[derive(Debug)]
pub struct PermitGuard {
    guard: crate::PermitGuard,
    blocker: Blocker,
}

impl PermitGuard {
    /// The semaphore's name.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(permit: ferrisson::blocking::PermitGuard) {
    /// println!("a permit of {}", permit.name());
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        self.guard.name()
    }

    /// The ids of the permits held.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(permit: ferrisson::blocking::PermitGuard) {
    /// println!("permit ids: {:?}", permit.ids());
    /// # }
    /// ```
    pub fn ids(&self) -> &[String] {
        self.guard.ids()
    }

    /// The fencing token of this grant.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(permit: ferrisson::blocking::PermitGuard) {
    /// println!("token {}", permit.fencing_token());
    /// # }
    /// ```
    pub fn fencing_token(&self) -> u64 {
        self.guard.fencing_token()
    }

    /// True once the permits are known lost. Once true, it stays true. Never blocks.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(permit: ferrisson::blocking::PermitGuard) {
    /// if permit.is_lost() {
    ///     eprintln!("stop using the slot");
    /// }
    /// # }
    /// ```
    pub fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    /// Blocks until the permits are lost or `timeout` has passed; whether they were lost.
    ///
    /// # Errors
    ///
    /// [`Error::InsideRuntime`](crate::Error::InsideRuntime) in async code.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(permit: ferrisson::blocking::PermitGuard) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// assert!(!permit.wait_lost(Duration::from_millis(100))?);
    /// # Ok(()) }
    /// ```
    pub fn wait_lost(&self, timeout: Duration) -> Result<bool> {
        self.blocker.wait_for(timeout, self.guard.lost())
    }

    /// True once these permits are known to be asked back (a revocation request). Never
    /// blocks.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(permit: ferrisson::blocking::PermitGuard) {
    /// if permit.is_revocation_requested() {
    ///     eprintln!("asked to give the slot back");
    /// }
    /// # }
    /// ```
    pub fn is_revocation_requested(&self) -> bool {
        self.guard.is_revocation_requested()
    }

    /// Blocks until somebody asks these permits back, or `timeout` has passed; whether a
    /// request came.
    ///
    /// # Errors
    ///
    /// [`Error::InsideRuntime`](crate::Error::InsideRuntime) in async code.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(permit: ferrisson::blocking::PermitGuard) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// if permit.wait_revocation_requested(Duration::from_secs(5))? {
    ///     permit.release()?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn wait_revocation_requested(&self, timeout: Duration) -> Result<bool> {
        self.blocker
            .wait_for(timeout, self.guard.revocation_requested())
    }

    /// Sets the permits' lease to `lease` from now, fixed from then on (no more watchdog
    /// renewal). As [`ferrisson::PermitGuard::update_lease`](crate::PermitGuard::update_lease).
    ///
    /// # Errors
    ///
    /// [`Error::InsideRuntime`](crate::Error::InsideRuntime); [`Error::PermitLost`](crate::Error::PermitLost)
    /// when a permit was gone already; [`Error::InvalidArgument`](crate::Error::InvalidArgument)
    /// for a lease under 1 ms; [`Error::Redis`](crate::Error::Redis).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(permit: ferrisson::blocking::PermitGuard) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// permit.update_lease(Duration::from_secs(120))?; // a long step ahead
    /// # Ok(()) }
    /// ```
    pub fn update_lease(&self, lease: Duration) -> Result<()> {
        self.blocker.call(self.guard.update_lease(lease))
    }

    /// Gives the permits back and wakes waiters.
    ///
    /// # Errors
    ///
    /// [`Error::InsideRuntime`](crate::Error::InsideRuntime) (the guard is dropped then, which
    /// releases in the background); otherwise as
    /// [`ferrisson::PermitGuard::release`](crate::PermitGuard::release).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(permit: ferrisson::blocking::PermitGuard) -> ferrisson::Result<()> {
    /// permit.release()?;
    /// # Ok(()) }
    /// ```
    pub fn release(self) -> Result<()> {
        let PermitGuard { guard, blocker } = self;
        blocker.call(guard.release())
    }
}
