//! From a key found by `SCAN` back to the name of the object it belongs to (the inverse of
//! the [layout](crate::guide::layout)'s derived names), and Redis' glob patterns, matched here
//! the way the server matches `SCAN … MATCH`.

/// The object a key belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Found {
    /// The object's own key: the key is the name.
    Own(String),
    /// A key derived from the name (a fair queue, a revocation hash, a read hold's timeout...).
    Derived(String),
    /// A key shaped as a derived one that may also be a lock's own key: `{t}:timeout` is the
    /// permits of the semaphore `t`, or the lock named `{t}:timeout` itself.
    MaybeOwn(String),
}

/// Suffixes of derived keys that names of locks end with too (`{tenant:1}:timeout`).
const NAME_LIKE_SUFFIXES: [&str; 2] = [":timeout", ":ferrisson_writers"];

/// Keys `<prefix>:{name}` (or `<prefix>:name` for a name with its own hash tag).
const PREFIXED: [&str; 6] = [
    "redisson_lock_token:",
    "ferrisson_lock_starving:",
    "redisson_lock_queue:",
    "redisson_lock_timeout:",
    "ferrisson_fair_alive:",
    "ferrisson_revoke:",
];

/// Keys that belong to no object: client identities, and the fencing counters shared by
/// every name of a cluster slot.
const NO_OBJECT: [&str; 2] = ["ferrisson_client:", "ferrisson_token:"];

/// The objects `key` may belong to: none for a key of no object; the derived name, and the
/// key itself where a lock's name may have that shape too.
pub(super) fn object_of(key: &str) -> Vec<Found> {
    if NO_OBJECT.iter().any(|prefix| key.starts_with(prefix)) {
        return Vec::new();
    }
    let derived = PREFIXED
        .iter()
        .find_map(|prefix| key.strip_prefix(prefix))
        .and_then(unwrap)
        .or_else(|| unlock_latch(key))
        .or_else(|| suffixed(key));
    match derived {
        Some(name) if NAME_LIKE_SUFFIXES.iter().any(|end| key.ends_with(end)) => {
            vec![Found::Derived(name), Found::MaybeOwn(key.to_owned())]
        }
        Some(name) => vec![Found::Derived(name)],
        // Whatever else: its own key (the kind is read from it).
        None => vec![Found::Own(key.to_owned())],
    }
}

/// `redisson_unlock_latch:{name}:<request-id>`: a ferrisson request id is `<client-uuid>:r<n>`,
/// Redisson's has no `:`.
fn unlock_latch(key: &str) -> Option<String> {
    let rest = key.strip_prefix("redisson_unlock_latch:")?;
    let (before, _) = rest.rsplit_once(':')?;
    let before = match before.rsplit_once(':') {
        Some((named, uuid)) if uuid::Uuid::try_parse(uuid).is_ok() => named,
        _ => before,
    };
    unwrap(before)
}

/// `{name}:<suffix>` keys: waiting writers' marks, a permit semaphore's permits, a
/// semaphore's acquire records, a read hold's timeout (`{name}:<owner>:rwlock_timeout:<k>`,
/// the owner `<uuid>:<n>`).
fn suffixed(key: &str) -> Option<String> {
    let base = if let Some(base) = key
        .strip_suffix(":ferrisson_writers")
        .or_else(|| key.strip_suffix(":timeout"))
    {
        base
    } else if let Some((base, _)) = key.rsplit_once(":ferrisson_sc_request:") {
        base
    } else {
        let (held, k) = key.rsplit_once(":rwlock_timeout:")?;
        if k.is_empty() || !k.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let (owner_client, _n) = held.rsplit_once(':')?;
        owner_client.rsplit_once(':')?.0
    };
    unwrap(base)
}

/// The name a derived key wraps: `{name}` is a plain name; a part with a `{` is a name that
/// carries its own hash tag, as is; without one it is no derived key at all.
fn unwrap(wrapped: &str) -> Option<String> {
    let inner = wrapped
        .strip_prefix('{')
        .and_then(|w| w.strip_suffix('}'))
        .filter(|inner| !inner.is_empty() && !inner.contains(['{', '}']));
    match inner {
        Some(plain) => Some(plain.to_owned()),
        None if wrapped.contains('{') => Some(wrapped.to_owned()),
        None => None,
    }
}

