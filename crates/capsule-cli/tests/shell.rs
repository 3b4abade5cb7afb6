//! `capsule shell` and `capsule run --pty`: the sandbox gets a
//! pseudo-terminal of its own, the caller's terminal is relayed, never
//! handed inside. The test plays the caller's terminal: a pseudo-terminal
//! it allocates (in its normal, cooked modes), the controlling terminal of
//! capsule's session, whose master side is the "keyboard and screen".

use capsule_testkit as common;

use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;

const T: Duration = Duration::from_secs(20);

/// The terminal modes that matter, comparable.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Modes {
    iflag: u32,
    oflag: u32,
    cflag: u32,
    lflag: u32,
    cc: Vec<u8>,
}

/// The caller's terminal: a pty pair in the modes a fresh terminal has.
struct Term {
    master: OwnedFd,
    slave: OwnedFd,
    name: String,
    out: Vec<u8>,
    cursor: usize,
}

fn term(rows: u16, cols: u16) -> Term {
    let (common::Pty { master, slave }, name) = common::open_pty_cooked();
    let t = Term { master, slave, name, out: Vec::new(), cursor: 0 };
    t.resize(rows, cols);
    t
}

/// Makes stdin (the test's pty) the controlling terminal of a new session,
/// as a login shell's terminal is; setpriv keeps it across its exec.
fn ctty_hook() -> std::io::Result<()> {
    // SAFETY: async-signal-safe calls between fork and exec.
    unsafe {
        if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

impl Term {
    /// Runs `cmd` on this terminal (stdin, stdout, stderr, controlling
    /// terminal), with TERM=dumb (no escape sequences to parse).
    fn attach<'a>(&self, cmd: &'a mut Cmd) -> &'a mut Cmd {
        let dup = || Stdio::from(self.slave.try_clone().unwrap());
        cmd.stdio(dup(), dup(), dup()).pre_exec(ctty_hook).env("TERM", "dumb")
    }

    fn modes(&self) -> Modes {
        // SAFETY: termios is plain data, filled by tcgetattr.
        let mut t: libc::termios = unsafe { std::mem::zeroed() };
        // SAFETY: valid fd and termios.
        assert_eq!(unsafe { libc::tcgetattr(self.slave.as_raw_fd(), &mut t) }, 0, "tcgetattr");
        Modes { iflag: t.c_iflag, oflag: t.c_oflag, cflag: t.c_cflag, lflag: t.c_lflag, cc: t.c_cc.to_vec() }
    }

    /// Sets the window size as a terminal emulator does when resized: the
    /// kernel sends SIGWINCH to the terminal's foreground process group.
    fn resize(&self, rows: u16, cols: u16) {
        let w = libc::winsize { ws_row: rows, ws_col: cols, ws_xpixel: 0, ws_ypixel: 0 };
        // SAFETY: TIOCSWINSZ reads one winsize.
        assert_eq!(unsafe { libc::ioctl(self.master.as_raw_fd(), libc::TIOCSWINSZ, &w) }, 0, "TIOCSWINSZ");
    }

    /// Types `s` on the keyboard.
    fn type_(&self, s: &str) {
        let mut f = std::fs::File::from(self.master.try_clone().unwrap());
        f.write_all(s.as_bytes()).unwrap();
    }

    /// Reads what the screen shows for up to `ms`; false when nothing came.
    fn pump(&mut self, ms: i32) -> bool {
        let mut pfd = libc::pollfd { fd: self.master.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd.
        if unsafe { libc::poll(&mut pfd, 1, ms) } <= 0 {
            return false;
        }
        let mut buf = [0u8; 4096];
        // SAFETY: buf is valid for its length.
        let n = unsafe { libc::read(self.master.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            std::thread::sleep(Duration::from_millis(ms as u64));
            return false;
        }
        self.out.extend_from_slice(&buf[..n as usize]);
        true
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.out).into_owned()
    }

    /// Waits until `pat` is on the screen after what was already matched;
    /// returns the text up to its end and moves past it.
    #[track_caller]
    fn expect(&mut self, pat: &str, t: Duration) -> String {
        let deadline = Instant::now() + t;
        loop {
            let seen = String::from_utf8_lossy(&self.out[self.cursor..]).into_owned();
            if let Some(at) = seen.find(pat) {
                let upto = at + pat.len();
                self.cursor += upto;
                return seen[..upto].to_string();
            }
            assert!(
                Instant::now() < deadline,
                "`{pat}` not on the screen within {t:?}; screen so far:\n{}",
                self.text()
            );
            self.pump(50);
        }
    }

    /// The value of a `key=value` line the program printed (typed commands
    /// print with printf '%s=%s', so their echo never matches).
    #[track_caller]
    fn value(&mut self, key: &str) -> String {
        self.expect(&format!("{key}="), T);
        let v = self.expect("\r\n", T);
        v.trim_end_matches("\r\n").to_string()
    }

    /// Waits for capsule to exit, reading the screen meanwhile (a full pty
    /// would block its writes), then for the rest of the screen.
    fn finish(&mut self, mut r: Running) -> Out {
        let deadline = Instant::now() + RUN_TIMEOUT;
        while r.alive() {
            assert!(Instant::now() < deadline, "capsule did not exit; screen:\n{}", self.text());
            self.pump(20);
        }
        while self.pump(50) {}
        r.wait()
    }
}

/// The 7th field of /proc/PID/stat: the controlling terminal's device.
fn tty_nr(pid: i32) -> String {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    after.split(' ').nth(4).unwrap().to_string()
}

fn assert_raw(m: &Modes, screen: &str) {
    let cooked = libc::ICANON | libc::ECHO | libc::ISIG;
    assert_eq!(
        m.lflag & cooked,
        0,
        "the caller's terminal is not in raw mode while the shell runs: {m:?}; screen:\n{screen}"
    );
    assert_eq!(m.oflag & libc::OPOST, 0, "output processing still on: {m:?}");
}

/// The whole interactive session: a shell on a pty of its own (not the
/// caller's), the prompt prefix, commands and their output, the window
/// size before and after a resize, ^C ending a `sleep` inside while capsule
/// lives on, the environment passed through, `exit 3` as capsule's exit
/// status, and the caller's modes restored before the summary line.
#[test]
fn shell_session() {
    require!("shell_session", userns_available());
    let mut t = term(33, 97);
    let before = t.modes();
    assert_ne!(before.lflag & libc::ICANON, 0, "the test terminal should start cooked");
    let mut c = capsule(&["shell"]);
    t.attach(&mut c).env("SHELL", "/bin/bash").env("LANG", "C.UTF-8");
    let r = c.spawn();
    let capsule_pid = r.pid();
    t.expect("(capsule) ", T);
    assert_raw(&t.modes(), &t.text());

    t.type_("printf '%s=%s\\n' hi $((6*7))\r");
    assert_eq!(t.value("hi"), "42");
    t.type_("[ -t 0 ] && [ -t 1 ] && [ -t 2 ] && printf '%s=%s\\n' tty yes\r");
    assert_eq!(t.value("tty"), "yes", "stdin, stdout and stderr are terminals inside");
    // Its controlling terminal is a pty of its own: another device than
    // the caller's (capsule's own controlling terminal), another path.
    t.type_("read -r _ _ _ _ _ _ n _ < /proc/self/stat; printf '%s=%s\\n' ttynr \"$n\"\r");
    let inner = t.value("ttynr");
    let outer = tty_nr(capsule_pid);
    assert_ne!(outer, "0", "the test terminal should be capsule's controlling terminal");
    assert_ne!(inner, "0", "the shell has no controlling terminal; screen:\n{}", t.text());
    assert_ne!(inner, outer, "the shell's controlling terminal is the caller's");
    t.type_("printf '%s=%s\\n' fd0 \"$(readlink /proc/self/fd/0)\"\r");
    let fd0 = t.value("fd0");
    assert!(fd0.contains("pts"), "stdin inside is not a pty: {fd0}");
    assert_ne!(fd0, t.name, "stdin inside is the caller's terminal");
    eprintln!("caller's terminal {} (tty_nr {outer}); inside: {fd0} (tty_nr {inner})", t.name);

    // Window size: the caller's at the start, and after a resize.
    t.type_("printf '%s=%s\\n' size \"$(stty size)\"\r");
    assert_eq!(t.value("size"), "33 97");
    t.resize(40, 120);
    t.type_("printf '%s=%s\\n' size \"$(stty size)\"\r");
    assert_eq!(t.value("size"), "40 120", "the resize did not reach the shell's terminal");

    t.type_("printf '%s=%s,%s\\n' env \"$TERM\" \"$LANG\"\r");
    assert_eq!(t.value("env"), "dumb,C.UTF-8");

    // ^C: the pty's SIGINT to the shell's foreground job, not to capsule.
    let secs = format!("{}.25", 4000 + std::process::id() % 1000);
    let _guard = MarkerGuard(secs.clone());
    t.type_(&format!("sleep {secs}\r"));
    wait_marker(&secs, T);
    t.type_("\x03");
    if let Err(left) = wait_marker_gone(&secs, Instant::now(), Duration::from_secs(10)) {
        panic!("^C did not end the sleep inside: {left:?}; screen:\n{}", t.text());
    }
    t.expect("(capsule) ", T);
    t.type_("printf '%s=%s\\n' st \"$?\"\r");
    assert_eq!(t.value("st"), "130", "the sleep did not die of SIGINT");
    let mut r = r;
    assert!(r.alive(), "^C ended capsule");

    t.type_("exit 3\r");
    let out = t.finish(r);
    out.assert_code(3);
    assert_eq!(t.modes(), before, "the caller's terminal modes were not restored");
    // Written after the restore: the terminal's own output processing made
    // its newline "\r\n" (in raw mode it would be a bare "\n").
    let rest = String::from_utf8_lossy(&t.out[t.cursor..]).into_owned();
    let at =
        rest.find("capsule: exited with 3 after").unwrap_or_else(|| panic!("no summary line; screen:\n{}", t.text()));
    let line_end = rest[at..].find('\n').map(|i| at + i).expect("summary line ends");
    assert_eq!(&rest[line_end - 1..=line_end], "\r\n", "summary written before the modes were restored: {rest:?}");
}

/// `capsule run --pty`: the program has the pty as its controlling
/// terminal, and TIOCSTI on it still fails under the default seccomp
/// policy; nothing reaches the caller's terminal either way. The control
/// run without a filter (where the kernel allows TIOCSTI on one's own
/// terminal) shows the EPERM is the policy's, and that an injection lands
/// in the run's own terminal, never the caller's.
#[test]
fn run_pty_and_tiocsti() {
    require!("run_pty_and_tiocsti", userns_available());
    let legacy = std::fs::read_to_string("/proc/sys/dev/tty/legacy_tiocsti")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "absent".into());
    for policy in ["default", "none"] {
        let mut t = term(24, 80);
        let before = t.modes();
        let mut c = run_probe(&["--pty", "--seccomp", policy], &["tiocsti", "id\n"]);
        t.attach(&mut c);
        let r = c.spawn();
        let out = t.finish(r);
        let screen = t.text();
        out.assert_code(0);
        assert_eq!(out.status(), "exited", "{}", out.describe());
        let kv = Kv::parse(&screen);
        assert_eq!(kv.get("done"), Some("1"), "probe output:\n{screen}");
        assert_eq!(kv.must("isatty0"), "1", "{screen}");
        assert_ne!(kv.must("tty_nr"), "0", "the program has no controlling terminal: {screen}");
        assert_eq!(
            kv.must("tcgetsid"),
            kv.must("sid"),
            "the pty is not the terminal of the program's session: {screen}"
        );
        assert_eq!(t.modes(), before, "modes not restored");
        assert_eq!(
            input_queue(t.slave.as_raw_fd()),
            0,
            "{policy}: bytes injected into the caller's terminal; {screen}"
        );
        if policy == "default" {
            for fd in 0..3 {
                assert_eq!(kv.must(&format!("tiocsti_fd{fd}")), "EPERM", "TIOCSTI on fd {fd}: {screen}");
            }
            assert_eq!(kv.must("tiocsti_after_sctty"), "EPERM", "{screen}");
        } else if legacy == "1" {
            assert_eq!(
                kv.must("tiocsti_fd0"),
                "ok",
                "control: TIOCSTI on the run's own terminal without a filter: {screen}"
            );
        } else {
            eprintln!(
                "run_pty_and_tiocsti: dev.tty.legacy_tiocsti = {legacy}: the kernel refuses TIOCSTI anyway, no control"
            );
        }
    }
}

