//! The terminal `watch` draws on: the alternate screen in raw mode, drawn with plain ANSI
//! sequences (anything `ssh -t` carries), and given back as it was on every way out: a normal
//! return, an error, a panic (a hook), a signal (the caller's loop ends, and the drop runs).

use std::io::{Stdout, Write};
use std::sync::Once;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use crossterm::style::{Attribute, Print, SetAttribute};
use crossterm::terminal::{self, Clear, ClearType, EnterAlternateScreen, LeaveAlternateScreen};
use crossterm::{cursor, execute, queue};
use tokio::sync::mpsc;

/// One line to draw, and whether it stands out (reverse video: the header).
#[derive(Debug, Clone)]
pub(crate) struct Line {
    pub(crate) text: String,
    pub(crate) strong: bool,
}

/// Whether the terminal is ours now (raw mode, alternate screen): what the panic hook checks.
static TAKEN: AtomicBool = AtomicBool::new(false);

/// The terminal, taken; given back when dropped.
#[derive(Debug)]
pub(crate) struct Screen {
    out: Stdout,
}

impl Screen {
    pub(crate) fn enter() -> std::io::Result<Screen> {
        restore_on_panic();
        let mut out = std::io::stdout();
        TAKEN.store(true, Ordering::SeqCst);
        let taken = terminal::enable_raw_mode()
            .and_then(|()| execute!(out, EnterAlternateScreen, cursor::Hide));
        match taken {
            Ok(()) => Ok(Screen { out }),
            Err(e) => {
                restore();
                Err(e)
            }
        }
    }

    /// The terminal's width and height (80×24 when it does not say).
    pub(crate) fn size(&self) -> (usize, usize) {
        terminal::size().map_or((80, 24), |(w, h)| (usize::from(w), usize::from(h)))
    }

    /// Draws `lines` from the top, each already cut to the width, and clears the rest.
    pub(crate) fn draw(&mut self, lines: &[Line]) -> std::io::Result<()> {
        for (row, line) in lines.iter().enumerate() {
            let row = u16::try_from(row).unwrap_or(u16::MAX);
            queue!(self.out, cursor::MoveTo(0, row))?;
            if line.strong {
                queue!(self.out, SetAttribute(Attribute::Reverse))?;
            }
            queue!(
                self.out,
                Print(&line.text),
                SetAttribute(Attribute::Reset),
                Clear(ClearType::UntilNewLine)
            )?;
        }
        let below = u16::try_from(lines.len()).unwrap_or(u16::MAX);
        queue!(
            self.out,
            cursor::MoveTo(0, below),
            Clear(ClearType::FromCursorDown)
        )?;
        self.out.flush()
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        restore();
    }
}

/// Gives the terminal back: cursor shown, main screen, cooked mode. Errors are ignored: there
/// is nothing better to do with a terminal that is gone.
fn restore() {
    if TAKEN.swap(false, Ordering::SeqCst) {
        let _ = execute!(std::io::stdout(), cursor::Show, LeaveAlternateScreen);
        let _ = terminal::disable_raw_mode();
    }
}

/// A panic while the terminal is taken gives it back before the message is printed, so the
/// message is readable and the shell usable.
fn restore_on_panic() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
            previous(info);
        }));
    });
}

/// What a key (or the terminal) asks of `watch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Key {
    Quit,
    /// Resized: draw again now.
    Redraw,
}

/// The keys pressed, read on a thread of their own (reading the terminal blocks).
#[derive(Debug)]
pub(crate) struct Keys {
    pressed: mpsc::UnboundedReceiver<Key>,
    stop: std::sync::Arc<AtomicBool>,
}

impl Keys {
    pub(crate) fn start() -> Keys {
        let (tx, pressed) = mpsc::unbounded_channel();
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        std::thread::spawn(move || {
            // Polled, so the thread sees `stop` within a tenth of a second.
            while !stopped.load(Ordering::SeqCst) {
                let key = match event::poll(Duration::from_millis(100)) {
                    Ok(false) => continue,
                    Ok(true) => match event::read() {
                        Ok(Event::Key(key)) if key.kind != KeyEventKind::Release => {
                            let ctrl_c = key.code == KeyCode::Char('c')
                                && key.modifiers.contains(KeyModifiers::CONTROL);
                            match key.code {
                                KeyCode::Char('q' | 'Q') | KeyCode::Esc => Key::Quit,
                                _ if ctrl_c => Key::Quit,
                                _ => continue,
                            }
                        }
                        Ok(Event::Resize(..)) => Key::Redraw,
                        Ok(_) => continue,
                        Err(_) => Key::Quit,
                    },
                    // The terminal is gone (a closed SSH session): nothing to watch on.
                    Err(_) => Key::Quit,
                };
                if tx.send(key).is_err() || key == Key::Quit {
                    break;
                }
            }
        });
        Keys { pressed, stop }
    }

    /// The next key; `Quit` when the reading thread has ended.
    pub(crate) async fn next(&mut self) -> Key {
        self.pressed.recv().await.unwrap_or(Key::Quit)
    }
}

impl Drop for Keys {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}
