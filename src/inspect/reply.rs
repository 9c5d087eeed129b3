//! Reading `lua/inspect.lua`'s nested reply strictly: every item is checked for its shape, and a
//! reply of another shape is an [`Error::UnexpectedReply`] naming what was wrong, never a panic.

use std::time::Duration;

use redis::Value;

use crate::error::{Error, Result};

/// The items of one array of the reply, read front to back.
pub(super) struct Items<'a> {
    items: std::slice::Iter<'a, Value>,
    /// What the array is, for errors.
    what: &'static str,
}

impl<'a> Items<'a> {
    pub(super) fn of(value: &'a Value, what: &'static str) -> Result<Self> {
        match value {
            Value::Array(items) | Value::Set(items) => Ok(Items {
                items: items.iter(),
                what,
            }),
            other => Err(Error::unexpected(format!(
                "inspect.lua: {what}: expected an array, got {other:?}"
            ))),
        }
    }

    fn wrong(&self, expected: &str, got: &Value) -> Error {
        Error::unexpected(format!(
            "inspect.lua: {}: expected {expected}, got {got:?}",
            self.what
        ))
    }

    fn next_value(&mut self) -> Result<&'a Value> {
        self.items.next().ok_or_else(|| {
            Error::unexpected(format!("inspect.lua: {}: the reply is short", self.what))
        })
    }

    /// Whether every item was read.
    pub(super) fn is_empty(&self) -> bool {
        self.items.len() == 0
    }

    pub(super) fn int(&mut self) -> Result<i64> {
        match self.next_value()? {
            Value::Int(n) => Ok(*n),
            other => Err(self.wrong("an integer", other)),
        }
    }

    /// An integer, or `None` for Lua's `false` (nil in RESP2, a boolean in RESP3).
    pub(super) fn opt_int(&mut self) -> Result<Option<i64>> {
        match self.next_value()? {
            Value::Int(n) => Ok(Some(*n)),
            Value::Nil | Value::Boolean(false) => Ok(None),
            other => Err(self.wrong("an integer or nothing", other)),
        }
    }

    /// A count that cannot be negative (subscribers).
    pub(super) fn count(&mut self) -> Result<u64> {
        let n = self.int()?;
        u64::try_from(n)
            .map_err(|_| Error::unexpected(format!("inspect.lua: {}: a count of {n}", self.what)))
    }

    pub(super) fn text(&mut self) -> Result<String> {
        match self.opt_text()? {
            Some(text) => Ok(text),
            None => Err(Error::unexpected(format!(
                "inspect.lua: {}: a string is missing",
                self.what
            ))),
        }
    }

    /// A string, or `None` for Lua's `false`.
    pub(super) fn opt_text(&mut self) -> Result<Option<String>> {
        match self.next_value()? {
            Value::BulkString(bytes) => Ok(Some(String::from_utf8_lossy(bytes).into_owned())),
            Value::SimpleString(text) => Ok(Some(text.clone())),
            Value::Nil | Value::Boolean(false) => Ok(None),
            other => Err(self.wrong("a string", other)),
        }
    }

    /// A stored integer (a count or a counter, which the script checked), or `None`.
    pub(super) fn opt_stored<T: std::str::FromStr>(&mut self) -> Result<Option<T>> {
        match self.opt_text()? {
            None => Ok(None),
            Some(text) => text.parse().map(Some).map_err(|_| {
                Error::unexpected(format!(
                    "inspect.lua: {}: `{text}` is out of range",
                    self.what
                ))
            }),
        }
    }

    pub(super) fn list(&mut self, what: &'static str) -> Result<Items<'a>> {
        Items::of(self.next_value()?, what)
    }
}

/// A PTTL as a remaining time: `None` for -1 (no TTL) and -2 (no key).
pub(super) fn remaining(pttl: i64) -> Option<Duration> {
    u64::try_from(pttl).ok().map(Duration::from_millis)
}

/// A hold count as stored (a hash field's value).
pub(super) fn holds(text: &str, owner: &str) -> Result<u32> {
    text.parse().map_err(|_| {
        Error::unexpected(format!(
            "inspect.lua: the hold count of `{owner}` is `{text}`"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_are_checked_without_panics() {
        let reply = Value::Array(vec![
            Value::Int(3),
            Value::Nil,
            Value::BulkString(b"12".to_vec()),
            Value::Boolean(false),
            Value::Array(vec![]),
        ]);
        let mut items = Items::of(&reply, "test").unwrap();
        assert_eq!(items.int().unwrap(), 3);
        assert_eq!(items.opt_int().unwrap(), None);
        assert_eq!(items.opt_stored::<u64>().unwrap(), Some(12));
        assert_eq!(items.opt_text().unwrap(), None);
        assert!(items.list("inner").unwrap().is_empty());
        assert!(items.is_empty());
        assert!(matches!(items.int(), Err(Error::UnexpectedReply(_))));
        assert!(Items::of(&Value::Int(1), "test").is_err());
        let negative = Value::Array(vec![Value::Int(-1), Value::BulkString(b"-5".to_vec())]);
        let mut items = Items::of(&negative, "test").unwrap();
        assert!(items.count().is_err());
        assert!(items.opt_stored::<u64>().is_err());
    }

    #[test]
    fn ttls_and_hold_counts() {
        assert_eq!(remaining(-2), None);
        assert_eq!(remaining(-1), None);
        assert_eq!(remaining(1500), Some(Duration::from_millis(1500)));
        assert_eq!(holds("2", "o").unwrap(), 2);
        assert!(holds("x", "o").is_err());
    }
}
