//! The lock engine's acquire as operators see it: it runs in its span and ends in an outcome
//! (see [`observe`](crate::observe)); the release's span is opened in
//! [`release`](crate::lock::release).

use std::panic::Location;
use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument;

use crate::error::Result;
use crate::lock::guard::LockGuard;
use crate::lock::handle::Handle;
use crate::lock::holder::{Holder, LeaseMode};
use crate::lock::scope::Nesting;
use crate::observe::Acquire;

impl Handle {
    /// Acquires for the caller's owner (a new one, or that of the hold whose scope the caller
    /// runs in), waiting at most `wait` (`None`: for ever), in a `ferrisson.acquire` span; `at`
    /// is where the caller called the public method (where a new owner's hold is taken).
    pub(crate) async fn acquire_at(
        self: &Arc<Self>,
        mode: LeaseMode,
        wait: Option<Duration>,
        at: &'static Location<'static>,
    ) -> Result<Option<LockGuard>> {
        self.acquire_for_at(None, mode, wait, at).await
    }

    /// As [`acquire_at`](Self::acquire_at), nested in `hold` when given (one more hold of a
    /// guard's), else in the hold whose scope the caller runs in, if any. (`reenter`'s: a
    /// nested acquisition keeps its hold's owner and place, so no caller's place is needed.)
    pub(crate) async fn acquire_for(
        self: &Arc<Self>,
        hold: Option<Nesting>,
        mode: LeaseMode,
        wait: Option<Duration>,
    ) -> Result<Option<LockGuard>> {
        self.acquire_for_at(hold, mode, wait, Location::caller())
            .await
    }

    /// As [`acquire_for`](Self::acquire_for), called `at`.
    pub(crate) async fn acquire_for_at(
        self: &Arc<Self>,
        hold: Option<Nesting>,
        mode: LeaseMode,
        wait: Option<Duration>,
        at: &'static Location<'static>,
    ) -> Result<Option<LockGuard>> {
        let nested = hold.or_else(|| self.nesting());
        match nested {
            // One more hold of work already under way: a drain lets it finish.
            Some(_) => self.core.open()?,
            None => self.core.accepting()?,
        }
        let observed = Acquire::start(&self.core.observe, self.ops.label(), self.name(), wait);
        let acquire = async {
            // Whether the hold still stands is asked under its holds' lock, by the attempt.
            let owner = match &nested {
                Some(hold) => hold.owner.clone(),
                None => {
                    // Outside every scope: failing fast, never a wait for its own hold.
                    self.refuse_self_wait(at)?;
                    self.new_owner(at)
                }
            };
            let holder = Holder {
                handle: self.clone(),
                owner,
            };
            holder
                .acquire_observed(mode, wait, nested.as_ref(), &observed, at)
                .await
        };
        let result = acquire.instrument(observed.span()).await;
        observed.finish(result)
    }
}
