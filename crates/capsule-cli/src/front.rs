//! `capsule`, the front end: the program users run.
//!
//! Linked without a C library (build.rs): glibc's start-up costs ~0.4 ms
//! in this kind of virtual machine (CPUID probing for cache sizes, a VM
//! exit each), a fifth of a whole `capsule run -- /bin/true` through the
//! user's agent. So this program does only what that case needs, with
//! raw system calls and no allocation:
//!
//! 1. `capsule run ...` without options that need the caller's own
//!    process: compute the caller's agent identity (the library's code,
//!    `capsule_nolibc::identity`), connect to that agent's socket, check
//!    that an agent of this caller listens there (`capsule_nolibc::server`), send
//!    the command line, the directory and the environment with stdin,
//!    stdout and stderr attached (`ClientMsg::Command`). The agent parses
//!    it with `capsule-cli`'s own parser and runs it, or declines.
//! 2. Anything else (another subcommand, `isolate` — also this program run
//!    under the name `isolate`, a link —, no agent yet, a declined
//!    command, agents turned off, an unusual environment): execute
//!    `capsule-cli`, the full command-line tool, which must sit in the
//!    same directory as this program, with the same arguments and
//!    environment. It is exactly what `capsule` was before the split.
//!
//! A request the agent never accepted may always go to `capsule-cli`: it
//! was not read. Once accepted, the agent answers it (or the run failed).
#![no_std]
#![no_main]

use core::arch::global_asm;
use core::ffi::CStr;

use capsule_nolibc::identity::{self, Fnv, DEFAULT_CONFIG};
use capsule_nolibc::sys;

/// capsule's own failure (as `capsule::result::EXIT_CAPSULE_ERROR`).
const EXIT_CAPSULE_ERROR: i32 = 125;
/// The full command-line tool, next to this program.
const CLI_NAME: &[u8] = b"capsule-cli";

// The process entry: the kernel's initial stack (argc, argv, NULL, envp,
// NULL, auxv) goes to `front_main` with the stack aligned for a call.
#[cfg(target_arch = "x86_64")]
global_asm!(
    ".globl _start",
    "_start:",
    "xor ebp, ebp",
    "mov rdi, rsp",
    "and rsp, -16",
    "call {main}",
    "ud2",
    main = sym front_main,
);

// The memory functions the compiler calls (no C library provides them).
// In assembly, so that the compiler cannot turn their loops back into
// calls to themselves.
#[cfg(target_arch = "x86_64")]
global_asm!(
    ".globl memcpy",
    "memcpy:",
    "mov rax, rdi",
    "mov rcx, rdx",
    "rep movsb",
    "ret",
    ".globl memmove",
    "memmove:",
    "mov rax, rdi",
    "mov rcx, rdx",
    "cmp rdi, rsi",
    "jbe 2f",
    "lea r8, [rsi + rdx]",
    "cmp rdi, r8",
    "jae 2f",
    // Overlapping with the destination above: copy backwards.
    "lea rsi, [rsi + rdx - 1]",
    "lea rdi, [rdi + rdx - 1]",
    "std",
    "rep movsb",
    "cld",
    "ret",
    "2:",
    "rep movsb",
    "ret",
    ".globl memset",
    "memset:",
    "mov r8, rdi",
    "mov eax, esi",
    "mov rcx, rdx",
    "rep stosb",
    "mov rax, r8",
    "ret",
    ".globl memcmp",
    ".globl bcmp",
    "memcmp:",
    "bcmp:",
    "xor eax, eax",
    "mov rcx, rdx",
    "test rcx, rcx",
    "jz 3f",
    "repe cmpsb",
    "je 3f",
    "movzx eax, byte ptr [rdi - 1]",
    "movzx ecx, byte ptr [rsi - 1]",
    "sub eax, ecx",
    "3:",
    "ret",
    ".globl strlen",
    "strlen:",
    "mov rax, rdi",
    "4:",
    "cmp byte ptr [rax], 0",
    "je 5f",
    "inc rax",
    "jmp 4b",
    "5:",
    "sub rax, rdi",
    "ret",
);

