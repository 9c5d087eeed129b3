//! `watch [PATTERN] [--interval SECS]`: the list table and the live clients, refreshed like
//! `top` until q, Esc or Ctrl-C (or SIGINT, SIGTERM, SIGHUP or SIGQUIT, or the terminal going
//! away).

use std::io::IsTerminal;
use std::time::Duration;

use ferrisson::Client;
use ferrisson::inspect::Snapshot;
use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::fail::{Code, Failure};
use crate::holds::{holds, is_held, waiting};
use crate::screen::{Key, Keys, Line, Screen};
use crate::table::{render, row};
use crate::text::{clean, clock_utc, fit, span};
use crate::who::Directory;

/// What the screen shows: the last read, and the last refresh's failure if it failed.
struct View<'a> {
    pattern: &'a str,
    interval: Duration,
    server: &'a str,
    found: Vec<Snapshot>,
    who: Directory,
    /// When the shown read was made.
    read_at: String,
    failed: Option<String>,
}

/// `watch` draws on a terminal and reads keys from one: checked before connecting.
pub(crate) fn needs_terminal() -> Result<(), Failure> {
    if std::io::stdout().is_terminal() && std::io::stdin().is_terminal() {
        return Ok(());
    }
    Err(Failure::new(
        Code::TERMINAL,
        "watch draws on a terminal, and stdin or stdout is none; `ferrisson list` prints the \
         same table once",
    ))
}

/// Draws until a key, a signal or a lost terminal ends it.
pub(crate) async fn watch(
    client: &Client,
    pattern: &str,
    interval: Duration,
    server: &str,
) -> Result<Code, Failure> {
    // The first read before the screen is taken: a server refusing it is an ordinary failure.
    let (found, who) = read(client, pattern).await?;
    let mut view = View {
        pattern,
        interval,
        server,
        found,
        who,
        read_at: clock_utc(),
        failed: None,
    };
    let terminal = |e: std::io::Error| {
        Failure::new(Code::TERMINAL, format!("cannot draw on the terminal: {e}"))
    };
    let mut signals = Quitting::listen().map_err(terminal)?;
    let mut screen = Screen::enter().map_err(terminal)?;
    let mut keys = Keys::start();
    loop {
        screen.draw(&view.lines(screen.size())).map_err(terminal)?;
        let key = tokio::select! {
            key = keys.next() => Some(key),
            _ = tokio::time::sleep(interval) => None,
            () = signals.recv() => Some(Key::Quit),
        };
        match key {
            Some(Key::Quit) => break,
            Some(Key::Redraw) => continue,
            None => {}
        }
        // A key pressed during a slow read is not kept waiting for it (a read can be dropped
        // at any point: it only reads).
        tokio::select! {
            biased;
            key = keys.next() => if key == Key::Quit { break },
            () = signals.recv() => break,
            read = read(client, pattern) => view.update(read),
        }
    }
    drop(keys);
    drop(screen);
    Ok(Code::Done)
}

/// The signals that end `watch`: SIGINT, SIGTERM, SIGHUP, SIGQUIT. In raw mode Ctrl-C is a
/// key, not SIGINT, so these come from outside (`kill`, a closed session). Handled, each ends
/// the loop and the terminal is given back before the exit; their default action would kill
/// the process with the terminal left raw, on the alternate screen.
struct Quitting(Vec<Signal>);

impl Quitting {
    fn listen() -> std::io::Result<Quitting> {
        let kinds = [
            SignalKind::interrupt(),
            SignalKind::terminate(),
            SignalKind::hangup(),
            SignalKind::quit(),
        ];
        kinds
            .into_iter()
            .map(signal)
            .collect::<std::io::Result<_>>()
            .map(Quitting)
    }

    /// Returns when one of them arrives (or never, should the first to answer have no more
    /// to give: tokio ends a signal stream only with its runtime).
    async fn recv(&mut self) {
        let each = self.0.iter_mut().map(|s| Box::pin(s.recv()));
        if futures::future::select_all(each).await.0.is_none() {
            std::future::pending::<()>().await;
        }
    }
}

