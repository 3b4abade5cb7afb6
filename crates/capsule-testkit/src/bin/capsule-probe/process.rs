//! The probe's view of its own process: ids, limits, descriptors, stdio,
//! the terminal.

use std::ffi::CStr;
use std::io::{self, Write};

use crate::{cstr, die, errno, errno_name, io_res, out, res};

pub(crate) fn cmd_write_bytes(n: u64, path: Option<&str>) {
    let mut w: Box<dyn Write> = match path {
        Some(p) => match std::fs::File::create(p) {
            Ok(f) => Box::new(f),
            Err(e) => {
                out("open", io_res::<()>(&Err(e)));
                std::process::exit(3)
            }
        },
        None => Box::new(io::stdout().lock()),
    };
    let chunk = vec![b'x'; 64 * 1024];
    let mut written = 0u64;
    let mut result = "ok".to_string();
    while written < n {
        let len = (n - written).min(chunk.len() as u64) as usize;
        match w.write(&chunk[..len]) {
            Ok(0) => {
                result = "short".into();
                break;
            }
            Ok(k) => written += k as u64,
            Err(e) => {
                result = io_res::<()>(&Err(e));
                break;
            }
        }
    }
    let _ = w.flush();
    drop(w);
    // Reported on stderr when writing to stdout, so the count does not
    // disturb the byte stream.
    if path.is_some() {
        out("written", written);
        out("write", result);
    } else {
        eprintln!("written={written}\nwrite={result}");
    }
}

pub(crate) fn status_fields() -> Vec<(String, String)> {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines().filter_map(|l| l.split_once(':')).map(|(k, v)| (k.trim().to_string(), v.trim().to_string())).collect()
}

pub(crate) fn cmd_ids() {
    // SAFETY: these getters cannot fail.
    let (uid, euid, gid, egid, pid, ppid) =
        unsafe { (libc::getuid(), libc::geteuid(), libc::getgid(), libc::getegid(), libc::getpid(), libc::getppid()) };
    out("uid", uid);
    out("euid", euid);
    out("gid", gid);
    out("egid", egid);
    out("pid", pid);
    out("ppid", ppid);
    // SAFETY: getsid(0)/getpgid(0) query the calling process.
    out("sid", unsafe { libc::getsid(0) });
    // SAFETY: as above.
    out("pgid", unsafe { libc::getpgid(0) });
    // SAFETY: PR_GET_DUMPABLE / PR_GET_NO_NEW_PRIVS take no pointers.
    out("dumpable", unsafe { libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0) });
    // SAFETY: as above.
    out("no_new_privs", unsafe { libc::prctl(libc::PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) });
    for (k, v) in status_fields() {
        match k.as_str() {
            "Uid" | "Gid" | "Groups" | "CapInh" | "CapPrm" | "CapEff" | "CapBnd" | "CapAmb" | "NoNewPrivs"
            | "Seccomp" | "NSpid" | "NSsid" => out(&format!("status.{k}"), v),
            _ => {}
        }
    }
}

pub(crate) fn cmd_rlimits() {
    let list = [
        ("core", libc::RLIMIT_CORE),
        ("fsize", libc::RLIMIT_FSIZE),
        ("nofile", libc::RLIMIT_NOFILE),
        ("nproc", libc::RLIMIT_NPROC),
        ("stack", libc::RLIMIT_STACK),
        ("as", libc::RLIMIT_AS),
        ("cpu", libc::RLIMIT_CPU),
    ];
    for (name, res_) in list {
        let mut rl = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: rl is a valid rlimit out-pointer.
        let r = unsafe { libc::getrlimit(res_, &mut rl) };
        if r != 0 {
            out(&format!("rlimit.{name}"), errno_name(errno()));
            continue;
        }
        let f = |v: libc::rlim_t| if v == libc::RLIM_INFINITY { "unlimited".to_string() } else { v.to_string() };
        out(&format!("rlimit.{name}"), format!("{} {}", f(rl.rlim_cur), f(rl.rlim_max)));
    }
}

