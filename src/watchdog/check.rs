//! Holds the watchdog does not renew (fixed leases) but re-checks with the renewed ones after a
//! connection change: one read each, so that their holders too hear within about a second that
//! a hold vanished, not at their lease's end.

use super::RenewTarget;
use crate::error::{Error, Result};
use crate::script::Executor;

/// Whether the hold `target` marks is still there: its owner's field in the lock hash, or every
/// permit id in the semaphore's expiry set. A key of another type holds no hold of ours.
pub(super) async fn still_held(executor: &Executor, target: &RenewTarget) -> Result<bool> {
    let answer = match target {
        RenewTarget::HashField { key, field } => has_field(executor, key, field).await,
        RenewTarget::ReadHolds { key, owner, .. } => has_field(executor, key, owner).await,
        RenewTarget::Permits { timeouts, ids, .. } => {
            let mut all = Ok(true);
            for id in ids.split(' ') {
                let mut cmd = redis::cmd("ZSCORE");
                cmd.arg(&**timeouts).arg(id);
                match executor.read::<Option<f64>>(&cmd, timeouts).await {
                    Ok(Some(_)) => {}
                    Ok(None) => {
                        all = Ok(false);
                        break;
                    }
                    Err(e) => {
                        all = Err(e);
                        break;
                    }
                }
            }
            all
        }
    };
    match answer {
        Err(Error::WrongType { .. }) => Ok(false),
        other => other,
    }
}

async fn has_field(executor: &Executor, key: &str, field: &str) -> Result<bool> {
    let mut cmd = redis::cmd("HEXISTS");
    cmd.arg(key).arg(field);
    executor.read(&cmd, key).await
}
