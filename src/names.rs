//! Object names and the Redis keys and channels derived from them (Redisson 3.x layout).

/// The longest object name accepted, in bytes.
pub(crate) const MAX_NAME_LEN: usize = 16 * 1024;

/// Checks a user-given object name; the error says what is wrong with it.
///
/// A name may carry its own hash tag (`{user:1}:lock`), but one whose braces would put the
/// derived keys in another cluster slot than the name itself is refused.
pub(crate) fn validate(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("the name is empty".into());
    }
    if name.len() > MAX_NAME_LEN {
        return Err(format!(
            "the name is {} bytes long; at most {MAX_NAME_LEN} are allowed",
            name.len()
        ));
    }
    match name.find('{') {
        None if name.contains('}') => Err(format!(
            "the name `{}` has a `}}` without an opening `{{`",
            shorten(name)
        )),
        None => Ok(()),
        Some(open) => match name[open + 1..].find('}') {
            None => Err(format!("the name `{}` has an unclosed `{{`", shorten(name))),
            Some(0) => Err(format!(
                "the name `{}` has an empty hash tag `{{}}`",
                shorten(name)
            )),
            Some(_) => Ok(()),
        },
    }
}

fn shorten(name: &str) -> &str {
    match name.char_indices().nth(64) {
        Some((cut, _)) => &name[..cut],
        None => name,
    }
}

/// `prefix:{name}`, or `prefix:name` when the name already carries a hash tag.
pub(crate) fn derived(prefix: &str, name: &str) -> String {
    if name.contains('{') {
        format!("{prefix}:{name}")
    } else {
        format!("{prefix}:{{{name}}}")
    }
}

/// The base of names that end with a suffix: `{name}`, or `name` when it carries a hash tag
/// (Redisson: `{name}:<suffix>`).
pub(crate) fn suffix_base(name: &str) -> String {
    if name.contains('{') {
        name.to_owned()
    } else {
        format!("{{{name}}}")
    }
}

/// The revocation requests of an object, a hash of hold → requested at (server ms); the same
/// name is the channel that tells listening holders (ferrisson only: no Redisson client
/// subscribes to it, and waiters listen elsewhere).
pub(crate) fn revocations(name: &str) -> String {
    derived("ferrisson_revoke", name)
}

/// The channel of a read-write lock.
pub(crate) fn rwlock_channel(name: &str) -> String {
    derived("redisson_rwlock", name)
}

/// The prefix of an owner's read-hold timeout keys, `{name}:<owner>:rwlock_timeout` (the name
/// as [`suffix_base`] wraps it), in pieces.
pub(crate) fn read_timeouts_pieces<'a>(name: &'a str, owner: &'a str) -> [&'a str; 6] {
    let (open, close) = if name.contains('{') {
        ("", "")
    } else {
        ("{", "}")
    };
    [open, name, close, ":", owner, ":rwlock_timeout"]
}

/// A read-write lock owner's write field, `<owner>:write`, in pieces.
pub(crate) fn write_field_pieces(owner: &str) -> [&str; 2] {
    [owner, ":write"]
}

/// `pieces` joined into a shared string with one allocation (two for one over 256 bytes): the
/// names made per owner, where every allocation counts.
pub(crate) fn shared(pieces: &[&str]) -> std::sync::Arc<str> {
    let len: usize = pieces.iter().map(|p| p.len()).sum();
    let mut buf = [0u8; 256];
    if len > buf.len() {
        return pieces.concat().into();
    }
    let mut at = 0;
    for piece in pieces {
        buf[at..at + piece.len()].copy_from_slice(piece.as_bytes());
        at += piece.len();
    }
    // Whole `str`s copied back to back: valid UTF-8.
    std::str::from_utf8(&buf[..len]).map_or_else(|_| pieces.concat().into(), std::sync::Arc::from)
}

/// The channel an RLock's release is published on.
pub(crate) fn lock_channel(name: &str) -> String {
    derived("redisson_lock__channel", name)
}

/// Redisson's fencing counter of a lock name (fenced locks count in it, for Java interop).
pub(crate) fn token_key(name: &str) -> String {
    derived("redisson_lock_token", name)
}

/// The short-lived key that makes a resent release idempotent:
/// `redisson_unlock_latch:{name}:<request-id>`.
#[cfg(test)]
pub(crate) fn unlock_latch_key(name: &str, request_id: &str) -> String {
    unlock_latch_pieces(name, request_id).concat()
}

/// [`unlock_latch_key`] in pieces, for a script call to write without building it first.
pub(crate) fn unlock_latch_pieces<'a>(name: &'a str, request_id: &'a str) -> [&'a str; 6] {
    let (open, close) = if name.contains('{') {
        ("", "")
    } else {
        ("{", "}")
    };
    ["redisson_unlock_latch:", open, name, close, ":", request_id]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_are_wrapped_in_a_hash_tag() {
        assert_eq!(lock_channel("orders"), "redisson_lock__channel:{orders}");
        assert_eq!(token_key("orders"), "redisson_lock_token:{orders}");
        assert_eq!(
            unlock_latch_key("orders", "r1"),
            "redisson_unlock_latch:{orders}:r1"
        );
        assert_eq!(
            unlock_latch_key("{t}x", "r1"),
            "redisson_unlock_latch:{t}x:r1"
        );
    }

    #[test]
    fn read_write_names_follow_redisson() {
        assert_eq!(rwlock_channel("doc"), "redisson_rwlock:{doc}");
        let timeouts = |name, owner| shared(&read_timeouts_pieces(name, owner));
        assert_eq!(&*timeouts("doc", "u:1"), "{doc}:u:1:rwlock_timeout");
        assert_eq!(&*timeouts("{t}x", "u:1"), "{t}x:u:1:rwlock_timeout");
        assert_eq!(&*shared(&write_field_pieces("u:1")), "u:1:write");
        let long = "n".repeat(300);
        assert_eq!(
            &*shared(&[&long, ":", "x"]),
            format!("{long}:x"),
            "over the stack buffer"
        );
        assert_eq!(
            derived("redisson_lock_queue", "q"),
            "redisson_lock_queue:{q}"
        );
    }

    #[test]
    fn tagged_names_keep_their_own_tag() {
        assert_eq!(
            lock_channel("{user:1}:lock"),
            "redisson_lock__channel:{user:1}:lock"
        );
    }

    #[test]
    fn bad_names_are_refused_with_a_reason() {
        assert!(validate("").unwrap_err().contains("empty"));
        assert!(
            validate(&"x".repeat(MAX_NAME_LEN + 1))
                .unwrap_err()
                .contains("at most")
        );
        assert!(validate("a{b").unwrap_err().contains("unclosed"));
        assert!(validate("a}b").unwrap_err().contains("without an opening"));
        assert!(validate("a{}b").unwrap_err().contains("empty hash tag"));
    }

    #[test]
    fn good_names_pass() {
        for name in [
            "orders",
            "{user:1}:lock",
            "a}{b}",
            "ünïcode",
            &"x".repeat(MAX_NAME_LEN),
        ] {
            assert_eq!(validate(name), Ok(()), "{name}");
        }
    }

    #[test]
    fn long_bad_names_are_shortened_in_messages() {
        let name = format!("{}{{", "y".repeat(1000));
        assert!(validate(&name).unwrap_err().len() < 200);
    }
}
