//! Listing: every object whose name matches a pattern, found by `SCAN` on every master and
//! each inspected: [`Client::inspect_matching`].

use futures::{StreamExt, TryStreamExt};

use super::Snapshot;
use super::keys::{Glob, names, object_of};
use crate::Client;
use crate::core::Core;
use crate::error::{Error, Result};

/// Inspections in flight at once: enough to keep the connection busy, few enough that a
/// keyspace of many objects does not queue them all at once.
const IN_FLIGHT: usize = 32;

impl Client {
    /// Every object whose name matches `pattern` (a glob as `SCAN … MATCH` takes it: `*`, `?`,
    /// `[a-z]`; `"*"` for all), each [inspected](Self::inspect), in name order: `SCAN` on
    /// every master, each key mapped back to its object's name (auxiliary keys such as a fair
    /// queue too), identities skipped. See [listing](crate::guide::inspect#listing-by-pattern)
    /// for how, and what it costs.
    ///
    /// Keys of other types, and strings or hashes that hold no counts, are left out; but any
    /// integer string looks like a semaphore's or latch's count, so an application's own
    /// counters are listed too: a `pattern` that matches only lock names (`"locks:*"`) keeps
    /// them out, and makes the scan send less.
    ///
    /// # Errors
    ///
    /// [`Error::PermissionDenied`](crate::Error::PermissionDenied) for an ACL user without
    /// `+scan` (the README's rule leaves it out); [`Error::Redis`](crate::Error::Redis).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (it only reads).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson::Client) -> ferrisson::Result<()> {
    /// use ferrisson::inspect::Snapshot;
    ///
    /// for snapshot in client.inspect_matching("orders:*").await? {
    ///     if let Snapshot::Lock(lock) = &snapshot && lock.is_held() {
    ///         println!("{} held, lease {:?} left", lock.name, lock.lease);
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn inspect_matching(&self, pattern: &str) -> Result<Vec<Snapshot>> {
        matching(&self.inner, pattern).await
    }
}

/// Every object whose name matches `pattern`, inspected, in name order.
async fn matching(core: &Core, pattern: &str) -> Result<Vec<Snapshot>> {
    let glob = Glob::new(pattern);
    // A derived key holds its object's name whole (`prefix:{name}`, `{name}:suffix`), so a key
    // of an object whose name matches the pattern matches `*<pattern>*`: the server filters by
    // that, and the names are checked against the pattern itself here.
    let wide = widened(pattern, &glob);
    let executor = &core.executor;
    let keys = futures::future::try_join_all(
        executor
            .master_slots()
            .await?
            .into_iter()
            .map(|slot| executor.scan_on_slot(slot, &wide)),
    )
    .await?;
    let found = keys.into_iter().flatten().flat_map(|k| object_of(&k));
    let (names, maybe) = names(found.collect());
    let wanted = names
        .into_iter()
        .map(|name| (name, false))
        .chain(maybe.into_iter().map(|key| (key, true)))
        .filter(|(name, _)| glob.matches(name));
    let read: Vec<Option<Snapshot>> = futures::stream::iter(wanted)
        .map(|(name, maybe)| async move {
            // A key only shaped as a lock's own key counts when it holds one.
            Ok(inspect(core, &name).await?.filter(|snapshot| {
                !maybe || matches!(snapshot, Snapshot::Lock(_) | Snapshot::ReadWriteLock(_))
            }))
        })
        .buffered(IN_FLIGHT)
        .try_collect()
        .await?;
    let mut read: Vec<Snapshot> = read.into_iter().flatten().collect();
    read.sort_by(|a, b| a.name().cmp(b.name()));
    Ok(read)
}

/// The pattern the server filters keys by: a derived key holds its object's name whole
/// (`prefix:{name}`, `{name}:suffix`), so `*<pattern>*`; every key for a pattern that ends
/// inside an escape or a class (`foo\`, `[ab`), which the added `*` would change.
fn widened(pattern: &str, glob: &Glob) -> String {
    let trailing_escapes = pattern.bytes().rev().take_while(|b| *b == b'\\').count();
    if glob.is_everything() || trailing_escapes % 2 == 1 || glob.has_open_class() {
        "*".to_owned()
    } else {
        format!("*{pattern}*")
    }
}

/// The snapshot of `name`; `None` when it is gone since the scan, or is no object of the
/// family (another type, a hash that is no lock, a key that is no valid name).
async fn inspect(core: &Core, name: &str) -> Result<Option<Snapshot>> {
    match super::any(core, name).await {
        Ok(Snapshot::Absent(_)) => Ok(None),
        Ok(snapshot) => Ok(Some(snapshot)),
        Err(
            e @ (Error::WrongType { .. } | Error::UnexpectedReply(_) | Error::InvalidArgument(_)),
        ) => {
            tracing::debug!(name, error = %e, "listing: not an object of the lock family");
            Ok(None)
        }
        // An ACL user sees the keys of its rule only, while SCAN names every key.
        Err(e @ Error::PermissionDenied { .. }) => {
            tracing::debug!(name, error = %e, "listing: a name this user may not read");
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_side_pattern_keeps_every_key_an_object_of_the_pattern_may_have() {
        let widen = |p: &str| widened(p, &Glob::new(p));
        assert_eq!(widen("*"), "*");
        assert_eq!(widen("orders:*"), "*orders:**");
        assert_eq!(widen(r"a\*"), r"*a\**");
        // A `*` after an odd `\` or inside an open class would be taken literally.
        assert_eq!(widen(r"foo\"), "*");
        assert_eq!(widen(r"foo\\\"), "*");
        assert_eq!(widen(r"foo\\"), r"*foo\\*");
        assert_eq!(widen("[ab"), "*");
    }
}