// aarch64: the same entry (sp is 16-byte aligned at entry by the ABI)...
#[cfg(target_arch = "aarch64")]
global_asm!(
    ".globl _start",
    "_start:",
    "mov x29, xzr",
    "mov x30, xzr",
    "mov x0, sp",
    "bl {main}",
    "brk #0",
    main = sym front_main,
);

// ...and the same memory functions, byte loops.
#[cfg(target_arch = "aarch64")]
global_asm!(
    ".globl memcpy",
    "memcpy:",
    "mov x3, x0",
    "cbz x2, 1f",
    "0:",
    "ldrb w4, [x1], #1",
    "strb w4, [x3], #1",
    "subs x2, x2, #1",
    "b.ne 0b",
    "1:",
    "ret",
    ".globl memmove",
    "memmove:",
    "cmp x0, x1",
    "b.ls memcpy",
    "add x4, x1, x2",
    "cmp x0, x4",
    "b.hs memcpy",
    // Overlapping with the destination above: copy backwards.
    "cbz x2, 3f",
    "2:",
    "subs x2, x2, #1",
    "ldrb w4, [x1, x2]",
    "strb w4, [x0, x2]",
    "b.ne 2b",
    "3:",
    "ret",
    ".globl memset",
    "memset:",
    "mov x3, x0",
    "cbz x2, 5f",
    "4:",
    "strb w1, [x3], #1",
    "subs x2, x2, #1",
    "b.ne 4b",
    "5:",
    "ret",
    ".globl memcmp",
    ".globl bcmp",
    "memcmp:",
    "bcmp:",
    "cbz x2, 7f",
    "6:",
    "ldrb w3, [x0], #1",
    "ldrb w4, [x1], #1",
    "subs w5, w3, w4",
    "b.ne 8f",
    "subs x2, x2, #1",
    "b.ne 6b",
    "7:",
    "mov w0, #0",
    "ret",
    "8:",
    "mov w0, w5",
    "ret",
    ".globl strlen",
    "strlen:",
    "mov x1, x0",
    "9:",
    "ldrb w2, [x1], #1",
    "cbnz w2, 9b",
    "sub x0, x1, x0",
    "sub x0, x0, #1",
    "ret",
);

/// Referenced by the precompiled `core` in unoptimized builds; never
/// called (panics abort).
#[no_mangle]
extern "C" fn rust_eh_personality() {}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    let _ = sys::write_all(2, b"capsule: error: internal error in the front end\n");
    sys::exit(EXIT_CAPSULE_ERROR)
}

/// The command line and environment as the kernel gave them.
struct Start {
    argc: usize,
    argv: *const *const u8,
    envp: *const *const u8,
}

impl Start {
    fn arg(&self, i: usize) -> &[u8] {
        assert!(i < self.argc);
        // SAFETY: argv has argc valid NUL-terminated strings (the kernel's
        // start-up stack, alive for the whole process).
        unsafe { sys::c_str(*self.argv.add(i)).to_bytes() }
    }

    fn env(&self) -> impl Iterator<Item = &[u8]> + Clone + '_ {
        (0..)
            // SAFETY: envp is a NULL-terminated array; we stop at the NULL.
            .map(|i| unsafe { *self.envp.add(i) })
            .take_while(|p| !p.is_null())
            // SAFETY: each entry is a NUL-terminated string of the start-up stack.
            .map(|p| unsafe { sys::c_str(p).to_bytes() })
    }
}

