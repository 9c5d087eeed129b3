//! The table `list` prints and `watch` draws: one row per object, columns padded, cut to the
//! terminal's width when there is one.

use ferrisson::inspect::Snapshot;

use crate::holds::{count, holds, kind, lease, waiting};
use crate::text::{clean, fit, span};
use crate::who::Directory;

const HEADER: [&str; 5] = ["NAME", "KIND", "LEASE", "WAIT", "HELD BY"];
const GAP: &str = "  ";

/// One object's cells, in [`HEADER`]'s order.
pub(crate) type Row = [String; 5];

/// The row of `snapshot`: holders by their client's identity (`app@host:pid`; `w:`/`r:` on a
/// read-write lock, `×n` for reentrant holds), a count-like object's count instead. Every cell
/// is [`clean`]: names and holders come from Redis.
pub(crate) fn row(snapshot: &Snapshot, who: &Directory) -> Row {
    let held: Vec<String> = holds(snapshot)
        .iter()
        .map(|h| {
            let side = match h.side {
                "" => String::new(),
                side => format!("{}:", &side[..1]),
            };
            let times = if h.holds > 1 {
                format!(" ×{}", h.holds)
            } else {
                String::new()
            };
            format!("{side}{}{times}", who.short(h.client, &h.owner))
        })
        .collect();
    let held = if held.is_empty() {
        count(snapshot).unwrap_or_else(|| "-".to_owned())
    } else {
        held.join(", ")
    };
    [
        snapshot.name().to_owned(),
        kind(snapshot).to_owned(),
        lease(snapshot).map_or("-".to_owned(), span),
        waiting(snapshot).to_string(),
        held,
    ]
    .map(|cell| clean(&cell).into_owned())
}

/// The header and `rows` as lines, each at most `width` characters when given (names and
/// holders are cut first).
pub(crate) fn render(rows: &[Row], width: Option<usize>) -> Vec<String> {
    let mut widths = HEADER.map(|h| h.chars().count());
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    if let Some(width) = width {
        shrink(&mut widths, width);
    }
    let header = HEADER.map(str::to_owned);
    std::iter::once(&header)
        .chain(rows)
        .map(|row| {
            let cells: Vec<String> = row
                .iter()
                .zip(widths)
                .enumerate()
                .map(|(i, (cell, w))| {
                    let cell = fit(cell, w);
                    // The last column is not padded: no trailing blanks.
                    if i + 1 == widths.len() {
                        cell
                    } else {
                        format!("{cell:<w$}")
                    }
                })
                .collect();
            cells.join(GAP)
        })
        .collect()
}

/// Narrows the name and holders columns until the row fits `width`: the name keeps up to two
/// fifths of what is left beside the fixed columns.
fn shrink(widths: &mut [usize; 5], width: usize) {
    let total: usize = widths.iter().sum::<usize>() + GAP.len() * (widths.len() - 1);
    if total <= width {
        return;
    }
    let fixed = widths[1] + widths[2] + widths[3] + GAP.len() * (widths.len() - 1);
    let left = width.saturating_sub(fixed);
    let name = widths[0].min((left * 2 / 5).max(HEADER[0].len()));
    widths[0] = name;
    widths[4] = widths[4]
        .min(left.saturating_sub(name))
        .max(HEADER[4].len());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &str, held: &str) -> Row {
        [
            name.into(),
            "lock".into(),
            "27.5s".into(),
            "0".into(),
            held.into(),
        ]
    }

    #[test]
    fn columns_line_up() {
        let lines = render(
            &[row("orders:42", "billing@web-3:4242"), row("a", "-")],
            None,
        );
        assert_eq!(lines[0], "NAME       KIND  LEASE  WAIT  HELD BY");
        assert_eq!(lines[1], "orders:42  lock  27.5s  0     billing@web-3:4242");
        assert_eq!(lines[2], "a          lock  27.5s  0     -");
    }

    #[test]
    fn a_narrow_terminal_cuts_names_and_holders() {
        let long = "x".repeat(80);
        let lines = render(&[row(&long, &long)], Some(60));
        assert!(lines.iter().all(|l| l.chars().count() <= 60), "{lines:#?}");
        assert!(lines[1].contains('…'));
    }
}
