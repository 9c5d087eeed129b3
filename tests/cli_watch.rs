//! `ferrisson watch` and `force-unlock`'s question in a real terminal: tmux runs the tool in a
//! detached 140×40 pane, `capture-pane` reads what it drew, `send-keys` types. The table
//! follows a lock taken and released by the test; `q`, Ctrl-C, and SIGINT or SIGQUIT from
//! `kill` quit with 0, and the terminal is given back every time (main screen, cursor shown,
//! cooked mode), a failing server included. `force-unlock` asks, and refuses when the holders
//! changed before the answer. tmux is required: without it these tests fail, saying how to
//! install it.

#![cfg(feature = "cli")]

mod support;

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use support::{HolderProcess, RedisServer};

const BIN: &str = env!("CARGO_BIN_EXE_ferrisson");

/// One tmux server of the test's own (its own socket), running one command in one pane; the
/// server is killed on drop.
struct Pane {
    socket: String,
    dir: Scratch,
}

/// A directory (or a file) removed on drop.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
        let _ = std::fs::remove_file(&self.0);
    }
}

impl Pane {
    /// Runs `command` (a shell command line) in a new 140×40 pane; once it ends, the pane
    /// writes its exit status to `exit` and the terminal's modes (`stty -a`) to `stty`, and
    /// stays open, so what is left on the screen can be read.
    fn start(command: &str) -> Pane {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::SeqCst);
        let socket = format!("ferrisson-test-{}-{n}", std::process::id());
        let dir = std::env::temp_dir().join(&socket);
        std::fs::create_dir_all(&dir).unwrap();
        let dir = Scratch(dir);
        let exit = dir.0.join("exit");
        let stty = dir.0.join("stty");
        let line = format!(
            "{command}; echo EXIT=$? > {}; stty -a > {}; sleep 60",
            exit.display(),
            stty.display()
        );
        // As the server: installed as root when missing, else a failure saying how.
        support::server::ensure_program("tmux", "these tests drive the tool in a real terminal");
        let pane = Pane { socket, dir };
        pane.tmux(&[
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-s",
            "t",
            "-x",
            "140",
            "-y",
            "40",
            &line,
        ]);
        pane
    }

    fn tmux(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .env_remove("TMUX")
            .output()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run tmux ({e}): these tests drive the tool in a real terminal; \
                     install it with `apt-get install -y tmux`"
                )
            });
        assert!(
            out.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// What the pane shows now.
    fn screen(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-t", "t"])
    }

    /// A tmux format of the pane: `#{alternate_on}`, `#{cursor_flag}`.
    fn flag(&self, format: &str) -> String {
        self.tmux(&["display-message", "-p", "-t", "t", format])
            .trim()
            .to_owned()
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "t"];
        args.extend_from_slice(keys);
        self.tmux(&args);
    }

    /// Waits (at most `within`) until the screen satisfies `check`; returns that screen.
    fn until(&self, within: Duration, what: &str, check: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + within;
        loop {
            let screen = self.screen();
            if check(&screen) {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: not on the screen within {within:?}:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn file(&self, name: &str) -> Option<String> {
        std::fs::read_to_string(self.dir.0.join(name)).ok()
    }

    /// The command's exit status, once it has ended (at most `within`).
    fn exit(&self, within: Duration) -> i32 {
        let deadline = Instant::now() + within;
        loop {
            if let Some(text) = self.file("exit").filter(|t| t.ends_with('\n')) {
                return text
                    .trim()
                    .strip_prefix("EXIT=")
                    .and_then(|c| c.parse().ok())
                    .unwrap_or_else(|| panic!("exit file: {text:?}"));
            }
            assert!(
                Instant::now() < deadline,
                "the command did not end within {within:?}:\n{}",
                self.screen()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// After the command ended: the terminal is as a shell needs it.
    fn assert_given_back(&self) {
        let deadline = Instant::now() + Duration::from_secs(5);
        let stty = loop {
            if let Some(text) = self.file("stty").filter(|t| t.contains("icanon")) {
                break text;
            }
            assert!(Instant::now() < deadline, "no stty output");
            std::thread::sleep(Duration::from_millis(50));
        };
        let modes: Vec<&str> = stty.split_whitespace().collect();
        for mode in ["icanon", "echo", "isig"] {
            assert!(
                modes.contains(&mode),
                "{mode} is off after the tool:\n{stty}"
            );
        }
        assert_eq!(
            self.flag("#{alternate_on}"),
            "0",
            "still on the alternate screen"
        );
        assert_eq!(self.flag("#{cursor_flag}"), "1", "the cursor is hidden");
    }
}

impl Drop for Pane {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .output();
    }
}

fn watch(url: &str, extra: &str) -> String {
    format!("{BIN} watch --url {url} --interval 0.2 {extra}")
}

/// The line of the table that starts with `name`.
fn row<'a>(screen: &'a str, name: &str) -> Option<&'a str> {
    screen.lines().find(|l| l.starts_with(&format!("{name} ")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_follows_a_lock_and_q_gives_the_terminal_back() {
    let server = RedisServer::start();
    let client = support::builder(&server)
        .app_name("billing")
        .build()
        .await
        .unwrap();
    let pane = Pane::start(&watch(&server.url(), ""));
    let first = pane.until(Duration::from_secs(10), "the header", |s| {
        s.contains("ferrisson watch") && s.contains("ferrisson-cli")
    });
    assert!(
        first.contains("NAME") && first.contains("HELD BY"),
        "{first}"
    );
    assert!(first.contains("CLIENT"), "the clients section: {first}");
    assert!(
        first.contains("billing@"),
        "a live client is listed: {first}"
    );
    assert_eq!(
        pane.flag("#{alternate_on}"),
        "1",
        "drawn on the alternate screen"
    );

    let guard = client.get_lock("orders:42").lock().await.unwrap();
    let held = pane.until(Duration::from_secs(5), "the held lock's row", |s| {
        row(s, "orders:42").is_some_and(|r| r.contains("billing@"))
    });
    assert!(
        row(&held, "orders:42").unwrap().contains(" lock "),
        "{held}"
    );
    let reading = client
        .get_read_write_lock("catalog")
        .read_lock()
        .lock()
        .await
        .unwrap();
    pane.until(Duration::from_secs(5), "the read lock's row", |s| {
        row(s, "catalog").is_some_and(|r| r.contains("rwlock/r") && r.contains("r:billing@"))
    });

    guard.unlock().await.unwrap();
    let freed = pane.until(Duration::from_secs(5), "the released lock gone", |s| {
        row(s, "orders:42").is_none()
    });
    assert!(row(&freed, "catalog").is_some(), "{freed}");
    reading.unlock().await.unwrap();

    pane.keys(&["q"]);
    assert_eq!(pane.exit(Duration::from_secs(5)), 0);
    pane.assert_given_back();
    assert!(
        !pane.screen().contains("ferrisson watch"),
        "the table stays on the alternate screen, not in the shell's"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_server_is_shown_and_ctrl_c_quits() {
    let mut server = RedisServer::start();
    let pane = Pane::start(&watch(&server.url(), "--timeout 1"));
    pane.until(Duration::from_secs(10), "the header", |s| {
        s.contains("ferrisson watch")
    });
    server.kill();
    pane.until(Duration::from_secs(10), "the failed refresh", |s| {
        s.contains("refresh failed")
    });
    pane.keys(&["C-c"]);
    assert_eq!(pane.exit(Duration::from_secs(5)), 0);
    pane.assert_given_back();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_from_outside_quit_and_give_the_terminal_back() {
    let server = RedisServer::start();
    // In raw mode Ctrl-C sends no SIGINT: these come from `kill`, as a supervisor's would.
    for signal in ["INT", "QUIT"] {
        let pid_file = Scratch(std::env::temp_dir().join(format!(
            "ferrisson-watch-{}-{signal}.pid",
            std::process::id()
        )));
        // `exec`: the pid the shell writes is the tool's.
        let pane = Pane::start(&format!(
            "sh -c 'echo $$ > {}; exec {}'",
            pid_file.0.display(),
            watch(&server.url(), "")
        ));
        pane.until(Duration::from_secs(10), "the header", |s| {
            s.contains("ferrisson watch") && s.contains("ferrisson-cli")
        });
        let pid = std::fs::read_to_string(&pid_file.0).expect("the pid file");
        let killed = Command::new("kill")
            .args([format!("-{signal}"), pid.trim().to_owned()])
            .status()
            .expect("the kill command runs");
        assert!(killed.success(), "kill -{signal} {pid}");
        assert_eq!(pane.exit(Duration::from_secs(5)), 0, "after SIG{signal}");
        pane.assert_given_back();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_asks_on_the_terminal() {
    let server = RedisServer::start();
    let mut holder = HolderProcess::spawn(&server, "stuck", 30_000, "lock");
    holder.locked(Duration::from_secs(10)).await;
    let url = server.url();
    let ask = format!("{BIN} --url {url} force-unlock stuck");

    let declined = Pane::start(&ask);
    declined.until(Duration::from_secs(10), "the question", |s| {
        s.contains("Force-unlock stuck (lock) held by ferrisson-test-holder@")
            && s.contains("[y/N]")
    });
    declined.keys(&["n", "Enter"]);
    assert_eq!(declined.exit(Duration::from_secs(5)), 5);
    let client = support::client(&server).await;
    assert!(client.get_lock("stuck").is_locked().await.unwrap());

    let accepted = Pane::start(&ask);
    accepted.until(Duration::from_secs(10), "the question", |s| {
        s.contains("[y/N]")
    });
    accepted.keys(&["y", "Enter"]);
    assert_eq!(accepted.exit(Duration::from_secs(5)), 0);
    assert_eq!(holder.exit_code(Duration::from_secs(5)).await, Some(3));
    assert!(!client.get_lock("stuck").is_locked().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_refuses_when_the_holders_changed_while_it_asked() {
    let server = RedisServer::start();
    let client = |app: &'static str| support::builder(&server).app_name(app).build();
    let (first, second) = (
        client("first").await.unwrap(),
        client("second").await.unwrap(),
    );
    let guard = first.get_lock("stuck").lock().await.unwrap();
    let ask = format!("{BIN} --url {} force-unlock stuck", server.url());

    // Asked about `first`; meanwhile `first` lets go and `second` takes it: a yes about
    // `first` must not take the lock from `second`.
    let changed = Pane::start(&ask);
    changed.until(Duration::from_secs(10), "the question", |s| {
        s.contains("Force-unlock stuck (lock) held by first@") && s.contains("[y/N]")
    });
    guard.unlock().await.unwrap();
    let taken = second.get_lock("stuck").lock().await.unwrap();
    changed.keys(&["y", "Enter"]);
    assert_eq!(changed.exit(Duration::from_secs(5)), 5);
    changed.until(
        Duration::from_secs(5),
        "the refusal naming the new holder",
        |s| s.contains("the holders changed while you decided: now stuck (lock) held by second@"),
    );
    let now = second.get_lock("stuck").snapshot().await.unwrap();
    assert_eq!(now.holders.len(), 1, "{now:?}");
    assert_eq!(
        now.holders[0].client,
        Some(second.id()),
        "still held by second"
    );
    assert!(!taken.is_lost(), "second's guard was told its hold is lost");

    // Released meanwhile, and nobody took it: nothing to unlock, exit 1.
    let released = Pane::start(&ask);
    released.until(Duration::from_secs(10), "the question", |s| {
        s.contains("held by second@") && s.contains("[y/N]")
    });
    taken.unlock().await.unwrap();
    released.keys(&["y", "Enter"]);
    assert_eq!(released.exit(Duration::from_secs(5)), 1);
    released.until(Duration::from_secs(5), "nothing to unlock", |s| {
        s.contains("stuck was released meanwhile: nothing to unlock")
    });
}

#[test]
fn watch_refuses_without_a_terminal() {
    let out = Command::new(BIN)
        .args(["watch", "--url", "redis://127.0.0.1:1"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    // No connection is tried first: the terminal is checked before.
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(
        said.contains("terminal") && said.contains("ferrisson list"),
        "{said}"
    );
}