async fn read(client: &Client, pattern: &str) -> ferrisson::Result<(Vec<Snapshot>, Directory)> {
    futures::try_join!(client.inspect_matching(pattern), Directory::all(client))
}

impl View<'_> {
    fn update(&mut self, read: ferrisson::Result<(Vec<Snapshot>, Directory)>) {
        match read {
            Ok((found, who)) => {
                (self.found, self.who) = (found, who);
                self.read_at = clock_utc();
                self.failed = None;
            }
            Err(e) => self.failed = Some(e.to_string()),
        }
    }

    /// The screen's lines for a terminal `width` × `height`: a header, a summary, the table,
    /// then the clients if they fit below it. Every line is [`clean`] before it is cut: names,
    /// identities and a server's error come from Redis, and a control character drawn raw
    /// would move the cursor or retitle the window.
    fn lines(&self, (width, height): (usize, usize)) -> Vec<Line> {
        let plain = |text: String| Line {
            text: fit(&clean(&text), width),
            strong: false,
        };
        let title = format!(
            " ferrisson watch  {}  pattern {}  every {}  {}",
            self.server,
            self.pattern,
            span(self.interval),
            self.read_at
        );
        let quit = "q: quit ";
        let room = width.saturating_sub(quit.len());
        let mut lines = vec![Line {
            text: format!("{:<room$}{quit}", fit(&clean(&title), room)),
            strong: true,
        }];
        lines.push(plain(match &self.failed {
            Some(e) => format!("refresh failed, showing the last read ({e}); retrying"),
            None => self.summary(),
        }));
        lines.push(plain(String::new()));

        let rows: Vec<_> = self.found.iter().map(|s| row(s, &self.who)).collect();
        let table = render(&rows, Some(width));
        let clients = self.clients();
        let room = height.saturating_sub(lines.len());
        let with_clients = table.len() + 1 + clients.len();
        let shown_rows = if with_clients <= room {
            table.len()
        } else {
            // The table first; the clients keep their place only if the table still shows
            // a few rows beside them.
            let beside = room.saturating_sub(1 + clients.len());
            let rows = if beside >= 6 { beside } else { room };
            rows.saturating_sub(1).max(1).min(table.len())
        };
        let hidden = table.len() - shown_rows;
        lines.extend(table.into_iter().take(shown_rows).map(plain));
        if hidden > 0 {
            lines.push(plain(format!(
                "… {hidden} more (a taller terminal or a narrower pattern shows them)"
            )));
        }
        if lines.len() + 1 + clients.len() <= height {
            lines.push(plain(String::new()));
            lines.extend(clients.into_iter().map(plain));
        }
        lines.truncate(height);
        lines
    }

    fn summary(&self) -> String {
        let held = self.found.iter().filter(|s| is_held(s)).count();
        let waited = self.found.iter().filter(|s| waiting(s) > 0).count();
        let clients = self.who.list();
        let silent = clients.iter().filter(|c| !c.is_live()).count();
        let also = match silent {
            0 => String::new(),
            n => format!(", {n} silent"),
        };
        format!(
            "{} object(s), {held} held, {waited} with waiters; {} live client(s){also}",
            self.found.len(),
            clients.len() - silent
        )
    }

    /// The clients section: a header, then one line per client with its holds counted, and
    /// how long it has been silent after its id when it stopped beating.
    fn clients(&self) -> Vec<String> {
        let mut lines =
            vec!["CLIENT                         VERSION  UP      HOLDS  ID".to_owned()];
        for c in self.who.list() {
            let held = self
                .found
                .iter()
                .flat_map(holds)
                .filter(|h| h.client == Some(c.id))
                .count();
            let this = if self.who.is_own(c.id) { " (this)" } else { "" };
            let name = format!("{}@{}:{}{this}", c.app, c.host, c.pid);
            let silent = match c.is_live() {
                true => String::new(),
                false => format!("  silent {}", span(c.silent_for)),
            };
            lines.push(format!(
                "{:<30} {:<8} {:<7} {:<6} {}{silent}",
                fit(&clean(&name), 30),
                clean(&c.version),
                span(c.age),
                held,
                c.id
            ));
        }
        lines
    }
}
