//! The hash map of the per-operation bookkeeping (local waiters and holds, the hub's channels,
//! the watchdog's leases).
//!
//! Every lock and unlock looks names up in these maps several times. std's default SipHash
//! costs more per lookup than the lookup itself at these sizes; foldhash is several times
//! faster and still seeded per map, so names chosen by an outsider (lock names often carry
//! user input) cannot be made to collide on purpose.

/// A `HashMap` hashed with foldhash's per-map random seed.
pub(crate) type Map<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
