//! Small pieces of human-readable text: spans of time, the time of day, text from Redis made
//! safe for a terminal, output that survives a closed pipe.

use std::borrow::Cow;
use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A span as an operator reads it at a glance: `850ms`, `27.5s`, `3m12s`, `2h05m`, `3d04h`.
pub(crate) fn span(d: Duration) -> String {
    let ms = d.as_millis();
    let s = d.as_secs();
    match s {
        _ if ms < 1_000 => format!("{ms}ms"),
        0..60 => format!("{}.{}s", s, d.subsec_millis() / 100),
        60..3_600 => format!("{}m{:02}s", s / 60, s % 60),
        3_600..86_400 => format!("{}h{:02}m", s / 3_600, s % 3_600 / 60),
        _ => format!("{}d{:02}h", s / 86_400, s % 86_400 / 3_600),
    }
}

/// A moment relative to now, in milliseconds (negative: passed): `in 4.2s`, `1.1s ago`.
pub(crate) fn from_now(ms: i64) -> String {
    let d = Duration::from_millis(ms.unsigned_abs());
    if ms > 0 {
        format!("in {}", span(d))
    } else {
        format!("{} ago", span(d))
    }
}

/// The time of day now, UTC, `HH:MM:SS` (a clock nobody has to set a time zone for).
pub(crate) fn clock_utc() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let of_day = secs % 86_400;
    format!(
        "{:02}:{:02}:{:02} UTC",
        of_day / 3_600,
        of_day % 3_600 / 60,
        of_day % 60
    )
}

/// `text` cut to `width` characters, its end replaced by `…` when cut.
pub(crate) fn fit(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_owned();
    }
    if width == 0 {
        return String::new();
    }
    let mut cut: String = text.chars().take(width - 1).collect();
    cut.push('…');
    cut
}

/// `text` safe to show on a terminal: every control character written as Rust writes it in a
/// string literal (`\u{1b}`, `\n`), and the bidirectional overrides too (`\u{202e}`), which
/// reorder what follows them on screen. Key names, owners and identities come from Redis,
/// where anyone with write access puts any bytes: raw, an ESC could retitle the window, move
/// the cursor or rewrite the lines above, and a newline could forge a row of a table. Escaped
/// text has no control character left, so escaping twice changes nothing. JSON output does not
/// pass through this: it is for programs, which need the names exactly (serde_json writes the
/// characters below U+0020 as `\u00XX` escapes).
pub(crate) fn clean(text: &str) -> Cow<'_, str> {
    let unsafe_char =
        |c: char| c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
    if !text.chars().any(unsafe_char) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if unsafe_char(c) {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Writes `text` to stdout. A reader that went away (`| head`) is no error of ours: the rest
/// is dropped quietly, and the exit code stays what the command found.
pub(crate) fn print(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_read_at_a_glance() {
        let cases = [
            (0, "0ms"),
            (850, "850ms"),
            (27_540, "27.5s"),
            (192_000, "3m12s"),
            (7_500_000, "2h05m"),
            (273_600_000, "3d04h"),
        ];
        for (ms, shown) in cases {
            assert_eq!(span(Duration::from_millis(ms)), shown);
        }
        assert_eq!(from_now(4_200), "in 4.2s");
        assert_eq!(from_now(-1_100), "1.1s ago");
    }

    #[test]
    fn control_characters_are_shown_escaped() {
        assert!(matches!(clean("orders:42 ×2 …"), Cow::Borrowed(_)));
        let evil = "a\x1b]0;pwned\x07\nb\u{9b}c\u{202e}d\te";
        let shown = clean(evil);
        assert_eq!(shown, r"a\u{1b}]0;pwned\u{7}\nb\u{9b}c\u{202e}d\te");
        assert!(!shown.chars().any(char::is_control));
        assert_eq!(clean(&shown), shown, "escaping twice changes nothing");
    }

    #[test]
    fn long_text_is_cut_with_an_ellipsis() {
        assert_eq!(fit("orders:42", 20), "orders:42");
        assert_eq!(fit("orders:42", 6), "order…");
        assert_eq!(fit("orders:42", 0), "");
    }
}
