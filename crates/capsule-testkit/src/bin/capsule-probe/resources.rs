//! Resources: memory, processes and CPU time up to the limits, and attempts
//! to lift the limits from inside.

use std::io::Write;

use crate::process::status_fields;
use crate::procs::fork_holding;
use crate::{arg, cmd_signal, cstr, errno, errno_name, hold, io_res, out, parse, res, usage};

const MIB: usize = 1 << 20;

/// Maps `mib` MiB of private anonymous memory (never unmapped: the probe
/// exits soon after); `None` with errno set when mmap fails.
fn map_mib(mib: usize, noreserve: bool) -> Option<*mut u8> {
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | if noreserve { libc::MAP_NORESERVE } else { 0 };
    // SAFETY: a fresh anonymous mapping; no existing memory is affected.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), mib * MIB, libc::PROT_READ | libc::PROT_WRITE, flags, -1, 0) };
    if p == libc::MAP_FAILED {
        None
    } else {
        Some(p.cast())
    }
}

/// Writes one byte per page of `[p, p + len)`, making every page resident.
fn touch(p: *mut u8, len: usize) {
    let mut off = 0;
    while off < len {
        // SAFETY: p..p+len is a writable mapping of ours.
        unsafe { std::ptr::write_volatile(p.add(off), 1) };
        off += 4096;
    }
}

/// Resident set size in KiB (VmRSS), for the report.
fn rss_kib() -> u64 {
    status_fields()
        .into_iter()
        .find(|(k, _)| k == "VmRSS")
        .and_then(|(_, v)| v.split_whitespace().next().and_then(|n| n.parse().ok()))
        .unwrap_or(0)
}

/// Allocates and touches N MiB, then exits.
pub(crate) fn cmd_touch_mib(mib: usize) {
    match map_mib(mib, false) {
        Some(p) => {
            touch(p, mib * MIB);
            out("touched_mib", mib);
            out("rss_kib", rss_kib());
        }
        None => out("mmap", errno_name(errno())),
    }
}

/// Reserves N MiB of address space without touching it.
pub(crate) fn cmd_reserve_mib(mib: usize) {
    match map_mib(mib, true) {
        Some(_) => {
            out("reserved_mib", mib);
            out("rss_kib", rss_kib());
        }
        None => out("mmap", errno_name(errno())),
    }
}

/// Allocates and touches memory 4 MiB at a time until killed, up to
/// `cap_mib` (a safety net: reaching it prints `survived_mib` and exits 0).
/// A failed allocation is reported and then ends the probe with SIGSEGV,
/// like a C program dereferencing malloc's NULL.
pub(crate) fn cmd_memory_bomb(cap_mib: usize) {
    out("ready", 1);
    let mut total = 0usize;
    while total < cap_mib {
        match map_mib(4, false) {
            Some(p) => {
                touch(p, 4 * MIB);
                total += 4;
                if total % 16 == 0 {
                    out("allocated_mib", total);
                }
            }
            None => {
                out("alloc_error", errno_name(errno()));
                out("allocated_mib", total);
                cmd_signal("SIGSEGV");
            }
        }
    }
    out("survived_mib", total);
}

/// Tries `n` forks (children pause until the sandbox ends), reports how many
/// succeeded and why the first failure failed, then exits leaving them.
pub(crate) fn cmd_fork_bomb(n: usize) {
    fork_holding(n);
}

/// N threads spinning forever (the CPU-time limit or the test ends them).
pub(crate) fn cmd_spin_threads(n: usize) -> ! {
    for _ in 0..n {
        std::thread::spawn(|| {
            let mut x = 0u64;
            loop {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
        });
    }
    out("spinning", n);
    out("ready", 1);
    hold()
}

fn process_cpu_ms() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 * 1000.0 + ts.tv_nsec as f64 / 1e6
}

/// Burns CPU on one thread until it has used `ms` ms of CPU time since this
/// command started, then reports the process's CPU clock
/// (CLOCK_PROCESS_CPUTIME_ID, counted from the fork that made it: the
/// sandbox's set-up before execve included) at the start and at the end.
pub(crate) fn cmd_burn_ms(ms: u64) {
    let start = process_cpu_ms();
    let mut x = 0u64;
    while process_cpu_ms() - start < ms as f64 {
        for _ in 0..10_000 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    }
    out("cpu_ms", format!("{:.3}", process_cpu_ms()));
    out("cpu_at_start_ms", format!("{start:.3}"));
}

/// The CPUs the probe may run on (sched_getaffinity), as a comma list.
pub(crate) fn cmd_affinity() {
    // SAFETY: cpu_set_t is plain data; the kernel fills it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: set is a valid out-pointer of the size given.
    let r = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if r != 0 {
        out("affinity", errno_name(errno()));
        return;
    }
    let cpus: Vec<String> = (0..libc::CPU_SETSIZE as usize)
        // SAFETY: i < CPU_SETSIZE.
        .filter(|&i| unsafe { libc::CPU_ISSET(i, &set) })
        .map(|i| i.to_string())
        .collect();
    out("affinity", "ok");
    out("cpus", cpus.join(","));
    // SAFETY: sysconf has no preconditions.
    out("online", unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) });
}