/// The object names behind `found`: derived names as they are, except that a name which is
/// one hash tag whole (`{t}`) derives the same keys as `t` does, and is taken for `{t}` when
/// `{t}` has its own key and `t` has none.
///
/// The second list holds the keys that may be locks' own keys ([`Found::MaybeOwn`]) and are no
/// name of the first: a lock among them is listed, anything else is the derived key it looks
/// like.
pub(super) fn names(found: Vec<Found>) -> (Vec<String>, Vec<String>) {
    let own: std::collections::HashSet<String> = found
        .iter()
        .filter_map(|f| match f {
            Found::Own(name) => Some(name.clone()),
            _ => None,
        })
        .collect();
    let mut maybe = Vec::new();
    let mut names: Vec<String> = found
        .into_iter()
        .filter_map(|f| match f {
            Found::Own(name) => Some(name),
            Found::Derived(name) => {
                let tagged = format!("{{{name}}}");
                Some(if !own.contains(&name) && own.contains(&tagged) {
                    tagged
                } else {
                    name
                })
            }
            Found::MaybeOwn(key) => {
                maybe.push(key);
                None
            }
        })
        .collect();
    names.sort_unstable();
    names.dedup();
    maybe.sort_unstable();
    maybe.dedup();
    maybe.retain(|key| names.binary_search(key).is_err());
    (names, maybe)
}

/// One element of a glob pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    /// `*`: any run of bytes.
    Any,
    /// `?`: one byte.
    One,
    /// `[...]`, `[^...]`: one byte in (or out of) the ranges.
    Class {
        negated: bool,
        ranges: Vec<(u8, u8)>,
    },
    /// A byte as it is (`\x` for a special one).
    Byte(u8),
}

/// A glob pattern with Redis' syntax (`*`, `?`, `[a-z]`, `[^x]`, `\` escapes), matched byte by
/// byte and case-sensitively as `SCAN … MATCH` and `KEYS` match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Glob {
    tokens: Vec<Token>,
    /// Whether a `[` class runs to the pattern's end unclosed.
    open_class: bool,
}

impl Glob {
    pub(super) fn new(pattern: &str) -> Self {
        let bytes = pattern.as_bytes();
        // The byte at `i`, or after a `\` the byte it escapes (a trailing `\` stands for
        // itself); with where the next element starts.
        let literal = |i: usize| match (bytes[i], bytes.get(i + 1)) {
            (b'\\', Some(escaped)) => (*escaped, i + 2),
            (b, _) => (b, i + 1),
        };
        let mut tokens = Vec::new();
        let mut open_class = false;
        let mut i = 0;
        while i < bytes.len() {
            let token = match bytes[i] {
                b'*' => Token::Any,
                b'?' => Token::One,
                b'[' => {
                    i += 1;
                    let negated = bytes.get(i) == Some(&b'^');
                    if negated {
                        i += 1;
                    }
                    let mut ranges = Vec::new();
                    // An unclosed class ends with the pattern, as in Redis.
                    while i < bytes.len() && bytes[i] != b']' {
                        let (low, next) = literal(i);
                        i = next;
                        let high = match (bytes.get(i), bytes.get(i + 1)) {
                            (Some(b'-'), Some(high)) if *high != b']' => {
                                let (high, next) = literal(i + 1);
                                i = next;
                                high
                            }
                            _ => low,
                        };
                        ranges.push((low.min(high), low.max(high)));
                    }
                    open_class = i >= bytes.len();
                    Token::Class { negated, ranges }
                }
                _ => {
                    let (byte, next) = literal(i);
                    tokens.push(Token::Byte(byte));
                    i = next;
                    continue;
                }
            };
            tokens.push(token);
            i += 1;
        }
        Glob { tokens, open_class }
    }

    /// Whether a `[` class is left open at the pattern's end (`[ab`).
    pub(super) fn has_open_class(&self) -> bool {
        self.open_class
    }

    /// Whether the pattern matches everything (`*`, `**`, ...).
    pub(super) fn is_everything(&self) -> bool {
        self.tokens.iter().all(|t| *t == Token::Any)
    }

    pub(super) fn matches(&self, text: &str) -> bool {
        let text = text.as_bytes();
        let (mut t, mut p) = (0, 0);
        // Where to resume after the last `*`: the pattern after it, and the text it took up to.
        let mut resume: Option<(usize, usize)> = None;
        while t < text.len() {
            match self.tokens.get(p) {
                Some(Token::Any) => {
                    resume = Some((p + 1, t));
                    p += 1;
                }
                Some(token) if token.takes(text[t]) => {
                    p += 1;
                    t += 1;
                }
                _ => match resume {
                    // The last `*` takes one byte more.
                    Some((after, took)) => {
                        p = after;
                        t = took + 1;
                        resume = Some((after, took + 1));
                    }
                    None => return false,
                },
            }
        }
        self.tokens[p.min(self.tokens.len())..]
            .iter()
            .all(|token| *token == Token::Any)
    }
}

