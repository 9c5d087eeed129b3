//! The holder: one owner's holds on one lock, worked through one handle's kind (the engine
//! under every lock handle, in the walk `lock()` → [acquisition](crate::lock::acquire) →
//! script → hub → watchdog → guard).
//!
//! The holder keeps the hold count its owner has on the server, and serializes its round trips
//! through an async mutex so that count and server always move together. It registers a
//! grant's lease with the watchdog while guards live, and sets the server's count for its
//! owner when an outcome was unknown (see [`in_flight`](crate::lock::in_flight) and
//! [`leftover`](crate::lock::leftover)).

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::core::Core;
use crate::error::Result;
use crate::lease::{Guards, Lease};
use crate::live::{GiveBack, GivingBack, Hold};
use crate::lock::handle::Handle;
use crate::lock::handover::LocalWaiters;
use crate::lock::holds::Holds;
use crate::lock::ops::LockOps;
use crate::lock::owner::Owner;
use crate::observe::Labels;
use crate::watchdog::{Renewal, Watch};

/// How a grant's lease is kept.
#[derive(Debug, Clone, Copy)]
pub(crate) enum LeaseMode {
    /// The client's watchdog timeout, renewed while a guard lives.
    Watchdog,
    /// A fixed lease in ms, never renewed.
    Fixed(u64),
}

/// One owner's holds on one lock, worked through one handle's kind: made for each acquire
/// and kept by its guard, so the release, renewal and repairs of a hold act for the owner that
/// took it, in whatever task they run. Cheap to clone: two pointers.
#[derive(Clone)]
pub(crate) struct Holder {
    pub(crate) handle: Arc<Handle>,
    pub(crate) owner: Arc<Owner>,
}

impl fmt::Debug for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Holder")
            .field("name", self.ops().name())
            .field("owner", self.owner.id())
            .finish_non_exhaustive()
    }
}

impl Holder {
    pub(crate) fn ops(&self) -> &dyn LockOps {
        &*self.handle.ops
    }

    /// The owner's hold count on this side of the lock.
    pub(super) fn holds(&self) -> &Arc<Mutex<Holds>> {
        self.owner.holds(self.ops().side())
    }

    /// The channel this holder's waits listen on.
    pub(super) fn channel(&self) -> Arc<str> {
        self.ops().channel(&self.owner)
    }

    pub(crate) fn inner(&self) -> &Core {
        &self.handle.core
    }

    pub(super) fn local_waiters(&self) -> &Arc<LocalWaiters> {
        &self.handle.locks.local_waiters
    }

    pub(crate) fn name(&self) -> &str {
        self.ops().name()
    }

    /// The error of a hold found gone.
    pub(crate) fn lost(&self) -> crate::error::Error {
        self.handle.lost()
    }

    /// Sets `owner`'s hold count on the server to `holds` (see [`LockOps::repair`]).
    pub(super) async fn repair_to(&self, owner: &Owner, holds: u32, lease_ms: u64) -> Result<()> {
        let call = self.ops().repair(owner, holds, lease_ms);
        let changed: i64 = self.inner().executor.run(&call, self.name()).await?;
        if changed == 1 {
            tracing::debug!(lock = %self.name(), holds, "hold count repaired");
        }
        Ok(())
    }

    pub(super) fn lease_ms(&self, mode: LeaseMode) -> u64 {
        match mode {
            LeaseMode::Watchdog => self.inner().watchdog.lease().as_millis() as u64,
            LeaseMode::Fixed(ms) => ms,
        }
    }

    /// The labels of this lock's metrics.
    pub(crate) fn labels(&self) -> Labels {
        self.inner().observe.labels(self.ops().label(), self.name())
    }

    /// Keeps `lease`'s watchdog registration in line with its guards: renewed while a guard
    /// wants it renewed, else looked at by the heartbeat while any guard lives (a fixed lease),
    /// else none.
    pub(super) fn keep_watch(&self, lease: &Arc<Lease>, guards: &mut Guards, labels: Labels) {
        self.keep_listed(lease, guards);
        let wanted = if guards.renewed > 0 {
            Some(Watch::Renew)
        } else if guards.live > 0 {
            Some(Watch::Check)
        } else {
            None
        };
        if guards.watch.map(|(_, how)| how) == wanted {
            return;
        }
        let watchdog = &self.inner().watchdog;
        if let Some((id, _)) = guards.watch.take() {
            watchdog.deregister(id);
        }
        if let Some(how) = wanted {
            let renewal = Renewal {
                target: self.ops().renewal(&self.owner),
                site: Some(self.owner.site()),
                labels,
                lease: lease.clone(),
            };
            guards.watch = Some((watchdog.watch(renewal, how), how));
        }
    }

