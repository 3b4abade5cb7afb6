//! Extending a compiled policy: every `ret` of an `allow` or `log` action
//! becomes a jump to an epilogue appended to the program, written with a
//! tiny assembler (the network log and the run's guards are such epilogues).

use super::{Filter, PolicyError};
use crate::sys::seccomp::*;

/// `filter`'s program (empty: `allow` everything) with every `ret` of an
/// `allow` or `log` action replaced by a jump to `epilogue(action)`,
/// appended once per such action; and where the epilogues start.
pub(super) fn extend_passes(
    filter: &Filter,
    what: &str,
    epilogue: impl Fn(u32) -> Result<Vec<libc::sock_filter>, PolicyError>,
) -> Result<(Vec<libc::sock_filter>, usize), PolicyError> {
    let ret = |k: u32| libc::sock_filter { code: BPF_RET_K, jt: 0, jf: 0, k };
    let mut program = if filter.program.is_empty() { vec![ret(RET_ALLOW)] } else { filter.program.clone() };
    let n = program.len();
    let mut passes: Vec<u32> = Vec::new();
    for i in &program {
        if i.code == BPF_RET_A {
            return Err(PolicyError::Invalid(format!(
                "{what} cannot extend a filter whose action is computed (BPF ret A)"
            )));
        }
        let action = i.k & RET_ACTION_FULL;
        if i.code == BPF_RET_K && (action == RET_ALLOW || action == RET_LOG) && !passes.contains(&i.k) {
            passes.push(i.k);
        }
    }
    let mut starts = Vec::new();
    for &k in &passes {
        starts.push((k, program.len()));
        program.extend(epilogue(k)?);
    }
    for (at, i) in program.iter_mut().enumerate().take(n) {
        if i.code != BPF_RET_K {
            continue;
        }
        if let Some(&(_, start)) = starts.iter().find(|(k, _)| *k == i.k) {
            *i = libc::sock_filter { code: BPF_JA, jt: 0, jf: 0, k: (start - at - 1) as u32 };
        }
    }
    // BPF_MAXINSNS.
    if program.len() > 4096 {
        return Err(PolicyError::Invalid(format!(
            "with {what} the filter has {} instructions; the kernel takes at most 4096",
            program.len()
        )));
    }
    Ok((program, n))
}

/// A tiny assembler for the epilogues: labels instead of jump offsets (""
/// is the next instruction).
pub(super) enum Asm {
    /// A = the 32-bit word at this offset of `struct seccomp_data`.
    Ld(u32),
    /// if A == k goto t else goto f.
    Jeq(u32, &'static str, &'static str),
    /// if A & k != 0 goto t else goto f.
    Jset(u32, &'static str, &'static str),
    /// if A >= k goto t else goto f.
    Jge(u32, &'static str, &'static str),
    /// if A > k goto t else goto f.
    Jgt(u32, &'static str, &'static str),
    Ret(u32),
    Label(&'static str),
}

pub(super) fn assemble(code: &[Asm]) -> Result<Vec<libc::sock_filter>, String> {
    let mut labels: Vec<(&str, usize)> = Vec::new();
    let mut n = 0;
    for a in code {
        match a {
            Asm::Label(l) => labels.push((l, n)),
            _ => n += 1,
        }
    }
    let mut out = Vec::with_capacity(n);
    for a in code {
        let at = out.len();
        let target = |l: &str| -> Result<u8, String> {
            if l.is_empty() {
                return Ok(0);
            }
            let (_, to) = labels.iter().find(|(x, _)| *x == l).ok_or(format!("no label `{l}`"))?;
            to.checked_sub(at + 1).and_then(|d| u8::try_from(d).ok()).ok_or(format!("jump to `{l}` out of range"))
        };
        match a {
            Asm::Label(_) => {}
            Asm::Ld(off) => out.push(libc::sock_filter { code: BPF_LD_W_ABS, jt: 0, jf: 0, k: *off }),
            Asm::Jeq(k, t, f) => out.push(libc::sock_filter { code: BPF_JEQ_K, jt: target(t)?, jf: target(f)?, k: *k }),
            Asm::Jset(k, t, f) => {
                out.push(libc::sock_filter { code: BPF_JSET_K, jt: target(t)?, jf: target(f)?, k: *k })
            }
            Asm::Jge(k, t, f) => out.push(libc::sock_filter { code: BPF_JGE_K, jt: target(t)?, jf: target(f)?, k: *k }),
            Asm::Jgt(k, t, f) => out.push(libc::sock_filter { code: BPF_JGT_K, jt: target(t)?, jf: target(f)?, k: *k }),
            Asm::Ret(k) => out.push(libc::sock_filter { code: BPF_RET_K, jt: 0, jf: 0, k: *k }),
        }
    }
    Ok(out)
}