/// A PROGRAM instead of the shell, on the pty: its exit status, the
/// prompt in the environment; with --no-pty the caller's terminal is
/// inherited as `capsule run` does it (no controlling terminal inside,
/// modes untouched).
#[test]
fn shell_program_and_no_pty() {
    require!("shell_program_and_no_pty", userns_available());
    let mut t = term(24, 80);
    let before = t.modes();
    let script = "[ -t 0 ] && printf 'tty=%s\\n' yes; read -r _ _ _ _ _ _ n _ < /proc/self/stat; printf 'ttynr=%s\\n' \"$n\"; printf 'ps1=%s\\n' \"$PS1\"; exit 5";
    let mut c = capsule(&["shell", "-q", "--", "/bin/sh", "-c", script]);
    t.attach(&mut c);
    let r = c.spawn();
    let out = t.finish(r);
    out.assert_code(5);
    assert_eq!(t.value("tty"), "yes");
    assert_ne!(t.value("ttynr"), "0");
    assert_eq!(t.value("ps1"), "(capsule) $ ");
    assert_eq!(t.modes(), before);

    let mut c = capsule(&["shell", "-q", "--no-pty", "--", "/bin/sh", "-c", script]);
    t.attach(&mut c);
    let r = c.spawn();
    let out = t.finish(r);
    out.assert_code(5);
    assert_eq!(t.value("tty"), "yes");
    assert_eq!(
        t.value("ttynr"),
        "0",
        "--no-pty: the inherited terminal must not be the program's controlling terminal"
    );
}

