//! Cooperative revocation (Apache Curator's `Revoker`): asking the holders of a lock or of
//! permits to let go, and a holder hearing it.
//!
//! A request marks each current hold in `ferrisson_revoke:{name}` (hold → requested at), which
//! lives about one lease, then publishes on the channel of the same name. A guard awaiting
//! [`revocation_requested`](crate::LockGuard::revocation_requested) listens there and reads the
//! marks; the watchdog's renewals read them too, so a holder that is not listening learns of a
//! request at its next renewal. Nothing is ever released by a request: `force_unlock` is the
//! forced path, and fencing tokens guard the resource from a holder that ignores the request.
//!
//! The channel is ferrisson's own, not the lock's: Redisson clients never subscribe to it, and
//! ferrisson's waiters (who listen on the lock's channel) are not woken by it. On the lock's
//! channel a holder would have to subscribe for every hold, and a semaphore's channel carries
//! counts that Java waiters act on.

use std::time::Duration;

use crate::core::Core;
use crate::error::Result;
use crate::lease::Lease;
use crate::names;
use crate::pubsub::Wake;
use crate::script::{REVOKE, ScriptCall};

/// Which holds of an object a request is for.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Holds {
    /// Every owner of a lock hash (plain, fair, fenced).
    Lock,
    /// The readers of a read-write lock.
    Read,
    /// The writer of a read-write lock.
    Write,
    /// Every permit out of a permit-expirable semaphore.
    Permits,
}

impl Holds {
    fn arg(self) -> &'static str {
        match self {
            Holds::Lock => "lock",
            Holds::Read => "read",
            Holds::Write => "write",
            Holds::Permits => "permits",
        }
    }
}

/// Asks the current `holds` of the object `name` (its key: `object`) to let go; returns how many
/// holds were asked (0: nobody holds it, nothing was recorded).
pub(crate) async fn request(inner: &Core, name: &str, object: &str, holds: Holds) -> Result<usize> {
    let requests = names::revocations(name);
    let lease_ms = inner.watchdog.lease().as_millis() as u64;
    let call = ScriptCall::new(&REVOKE)
        .key(object)
        .key(&requests)
        .key(&requests)
        .arg(holds.arg())
        .arg(lease_ms);
    let asked: i64 = inner.executor.run(&call, object).await?;
    Ok(usize::try_from(asked).unwrap_or(0))
}

/// Which requests reach a hold.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Heed {
    /// Any request under one of the hold's marks: permit ids, new for every guard.
    Any,
    /// Requests stamped no earlier than the hold's grant stamp (its token, but for a read
    /// nested in a write hold): a lock's mark is its owner name, which
    /// a later hold of the same owner carries too (see `revoke.lua`).
    SinceToken,
}

/// Resolves once a revocation of the hold `lease` (marked in Redis under any of `marks`) was
/// requested: at once if it is known already, else when the request's message arrives, a
/// renewal reports it, or a re-check (every re-check interval) finds the mark.
pub(crate) async fn requested(inner: &Core, name: &str, marks: &[&str], heed: Heed, lease: &Lease) {
    if lease.is_revoked() {
        return;
    }
    let channel = names::revocations(name);
    let config = &inner.config;
    let mut subscription = match inner
        .hub
        .subscribe_with(&channel, config.response_timeout, Wake::All)
        .await
    {
        Ok(subscription) => Some(subscription),
        Err(e) => {
            tracing::warn!(object = %name, channel = %channel, error = %e, "cannot listen for revocation requests; reading them every re-check interval instead");
            None
        }
    };
    loop {
        match marked(inner, &channel, marks, heed, lease.stamp()).await {
            Ok(true) => {
                lease.mark_revoked();
                return;
            }
            Ok(false) => {}
            Err(e) => {
                tracing::debug!(object = %name, error = %e, "could not read revocation requests; retrying");
            }
        }
        let nap = config.recheck_interval.max(Duration::from_millis(10));
        let woken = async {
            match &subscription {
                Some(listening) => {
                    listening.used();
                    listening.woken().await
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            woken = woken => {
                if let Err(e) = woken {
                    tracing::warn!(object = %name, channel = %channel, error = %e, "stopped listening for revocation requests; reading them every re-check interval instead");
                    subscription = None;
                }
            }
            () = lease.revoked() => return,
            () = tokio::time::sleep(nap) => {}
        }
    }
}

/// Whether any of `marks` has a revocation request in `requests` that reaches the hold whose
/// token is `token`.
async fn marked(
    inner: &Core,
    requests: &str,
    marks: &[&str],
    heed: Heed,
    token: u64,
) -> Result<bool> {
    let mut cmd = redis::cmd("HMGET");
    cmd.arg(requests).arg(marks);
    let found: Vec<Option<String>> = inner.executor.read(&cmd, requests).await?;
    Ok(found.iter().flatten().any(|stamp| match heed {
        Heed::Any => true,
        Heed::SinceToken => stamp.parse::<u64>().is_ok_and(|at| at >= token),
    }))
}