/// # Safety
/// Called once, from `_start`, with the kernel's initial stack pointer.
unsafe extern "C" fn front_main(sp: *const usize) -> ! {
    // SAFETY: the initial stack: argc, then argv (argc pointers and a
    // NULL), then envp (pointers up to a NULL).
    let start = unsafe {
        let argc = *sp;
        let argv = sp.add(1) as *const *const u8;
        Start { argc, argv, envp: argv.add(argc + 1) }
    };
    let mut exe = [0u8; 4096];
    let Some(cli) = cli_path(&mut exe) else {
        let _ =
            sys::write_all(2, b"capsule: error: cannot read /proc/self/exe to find capsule-cli (is /proc mounted?)\n");
        sys::exit(EXIT_CAPSULE_ERROR)
    };
    if let Some(code) = through_agent(&start, cli) {
        sys::exit(code)
    }
    // SAFETY: argv and envp as the kernel gave them.
    let err = unsafe { sys::execve(cli, start.argv, start.envp) };
    let mut out = Out::new();
    out.put(b"capsule: error: cannot execute ");
    out.put(cli.to_bytes());
    out.put(b": ");
    out.put(errno_text(err));
    out.put(b" (capsule-cli, the full command-line tool, must be installed in the same directory as capsule)\n");
    out.flush();
    sys::exit(EXIT_CAPSULE_ERROR)
}

/// `capsule-cli` in the directory of this program's file.
fn cli_path(buf: &mut [u8; 4096]) -> Option<&CStr> {
    let n = sys::readlink(c"/proc/self/exe", &mut buf[..]).ok()?.len();
    let slash = buf[..n].iter().rposition(|&b| b == b'/')?;
    let end = slash + 1 + CLI_NAME.len();
    if end >= buf.len() {
        return None;
    }
    buf[slash + 1..end].copy_from_slice(CLI_NAME);
    buf[end] = 0;
    CStr::from_bytes_with_nul(&buf[..=end]).ok()
}

fn errno_text(e: i32) -> &'static [u8] {
    match e {
        2 => b"no such file or directory (ENOENT)",
        8 => b"not an executable (ENOEXEC)",
        12 => b"out of memory (ENOMEM)",
        13 => b"permission denied (EACCES)",
        _ => b"system error (execve)",
    }
}

/// Options of `capsule run` that the agent would decline (they need the
/// caller's own process; `capsule-cli`'s `OWN_PROCESS`): seen here, the
/// front end skips the round trip. The agent decides in any case.
const OWN_PROCESS: [&[u8]; 12] = [
    b"--profile",
    b"--stdin",
    b"--stdout",
    b"--stderr",
    b"--json",
    b"--meta",
    b"--pty",
    b"--layer",
    b"--no-agent",
    b"--cgroup",
    b"--require-cgroups",
    b"--no-cgroups",
];