/// `capsule shell` with stdin a pipe: no pty, the shell reads its commands
/// from stdin; the shell is picked inside the sandbox: $SHELL when it is
/// there, else /bin/bash, else /bin/sh.
#[test]
fn shell_without_terminal() {
    require!("shell_without_terminal", userns_available());
    let cases: [(&str, &[&str], &str); 4] = [
        ("/bin/bash", &[], "/bin/bash"),
        ("/bin/dash", &[], "/bin/dash"),
        ("/no/such/shell", &[], "/bin/bash"),
        ("/no/such/shell", &["--hide", "/usr/bin/bash"], "/bin/sh"),
    ];
    for (shell, opts, expect) in cases {
        let mut c = capsule(&["shell", "-q"]);
        c.args(opts).env("SHELL", shell).stdio(Stdio::piped(), Stdio::piped(), Stdio::piped());
        let mut r = c.spawn();
        let mut stdin = r.child.stdin.take().unwrap();
        stdin.write_all(b"echo hi\nprintf 'zero=%s shell=%s\\n' \"$0\" \"$SHELL\"\n[ -t 0 ] || echo no-tty\n").unwrap();
        drop(stdin);
        let out = r.wait();
        out.assert_code(0);
        assert!(out.stdout.starts_with("hi\n"), "{}", out.describe());
        assert!(
            out.stdout.contains(&format!("zero={expect} shell={expect}\n")),
            "SHELL={shell} {opts:?}: {}",
            out.describe()
        );
        assert!(out.stdout.contains("no-tty\n"), "{}", out.describe());
    }
    // Without /bin/sh no shell can be picked: the error says how to name one.
    let mut c = capsule(&["shell", "--empty-root"]);
    let out = c.run();
    out.assert_code(125);
    assert!(out.stderr.contains("capsule shell -- PROGRAM"), "{}", out.describe());
}