    /// Keeps `lease` on the client's list of live holds while a guard of it lives, for a
    /// signal's shutdown to give back (see [`live`](crate::live)).
    fn keep_listed(&self, lease: &Arc<Lease>, guards: &mut Guards) {
        match (guards.live > 0, guards.listed) {
            (true, None) => {
                let handle: Arc<dyn GiveBack> = self.handle.clone();
                let owner: Arc<dyn Any + Send + Sync> = self.owner.clone();
                let hold = Hold {
                    by: Arc::downgrade(&handle),
                    whose: Some(Arc::downgrade(&owner)),
                    lease: Arc::downgrade(lease),
                };
                guards.listed = Some(self.inner().list_hold(hold));
            }
            (false, Some(id)) => {
                guards.listed = None;
                self.inner().unlist_hold(id);
            }
            _ => {}
        }
    }

    /// A guard of `lease` is gone (unlocked or dropped). The last watchdog-held one stops the
    /// renewal, before its release is sent: holds with a fixed lease are never renewed.
    pub(crate) fn guard_gone(&self, lease: &Arc<Lease>, renewed: bool) {
        let labels = self.labels();
        let mut guards = lease.guards();
        guards.live = guards.live.saturating_sub(1);
        crate::observe::lock_hold_ended(&labels, guards.live, lease.granted_at());
        if renewed {
            guards.renewed = guards.renewed.saturating_sub(1);
        }
        self.keep_watch(lease, &mut guards, labels);
    }

    /// Turns a watchdog-renewed guard's hold into one with a fixed lease of `lease_ms` from now
    /// (unless other guards of the same hold still want it renewed: then it is only checked),
    /// and checks on the server that the owner still holds it. `Ok(false)`, with the lease
    /// marked lost, when it does not.
    pub(crate) async fn fix_lease(&self, lease: &Arc<Lease>, lease_ms: u64) -> Result<bool> {
        // Renewals go over the client thread's own connection: one still on its way when the
        // fixed lease is set would set the watchdog's lease over it. So the renewal is
        // stopped, and any on its way awaited, before the fixed lease goes out.
        let (still_renewed, renewing) = {
            let mut guards = lease.guards();
            guards.renewed = guards.renewed.saturating_sub(1);
            let renewing = match guards.watch {
                Some((id, Watch::Renew)) if guards.renewed == 0 => {
                    guards.watch = None;
                    Some(id)
                }
                _ => None,
            };
            (guards.renewed > 0, renewing)
        };
        if let Some(id) = renewing {
            self.inner().watchdog.deregister_settled(id).await;
        }
        // Checked from now on, while a guard lives.
        self.keep_watch(lease, &mut lease.guards(), self.labels());
        let ttl_ms = if still_renewed {
            self.lease_ms(LeaseMode::Watchdog)
        } else {
            lease_ms
        };
        let sent_at = Instant::now();
        let target = self.ops().renewal(&self.owner);
        let held: Vec<i64> = self
            .inner()
            .executor
            .run(&target.call(ttl_ms), self.name())
            .await?;
        match held.first().and_then(|a| target.answer(*a, lease)) {
            Some(false) => {}
            Some(true) => lease.mark_revoked(),
            None => {
                lease.mark_lost();
                return Ok(false);
            }
        }
        if !still_renewed {
            lease.extended(sent_at, lease_ms);
        }
        Ok(true)
    }
}

/// A lock handle gives back an owner's holds on its side of the lock: all of them at once, as
/// the repair of an owner to no hold does (waiters are told the lock is free).
impl GiveBack for Handle {
    fn name(&self) -> &str {
        self.ops.name()
    }

    fn give_back(self: Arc<Self>, whose: Option<Arc<dyn Any + Send + Sync>>) -> GivingBack {
        Box::pin(async move {
            let Some(Ok(owner)) = whose.map(|w| w.downcast::<Owner>()) else {
                return Ok(());
            };
            let holder = Holder {
                handle: self,
                owner,
            };
            // The TTL of remaining holds, of which there are none after this.
            let lease_ms = holder.lease_ms(LeaseMode::Watchdog);
            holder.repair_to(&holder.owner, 0, lease_ms).await
        })
    }
}