/// Runs a `capsule run` command line through the caller's agent: the exit
/// status, or None where `capsule-cli` must do it.
fn through_agent(start: &Start, cli: &CStr) -> Option<i32> {
    if start.argc < 3 || start.arg(1) != b"run" {
        return None;
    }
    // Named `isolate` (a link): isolate's command line, capsule-cli's to parse.
    let name = start.arg(0);
    if name.rsplit(|&b| b == b'/').next() == Some(b"isolate".as_slice()) {
        return None;
    }
    // capsule refuses root: capsule-cli says so.
    if sys::getuid() == 0 || sys::geteuid() == 0 {
        return None;
    }
    // A caller under no_new_privs or a seccomp filter may be confined in
    // ways no agent can compare (Landlock): it forks its own supervisor
    // (capsule-cli, `capsule::endpoints::agent::enabled`), which inherits them.
    const PR_GET_SECCOMP: usize = 21;
    const PR_GET_NO_NEW_PRIVS: usize = 39;
    if sys::prctl_get(PR_GET_NO_NEW_PRIVS) != 0 || sys::prctl_get(PR_GET_SECCOMP) != 0 {
        return None;
    }
    let mut runtime: Option<&[u8]> = None;
    for entry in start.env() {
        core::str::from_utf8(entry).ok()?;
        let Some((key, value)) = identity::split_env(entry) else { continue };
        match key {
            // Agents off, settings that make no sense (capsule-cli reports
            // them), a re-start in a systemd scope: capsule-cli's to do.
            b"CAPSULE_AGENT" if !agent_on(value) => return None,
            b"CAPSULE_AGENT_IDLE" if !idle_valid(value) => return None,
            b"CAPSULE_IN_SYSTEMD_SCOPE" => return None,
            b"XDG_RUNTIME_DIR" => runtime = Some(value),
            _ => {}
        }
    }
    for i in 2..start.argc {
        let a = start.arg(i);
        core::str::from_utf8(a).ok()?;
        if a == b"--" {
            break;
        }
        let name = a.split(|&b| b == b'=').next().unwrap_or(a);
        if OWN_PROCESS.contains(&name) || (a.starts_with(b"-") && !a.starts_with(b"--") && a != b"-q" && a != b"-") {
            return None;
        }
    }
    let mut path = Path::new();
    // Where a systemd user manager runs, capsule-cli may re-start itself
    // in a transient scope for its cgroups (and then uses no agent).
    if let Some(r) = runtime.filter(|r| r.starts_with(b"/")) {
        path.push(r);
        path.push(b"/systemd/private");
        if sys::stat(path.c_str()?, 0).is_ok() {
            return None;
        }
    }
    // The agents' directory, as `capsule::endpoints::agent::socket_dir` chooses it.
    let uid = sys::geteuid();
    let private = |p: &CStr| {
        sys::stat(p, sys::AT_SYMLINK_NOFOLLOW)
            .is_ok_and(|s| s.mode & sys::S_IFMT == sys::S_IFDIR && s.uid == uid && s.mode & 0o077 == 0)
    };
    path.clear();
    match runtime.filter(|r| r.starts_with(b"/") && identity::runtime_dir_fits(r.len())) {
        Some(r)
            if {
                path.push(r);
                path.c_str().is_some_and(private)
            } =>
        {
            path.push(b"/capsule")
        }
        _ => {
            path.clear();
            path.push(b"/tmp/capsule-agent-");
            path.push_num(u64::from(uid));
        }
    }
    if !path.c_str().is_some_and(private) {
        return None;
    }
    let env = start.env().filter_map(identity::split_env);
    let mut key = Fnv::default();
    identity::write(&mut key, cli, env, DEFAULT_CONFIG);
    path.push(b"/agent-");
    path.push(&key.key());
    path.push(b".sock");
    let sock = sys::unix_stream_socket().ok()?;
    sys::connect_unix(&sock, path.bytes()).ok()?;
    // Nothing is sent to a listener that is not this caller's agent (a
    // sandboxed program's socket in its place): capsule-cli checks again,
    // warns, and runs without the agent.
    capsule_nolibc::server::check_agent(&sock, cli).ok()?;
    let mut cwd = [0u8; 4096];
    let cwd = sys::getcwd(&mut cwd).ok()?;
    core::str::from_utf8(cwd).ok()?;

    // {"command":{"args":[...],"cwd":"...","env":[...]}}, framed.
    let mut req = Json::new();
    req.raw(b"CAP1\0\0\0\0{\"command\":{\"args\":[");
    for i in 1..start.argc {
        if i > 1 {
            req.raw(b",");
        }
        req.string(start.arg(i));
    }
    req.raw(b"],\"cwd\":");
    req.string(cwd);
    req.raw(b",\"env\":[");
    for (k, entry) in start.env().enumerate() {
        if k > 0 {
            req.raw(b",");
        }
        req.string(entry);
    }
    req.raw(b"]}}");
    let frame = req.framed()?;
    // Not sent whole: the agent drops a connection with a partial message
    // unread, so capsule-cli may send it again.
    let mut sent = sys::send_with_fds(&sock, frame, &[0, 1, 2]).ok()?;
    while sent < frame.len() {
        sent += sys::send_with_fds(&sock, &frame[sent..], &[]).ok()?;
    }
    let mut reply = [0u8; 65536];
    // Accepted first (sent when the agent took the connection); the end of
    // the connection before it means the request was never read.
    if recv_message(&sock, &mut reply)? != b"\"accepted\"" {
        return None;
    }
    let Some(answer) = recv_message(&sock, &mut reply) else {
        let _ = sys::write_all(2, b"capsule: error: the agent exited without answering\n");
        return Some(EXIT_CAPSULE_ERROR);
    };
    if answer == b"\"declined\"" {
        return None;
    }
    match exit_message(answer) {
        Some(code) => Some(code),
        None => {
            let _ = sys::write_all(2, b"capsule: error: the agent sent an answer the front end does not understand\n");
            Some(EXIT_CAPSULE_ERROR)
        }
    }
}