/// What writing to a cgroup file should do to lift a limit or escape it.
fn lifting_write(name: &str) -> Option<&'static str> {
    Some(match name {
        "memory.max" | "memory.high" | "memory.swap.max" | "memory.swap.high" | "memory.zswap.max" | "pids.max"
        | "cpu.max" | "memory.low" | "memory.min" => "max",
        "memory.oom.group" => "0",
        // Move ourselves there: out of the limited cgroup, if allowed.
        "cgroup.procs" => "0",
        // Switch the controllers off below, dropping the limits of children.
        "cgroup.subtree_control" => "-memory -pids -cpu -cpuset",
        "cgroup.max.descendants" | "cgroup.max.depth" => "max",
        _ => return None,
    })
}

/// Walks `root` (no symlinks, bounded) and writes a lifting value to every
/// limit file found; reports each success and a count per errno.
fn attack_tree(label: &str, root: &str) {
    let mut stack = vec![(std::path::PathBuf::from(root), 0usize)];
    let (mut found, mut lifted, mut seen) = (0usize, 0usize, 0usize);
    let mut errors: std::collections::BTreeMap<String, usize> = Default::default();
    while let Some((dir, depth)) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&dir) else { continue };
        for e in rd.flatten() {
            seen += 1;
            if seen > 20_000 {
                break;
            }
            let Ok(ft) = e.file_type() else { continue };
            let path = e.path();
            if ft.is_dir() {
                if depth < 16 {
                    stack.push((path, depth + 1));
                }
                continue;
            }
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(value) = lifting_write(&name) else { continue };
            found += 1;
            let r = std::fs::OpenOptions::new().write(true).open(&path).and_then(|mut f| f.write_all(value.as_bytes()));
            match r {
                Ok(()) => {
                    lifted += 1;
                    out(&format!("{label}.wrote.{}", path.display()), value);
                }
                Err(e) => *errors.entry(io_res::<()>(&Err(e))).or_default() += 1,
            }
        }
    }
    out(&format!("{label}.files"), found);
    out(&format!("{label}.written"), lifted);
    for (e, n) in errors {
        out(&format!("{label}.errors.{e}"), n);
    }
}

/// Tries to lift the run's limits from inside: every cgroup limit file
/// visible (the host view of /sys/fs/cgroup), then again from a nested
/// user + mount + cgroup namespace with a cgroup2 mount of its own. Then,
/// with `then SUBCOMMAND ARGS...`, runs that subcommand (memory-bomb,
/// fork-bomb, touch-mib, ...) to show the limits still hold.
pub(crate) fn cmd_write_max_limits(rest: &[String]) {
    out("cgroup_before", std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default().trim());
    attack_tree("host", "/sys/fs/cgroup");
    // SAFETY: getuid/getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    // SAFETY: unshare takes only flags; the probe is single-threaded.
    let r = unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWCGROUP) };
    out("unshare", res(r as i64));
    if r == 0 {
        out("setgroups", io_res(&std::fs::write("/proc/self/setgroups", "deny")));
        out("uid_map", io_res(&std::fs::write("/proc/self/uid_map", format!("0 {uid} 1"))));
        out("gid_map", io_res(&std::fs::write("/proc/self/gid_map", format!("0 {gid} 1"))));
        attack_tree("nested_host", "/sys/fs/cgroup");
        let mut mounted = false;
        for dir in ["/tmp/capsule-probe-cgroup2", "/sys/fs/cgroup"] {
            let _ = std::fs::create_dir(dir);
            let (src, d) = (cstr("cgroup2"), cstr(dir));
            // SAFETY: valid C strings.
            let r = unsafe { libc::mount(src.as_ptr(), d.as_ptr(), src.as_ptr(), 0, std::ptr::null()) };
            out(&format!("mount_cgroup2.{dir}"), res(r as i64));
            if r == 0 {
                mounted = true;
                attack_tree(&format!("mounted.{dir}"), dir);
            }
        }
        out("mounted", mounted as i32);
    }
    out("cgroup_after", std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default().trim());
    match rest {
        [] => {}
        [then, sub, args @ ..] if then == "then" => {
            let a = |i: usize| arg(args, i);
            match sub.as_str() {
                "memory-bomb" => cmd_memory_bomb(args.first().map(|s| parse(s)).unwrap_or(1024)),
                "fork-bomb" => cmd_fork_bomb(parse(a(0))),
                "touch-mib" => cmd_touch_mib(parse(a(0))),
                "spin-threads" => cmd_spin_threads(parse(a(0))),
                "burn-ms" => cmd_burn_ms(parse(a(0))),
                _ => usage(),
            }
        }
        _ => usage(),
    }
}
