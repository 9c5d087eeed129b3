//! Redis Cluster hash slots: which slot a key lands in, and one short hash tag per slot, so that
//! ferrisson can name a key that lives in the same slot as any lock.
//!
//! Fencing tokens come from one counter per slot (`ferrisson_token:{<tag>}`) instead of one per
//! lock name: a counter that goes up in a slot goes up for every name in it, so tokens still
//! increase per name, while the keys left behind stay bounded (at most one per slot, 16,384)
//! however many distinct names are locked. A script reaches its lock's counter because both
//! keys hash to the same slot, on a single server and in a cluster alike.

use std::sync::OnceLock;

/// How many hash slots Redis Cluster has.
pub(crate) const SLOTS: usize = 16_384;

/// CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0), the checksum Redis Cluster maps
/// keys to slots with.
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The slot of `key`: only the part between the first `{` and the next `}` counts when that
/// part is not empty (the key's hash tag), else the whole key.
pub(crate) fn key_slot(key: &str) -> usize {
    let bytes = key.as_bytes();
    let hashed = match bytes.iter().position(|&b| b == b'{') {
        Some(open) => match bytes[open + 1..].iter().position(|&b| b == b'}') {
            Some(len) if len > 0 => &bytes[open + 1..open + 1 + len],
            _ => bytes,
        },
        None => bytes,
    };
    usize::from(crc16(hashed)) % SLOTS
}

/// For every slot, the smallest number whose decimal digits hash to it. Found once, by
/// counting up (about 170,000 numbers, a few milliseconds).
fn tags() -> &'static [u32] {
    static TAGS: OnceLock<Vec<u32>> = OnceLock::new();
    TAGS.get_or_init(|| {
        let mut tags = vec![u32::MAX; SLOTS];
        let mut missing = SLOTS;
        let mut n: u32 = 0;
        while missing > 0 {
            let slot = key_slot(&n.to_string());
            if tags[slot] == u32::MAX {
                tags[slot] = n;
                missing -= 1;
            }
            n += 1;
        }
        tags
    })
}

/// The fencing counter of the slot that the lock `name` (its hash key) lands in.
pub(crate) fn token_counter(name: &str) -> String {
    format!("ferrisson_token:{{{}}}", tags()[key_slot(name)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_is_the_xmodem_checksum() {
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(crc16(b""), 0);
    }

    #[test]
    fn slots_follow_redis_cluster() {
        // Values from Redis' own CLUSTER KEYSLOT.
        assert_eq!(key_slot("foo"), 12182);
        assert_eq!(key_slot("bar"), 5061);
        assert_eq!(key_slot("{user1000}.following"), key_slot("user1000"));
        assert_eq!(
            key_slot("foo{}{bar}"),
            usize::from(crc16(b"foo{}{bar}")) % SLOTS
        );
        assert_eq!(key_slot("foo{{bar}}zap"), key_slot("{bar"));
        assert_eq!(key_slot("foo{bar}{zap}"), key_slot("bar"));
    }

    #[test]
    fn every_slot_has_a_tag_that_lands_in_it() {
        let tags = tags();
        assert_eq!(tags.len(), SLOTS);
        for (slot, tag) in tags.iter().enumerate() {
            assert_eq!(key_slot(&tag.to_string()), slot);
        }
    }

    #[test]
    fn a_counter_shares_its_lock_s_slot() {
        for name in ["orders:42", "{user:1}:lock", "x", "ünïcode"] {
            assert_eq!(key_slot(&token_counter(name)), key_slot(name), "{name}");
            assert_eq!(
                key_slot(&token_counter(name)),
                key_slot(&crate::names::lock_channel(name)),
                "{name}"
            );
        }
    }
}