/// --pty needs a terminal as stdin; the errors name the problem.
#[test]
fn pty_errors() {
    for (args, msg) in [
        (&["run", "--pty", "--", "/bin/true"][..], "--pty: standard input is not a terminal"),
        (&["shell", "--pty"][..], "--pty: standard input is not a terminal"),
        (&["run", "--pty", "--stdin", "/etc/hostname", "--", "/bin/true"][..], "--pty: the run's stdin is a file"),
        (&["run", "--pty", "--no-pty", "--", "/bin/true"][..], "--no-pty"),
    ] {
        let out = capsule(args).run();
        out.assert_code(125);
        assert!(out.stderr.contains(msg), "{args:?}: expected `{msg}`; {}", out.describe());
    }
}

/// The spec's `controlling_tty` through the JSON-lines protocol, whose
/// stdin is `/dev/null` or a file: the tracee's TIOCSCTTY step fails and
/// says why; with `stdin` a file the spec is refused before any run.
#[test]
fn controlling_tty_needs_a_terminal() {
    require!("controlling_tty_needs_a_terminal", userns_available());
    let mut c = capsule(&["serve"]);
    c.stdio(Stdio::piped(), Stdio::piped(), Stdio::piped());
    let mut r = c.spawn();
    let mut stdin = r.child.stdin.take().unwrap();
    stdin
        .write_all(
            concat!(
                r#"{"id": 1, "spec": {"argv": ["/bin/true"], "controlling_tty": true}}"#,
                "\n",
                r#"{"id": 2, "spec": {"argv": ["/bin/true"], "controlling_tty": true, "stdin": "/etc/hostname"}}"#,
                "\n",
                r#"{"id": 3, "spec": {"argv": ["/bin/true"]}}"#,
                "\n"
            )
            .as_bytes(),
        )
        .unwrap();
    drop(stdin);
    let out = r.wait();
    out.assert_code(0);
    let lines: Vec<serde_json::Value> = out.stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let by_id =
        |id: i64| lines.iter().find(|v| v["id"] == id).unwrap_or_else(|| panic!("no answer {id}; {}", out.describe()));
    // A run that could not start is answered with its error.
    let err = by_id(1)["error"].as_str().unwrap_or_else(|| panic!("run 1 started; {}", out.describe()));
    assert!(err.contains("TIOCSCTTY") && err.contains("ENOTTY") && err.contains("not a terminal"), "{err}");
    let two = by_id(2)["error"].as_str().unwrap_or_else(|| panic!("spec 2 accepted; {}", out.describe()));
    assert!(two.contains("controlling_tty"), "{two}");
    assert_eq!(by_id(3)["result"]["status"], "exited", "{}", out.describe());
}