/// Whether `CAPSULE_AGENT` says on (as `capsule::endpoints::agent::setting`).
fn agent_on(v: &[u8]) -> bool {
    ["", "on", "1", "yes", "true"].iter().any(|on| v.eq_ignore_ascii_case(on.as_bytes()))
}

/// Whether `CAPSULE_AGENT_IDLE` is a valid idle time (as
/// `capsule::endpoints::agent::idle_time`: 1 to 86400 seconds).
fn idle_valid(v: &[u8]) -> bool {
    core::str::from_utf8(v).ok().and_then(|v| v.trim().parse::<u64>().ok()).is_some_and(|s| (1..=86_400).contains(&s))
}

/// Receives one framed message (`CAP1`, length, body); None when the
/// connection ends or the body does not fit.
fn recv_message<'a>(sock: &sys::Fd, buf: &'a mut [u8]) -> Option<&'a [u8]> {
    let mut header = [0u8; 8];
    let mut got = 0;
    // In poll, not in recvmsg: a reader blocked in recvmsg on a Unix socket
    // is also woken whenever the agent reads what this end sent (the freed
    // send buffer wakes the socket's one wait queue), and on the way
    // preempts the agent.
    sys::wait_readable(sock).ok()?;
    while got < 8 {
        match sys::recv(sock, &mut header[got..]) {
            Ok(0) | Err(_) => return None,
            Ok(n) => got += n,
        }
    }
    if &header[..4] != b"CAP1" {
        return None;
    }
    let len = u32::from_le_bytes([header[4], header[5], header[6], header[7]]) as usize;
    if len > buf.len() {
        return None;
    }
    let mut got = 0;
    while got < len {
        match sys::recv(sock, &mut buf[got..len]) {
            Ok(0) | Err(_) => return None,
            Ok(n) => got += n,
        }
    }
    Some(&buf[..len])
}

/// `{"exit":{"code":N,"stderr":"..."}}` (serde's form of
/// `ServerMsg::Exit`): prints the text on stderr, returns the code.
fn exit_message(msg: &[u8]) -> Option<i32> {
    let rest = msg.strip_prefix(b"{\"exit\":{\"code\":")?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || digits > 3 {
        return None;
    }
    let code = rest[..digits].iter().fold(0i32, |n, d| n * 10 + i32::from(d - b'0'));
    let text = rest[digits..].strip_prefix(b",\"stderr\":\"")?.strip_suffix(b"\"}}")?;
    let mut out = Out::new();
    let mut i = 0;
    while i < text.len() {
        let b = text[i];
        i += 1;
        if b != b'\\' {
            out.put(&[b]);
            continue;
        }
        let e = *text.get(i)?;
        i += 1;
        let c = match e {
            b'"' | b'\\' | b'/' => e,
            b'n' => b'\n',
            b't' => b'\t',
            b'r' => b'\r',
            b'b' => 8,
            b'f' => 12,
            b'u' => {
                let unit = |i: &mut usize| {
                    let hex = core::str::from_utf8(text.get(*i..*i + 4)?).ok()?;
                    *i += 4;
                    u32::from_str_radix(hex, 16).ok()
                };
                let mut cp = unit(&mut i)?;
                if (0xd800..0xdc00).contains(&cp) && text.get(i..i + 2) == Some(b"\\u") {
                    i += 2;
                    let low = unit(&mut i)?;
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (low.wrapping_sub(0xdc00) & 0x3ff);
                }
                let ch = char::from_u32(cp).unwrap_or('\u{fffd}');
                out.put(ch.encode_utf8(&mut [0u8; 4]).as_bytes());
                continue;
            }
            _ => return None,
        };
        out.put(&[c]);
    }
    // As capsule-cli: a closed stderr is an error to ignore, not a signal.
    sys::ignore_sigpipe();
    out.flush();
    Some(code)
}