/// What fds 0 and 1 are, and whether stdin can be seeked or mapped
/// (read-once input: a pipe, neither). Reports on stderr (stdout may be
/// the write-once pipe under test) and counts stdin's bytes.
pub(crate) fn cmd_stdio_kind() {
    let mut lines = Vec::new();
    for (fd, name) in [(0, "stdin"), (1, "stdout")] {
        // SAFETY: st is a zeroed stat buffer fstat fills.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: plain fstat into st.
        let kind = if unsafe { libc::fstat(fd, &mut st) } != 0 {
            errno_name(errno())
        } else {
            match st.st_mode & libc::S_IFMT {
                libc::S_IFIFO => "fifo".into(),
                libc::S_IFREG => "file".into(),
                libc::S_IFCHR => "chr".into(),
                _ => "other".into(),
            }
        };
        lines.push(format!("{name}_kind={kind}"));
    }
    // SAFETY: lseek on fd 0 has no memory effects.
    let seek = unsafe { libc::lseek(0, 0, libc::SEEK_SET) };
    lines.push(format!("stdin_seek={}", if seek < 0 { errno_name(errno()) } else { "ok".into() }));
    // SAFETY: a private read-only mapping of fd 0, unmapped right away.
    let map = unsafe { libc::mmap(std::ptr::null_mut(), 4096, libc::PROT_READ, libc::MAP_PRIVATE, 0, 0) };
    if map == libc::MAP_FAILED {
        lines.push(format!("stdin_mmap={}", errno_name(errno())));
    } else {
        lines.push("stdin_mmap=ok".into());
        // SAFETY: map is a live mapping of 4096 bytes.
        unsafe { libc::munmap(map, 4096) };
    }
    let mut n = 0u64;
    let mut buf = vec![0u8; 1 << 16];
    loop {
        // SAFETY: buf is writable for its length.
        let r = unsafe { libc::read(0, buf.as_mut_ptr().cast(), buf.len()) };
        if r <= 0 {
            break;
        }
        n += r as u64;
    }
    lines.push(format!("stdin_bytes={n}"));
    eprintln!("{}", lines.join("\n"));
}

pub(crate) fn cmd_fds() {
    let path = cstr("/proc/self/fd");
    // SAFETY: path is a valid C string; the DIR is closed below.
    let dir = unsafe { libc::opendir(path.as_ptr()) };
    if dir.is_null() {
        die(&format!("opendir /proc/self/fd: {}", errno_name(errno())));
    }
    // SAFETY: dir is a valid, open DIR*.
    let own = unsafe { libc::dirfd(dir) };
    let mut fds = Vec::new();
    loop {
        // SAFETY: dir is valid; readdir returns null at the end.
        let ent = unsafe { libc::readdir(dir) };
        if ent.is_null() {
            break;
        }
        // SAFETY: d_name of a valid dirent is a NUL-terminated string.
        let name = unsafe { CStr::from_ptr((*ent).d_name.as_ptr()) }.to_string_lossy().into_owned();
        if let Ok(fd) = name.parse::<i32>() {
            if fd != own {
                fds.push(fd);
            }
        }
    }
    // SAFETY: dir is valid and not used afterwards.
    unsafe { libc::closedir(dir) };
    fds.sort();
    out("fds", fds.iter().map(|f| f.to_string()).collect::<Vec<_>>().join(","));
    for fd in fds {
        let target = std::fs::read_link(format!("/proc/self/fd/{fd}"))
            .map(|p| p.display().to_string())
            .unwrap_or_else(|e| io_res::<()>(&Err(e)));
        out(&format!("fd.{fd}"), target);
    }
}

fn tty_nr() -> String {
    // Field 7 of /proc/self/stat, after the parenthesised comm.
    let s = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = s.rsplit_once(')').map(|(_, a)| a).unwrap_or("");
    after.split_whitespace().nth(4).unwrap_or("?").to_string()
}

pub(crate) fn cmd_tiocsti(chars: &str) {
    // SAFETY: plain queries of the calling process and fd 0.
    unsafe {
        out("pid", libc::getpid());
        out("sid", libc::getsid(0));
        let ts = libc::tcgetsid(0);
        out("tcgetsid", if ts == -1 { errno_name(errno()) } else { ts.to_string() });
        out("isatty0", libc::isatty(0));
    }
    out("tty_nr", tty_nr());
    let devtty = cstr("/dev/tty");
    // SAFETY: valid C string; the fd is closed if opened.
    let fd = unsafe { libc::open(devtty.as_ptr(), libc::O_RDWR | libc::O_NOCTTY) };
    out("open_dev_tty", res(fd as i64));
    if fd >= 0 {
        // SAFETY: fd was just opened.
        unsafe { libc::close(fd) };
    }
    for fd in [0, 1, 2] {
        let mut results = Vec::new();
        for b in chars.bytes() {
            let c = b as libc::c_char;
            // SAFETY: TIOCSTI reads one byte through the pointer.
            let r = unsafe { libc::ioctl(fd, libc::TIOCSTI, &c as *const libc::c_char) };
            results.push(res(r as i64));
        }
        results.dedup();
        out(&format!("tiocsti_fd{fd}"), results.join(","));
    }
    // Also try to make it our controlling terminal and inject again.
    // SAFETY: TIOCSCTTY takes an int argument.
    let r = unsafe { libc::ioctl(0, libc::TIOCSCTTY, 0) };
    out("tiocsctty", res(r as i64));
    if r == 0 {
        for b in chars.bytes() {
            let c = b as libc::c_char;
            // SAFETY: as above.
            let r = unsafe { libc::ioctl(0, libc::TIOCSTI, &c as *const libc::c_char) };
            out("tiocsti_after_sctty", res(r as i64));
        }
    }
}