/// SIGTERM to capsule while the shell runs: the caller's modes are
/// restored, capsule dies of the signal (as without a pty), and the run
/// ends with it.
#[test]
fn signal_restores_terminal() {
    require!("signal_restores_terminal", userns_available());
    let mut t = term(24, 80);
    let before = t.modes();
    let mut c = capsule(&["shell"]);
    t.attach(&mut c).env("SHELL", "/bin/bash");
    let r = c.spawn();
    t.expect("(capsule) ", T);
    assert_raw(&t.modes(), &t.text());
    let secs = format!("{}.75", 5000 + std::process::id() % 1000);
    let _guard = MarkerGuard(secs.clone());
    t.type_(&format!("sleep {secs}\r"));
    wait_marker(&secs, T);
    // SAFETY: kill takes no pointers.
    assert_eq!(unsafe { libc::kill(r.pid(), libc::SIGTERM) }, 0);
    let out = t.finish(r);
    assert_eq!(out.signal, Some(libc::SIGTERM), "{}", out.describe());
    assert_eq!(t.modes(), before, "SIGTERM left the caller's terminal raw");
    if let Err(left) = wait_marker_gone(&secs, Instant::now(), Duration::from_secs(10)) {
        panic!("the run outlived capsule: {left:?}");
    }
}