impl Token {
    fn takes(&self, byte: u8) -> bool {
        match self {
            Token::Any | Token::One => true,
            Token::Byte(b) => *b == byte,
            Token::Class { negated, ranges } => {
                ranges
                    .iter()
                    .any(|(low, high)| (*low..=*high).contains(&byte))
                    != *negated
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn derived(key: &str) -> Option<String> {
        object_of(key).into_iter().find_map(|found| match found {
            Found::Derived(name) => Some(name),
            _ => None,
        })
    }

    #[test]
    fn every_derived_key_names_its_object() {
        let client = "1b4e28ba-2fa1-11d2-883f-0016d3cca427";
        let owner = format!("{client}:7");
        for name in ["orders:42", "{user:1}:cart"] {
            let base = crate::names::suffix_base(name);
            let keys = [
                crate::names::token_key(name),
                crate::names::derived("ferrisson_lock_starving", name),
                crate::names::derived("redisson_lock_queue", name),
                crate::names::derived("redisson_lock_timeout", name),
                crate::names::derived("ferrisson_fair_alive", name),
                crate::names::revocations(name),
                crate::names::unlock_latch_key(name, &format!("{client}:r3")),
                crate::names::unlock_latch_key(name, "5f2a9c"),
                format!("{base}:ferrisson_writers"),
                format!("{base}:timeout"),
                format!("{base}:ferrisson_sc_request:{client}:r9"),
                crate::names::read_timeouts_pieces(name, &owner).concat() + ":12",
            ];
            for key in keys {
                assert_eq!(derived(&key).as_deref(), Some(name), "{key}");
            }
            assert_eq!(object_of(name), [Found::Own(name.to_owned())]);
        }
    }

    #[test]
    fn identities_and_slot_counters_are_no_objects() {
        assert_eq!(object_of("ferrisson_client:{0c4a}"), []);
        assert_eq!(object_of(&crate::slots::token_counter("orders")), []);
        // Look-alikes without a `{` are keys of their own.
        for key in [
            "cache:timeout",
            "redisson_lock_queue:plain",
            "a:b:rwlock_timeout:1",
        ] {
            assert_eq!(object_of(key), [Found::Own(key.to_owned())]);
        }
    }

    #[test]
    fn a_tagged_name_shaped_as_a_derived_key_may_be_a_lock_of_its_own() {
        for key in ["{tenant:1}:timeout", "{tenant:1}:ferrisson_writers"] {
            assert_eq!(
                object_of(key),
                [
                    Found::Derived("tenant:1".into()),
                    Found::MaybeOwn(key.into())
                ]
            );
        }
        let found = vec![
            Found::Derived("tenant:1".into()),
            Found::MaybeOwn("{tenant:1}:timeout".into()),
            Found::Own("{a}:timeout".into()),
            Found::MaybeOwn("{a}:timeout".into()),
        ];
        assert_eq!(
            names(found),
            (
                vec!["tenant:1".to_owned(), "{a}:timeout".to_owned()],
                vec!["{tenant:1}:timeout".to_owned()]
            )
        );
    }

    #[test]
    fn a_name_that_is_one_tag_keeps_its_braces_when_its_own_key_says_so() {
        let found = vec![
            Found::Own("{t}".into()),
            Found::Derived("t".into()),
            Found::Derived("jobs".into()),
            Found::Own("jobs".into()),
            Found::Derived("queue-only".into()),
        ];
        assert_eq!(names(found).0, ["jobs", "queue-only", "{t}"]);
    }

    #[test]
    fn globs_match_as_redis_does() {
        let cases = [
            ("*", "", true),
            ("*", "anything", true),
            ("orders:*", "orders:42", true),
            ("orders:*", "order:42", false),
            ("*:4?", "orders:42", true),
            ("*:4?", "orders:4", false),
            ("a*b*c", "aXbYbZc", true),
            ("a*b*c", "aXbYbZ", false),
            ("[abc]x", "bx", true),
            ("[^abc]x", "bx", false),
            ("[a-c]x", "cx", true),
            ("[c-a]x", "bx", true),
            ("[^a-c]x", "dx", true),
            (r"\*x", "*x", true),
            (r"\*x", "ax", false),
            ("*{orders}*", "redisson_lock_queue:{orders}", true),
            ("**a", "ba", true),
            ("[ab", "b", true),
        ];
        for (pattern, text, expected) in cases {
            assert_eq!(
                Glob::new(pattern).matches(text),
                expected,
                "{pattern} ~ {text}"
            );
        }
        assert!(Glob::new("**").is_everything());
        assert!(Glob::new("[ab").has_open_class());
        assert!(!Glob::new("[ab]*").has_open_class());
        assert!(!Glob::new("*a").is_everything());
    }
}
