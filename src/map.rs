//! The hash map of the per-operation bookkeeping (local waiters and holds, the hub's channels,
//! the watchdog's leases).
//!
//! Every lock and unlock looks names up in these maps several times, and std's default SipHash
//! costs more per lookup than the lookup itself at these sizes. foldhash is several times
//! faster. It is seeded at random per process and per map, so colliding names cannot be
//! prepared in advance; unlike SipHash it makes no cryptographic claim, which these maps can
//! afford: they hold only the names this process is working on at the moment.

/// A `HashMap` hashed with foldhash's randomly seeded state.
pub(crate) type Map<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