/// Text for stderr, written in pieces of up to 4 KiB.
struct Out {
    buf: [u8; 4096],
    len: usize,
}

impl Out {
    fn new() -> Self {
        Out { buf: [0; 4096], len: 0 }
    }
    fn put(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            if self.len == self.buf.len() {
                self.flush();
            }
            let n = bytes.len().min(self.buf.len() - self.len);
            self.buf[self.len..self.len + n].copy_from_slice(&bytes[..n]);
            self.len += n;
            bytes = &bytes[n..];
        }
    }
    fn flush(&mut self) {
        let _ = sys::write_all(2, &self.buf[..self.len]);
        self.len = 0;
    }
}

/// Bytes appended to a fixed buffer; `overflow` once something did not
/// fit (what is built is then not used: capsule-cli does the work).
struct Fixed<const N: usize> {
    buf: [u8; N],
    len: usize,
    overflow: bool,
}

impl<const N: usize> Fixed<N> {
    fn new() -> Self {
        Fixed { buf: [0; N], len: 0, overflow: false }
    }
    /// Appends `bytes`, keeping `spare` bytes free after them.
    fn append(&mut self, bytes: &[u8], spare: usize) {
        if self.len + bytes.len() + spare > N {
            self.overflow = true;
            return;
        }
        self.buf[self.len..self.len + bytes.len()].copy_from_slice(bytes);
        self.len += bytes.len();
    }
}

/// A path being built, NUL-terminated on demand.
struct Path(Fixed<4096>);

impl Path {
    fn new() -> Self {
        Path(Fixed::new())
    }
    fn clear(&mut self) {
        self.0.len = 0;
        self.0.overflow = false;
    }
    fn push(&mut self, bytes: &[u8]) {
        if bytes.contains(&0) {
            self.0.overflow = true;
            return;
        }
        // One byte spare for the NUL.
        self.0.append(bytes, 1);
    }
    fn push_num(&mut self, n: u64) {
        self.push(capsule_nolibc::decimal(n, &mut [0u8; 20]));
    }
    fn bytes(&self) -> &[u8] {
        &self.0.buf[..self.0.len]
    }
    fn c_str(&mut self) -> Option<&CStr> {
        let p = &mut self.0;
        if p.overflow {
            return None;
        }
        p.buf[p.len] = 0;
        CStr::from_bytes_with_nul(&p.buf[..=p.len]).ok()
    }
}

/// A request being written: JSON after an 8-byte frame header.
struct Json(Fixed<131072>);

impl Json {
    fn new() -> Self {
        Json(Fixed::new())
    }
    fn raw(&mut self, bytes: &[u8]) {
        self.0.append(bytes, 0);
    }
    /// A JSON string of `s` (valid UTF-8).
    fn string(&mut self, s: &[u8]) {
        self.raw(b"\"");
        let mut from = 0;
        for (i, &b) in s.iter().enumerate() {
            if b == b'"' || b == b'\\' || b < 0x20 {
                self.raw(&s[from..i]);
                match b {
                    b'"' => self.raw(b"\\\""),
                    b'\\' => self.raw(b"\\\\"),
                    b'\n' => self.raw(b"\\n"),
                    b'\t' => self.raw(b"\\t"),
                    _ => {
                        let hex = b"0123456789abcdef";
                        self.raw(&[b'\\', b'u', b'0', b'0', hex[usize::from(b >> 4)], hex[usize::from(b & 0xf)]]);
                    }
                }
                from = i + 1;
            }
        }
        self.raw(&s[from..]);
        self.raw(b"\"");
    }
    /// The frame: header with the body's length filled in; None when the
    /// request did not fit (capsule-cli sends it then).
    fn framed(&mut self) -> Option<&[u8]> {
        let j = &mut self.0;
        if j.overflow {
            return None;
        }
        let body = (j.len - 8) as u32;
        j.buf[4..8].copy_from_slice(&body.to_le_bytes());
        Some(&j.buf[..j.len])
    }
}
