//! Extending a compiled policy: every `ret` of an `allow` or `log` action
//! becomes a jump to an epilogue appended to the program (the network log
//! and the run's guards are such epilogues); and the tiny assembler they
//! and the compiler write their BPF with.

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

/// A jump target of [`Asm`]: a label, or the next instruction.
pub(super) trait Target: Copy + Eq + std::fmt::Debug {
    /// The next instruction.
    const NEXT: Self;
}

/// The epilogues' labels: names, "" the next instruction.
impl Target for &'static str {
    const NEXT: Self = "";
}

/// The compiler's labels: numbers, `u32::MAX` the next instruction.
impl Target for u32 {
    const NEXT: Self = u32::MAX;
}

/// A tiny assembler for the filters: labels instead of jump offsets, jumps
/// forward only.
#[derive(Debug, Clone)]
pub(super) enum Asm<L = &'static str> {
    /// A = the 32-bit word at this offset of `struct seccomp_data`.
    Ld(u32),
    /// A &= k.
    And(u32),
    /// if A == k goto t else goto f.
    Jeq(u32, L, L),
    /// if A & k != 0 goto t else goto f.
    Jset(u32, L, L),
    /// if A >= k goto t else goto f.
    Jge(u32, L, L),
    /// if A > k goto t else goto f.
    Jgt(u32, L, L),
    Ret(u32),
    Label(L),
}

/// Assembles `code`. A conditional jump reaches 255 instructions; a target
/// further away goes through a `ja` placed right after the jump.
pub(super) fn assemble<L: Target>(code: &[Asm<L>]) -> Result<Vec<libc::sock_filter>, String> {
    let ins = |code: u16, jt: u8, jf: u8, k: u32| libc::sock_filter { code, jt, jf, k };
    // Per item: whether its true and false targets need a `ja`.
    let mut far = vec![(false, false); code.len()];
    loop {
        let (starts, labels) = layout(code, &far)?;
        let mut changed = false;
        for (n, a) in code.iter().enumerate() {
            if let Some((_, t, f)) = cond_jump(a) {
                let after = starts[n] + 1;
                let end = starts[n + 1];
                let dist = |l: L| -> Result<usize, String> {
                    let to = if l == L::NEXT { end } else { label_at(&labels, l)? };
                    to.checked_sub(after).ok_or(format!("jump back to {l:?}"))
                };
                let (ft, ff) = (dist(t)? > 255, dist(f)? > 255);
                if (ft && !far[n].0) || (ff && !far[n].1) {
                    far[n] = (far[n].0 || ft, far[n].1 || ff);
                    changed = true;
                }
            }
        }
        if changed {
            continue;
        }
        let mut out = Vec::with_capacity(starts[code.len()]);
        for (n, a) in code.iter().enumerate() {
            let end = starts[n + 1];
            let to = |l: L| -> Result<usize, String> {
                if l == L::NEXT {
                    Ok(end)
                } else {
                    label_at(&labels, l)
                }
            };
            match a {
                Asm::Label(_) => {}
                Asm::Ld(off) => out.push(ins(BPF_LD_W_ABS, 0, 0, *off)),
                Asm::And(k) => out.push(ins(BPF_ALU_AND_K, 0, 0, *k)),
                Asm::Ret(k) => out.push(ins(BPF_RET_K, 0, 0, *k)),
                _ => {
                    let (op, t, f) = cond_jump(a).expect("a conditional jump");
                    let at = out.len();
                    let (ft, ff) = far[n];
                    // Offsets from the instruction after the jump; a far
                    // target's `ja` sits there (true's first).
                    let jt = if ft { 0 } else { to(t)? - at - 1 };
                    let jf = if ff { usize::from(ft) } else { to(f)? - at - 1 };
                    out.push(ins(op, jt as u8, jf as u8, jump_k(a)));
                    for (is_far, l) in [(ft, t), (ff, f)] {
                        if is_far {
                            let from = out.len() + 1;
                            out.push(ins(BPF_JA, 0, 0, (to(l)? - from) as u32));
                        }
                    }
                }
            }
        }
        return Ok(out);
    }
}

/// Where each item starts (and, last, the end), and where each label is.
type Layout<L> = (Vec<usize>, Vec<(L, usize)>);

fn layout<L: Target>(code: &[Asm<L>], far: &[(bool, bool)]) -> Result<Layout<L>, String> {
    let mut starts = Vec::with_capacity(code.len() + 1);
    let mut labels = Vec::new();
    let mut n = 0;
    for (a, &(ft, ff)) in code.iter().zip(far) {
        starts.push(n);
        match a {
            Asm::Label(l) => {
                if *l == L::NEXT || labels.iter().any(|(x, _)| x == l) {
                    return Err(format!("label {l:?} defined twice"));
                }
                labels.push((*l, n));
            }
            _ => n += 1 + usize::from(ft) + usize::from(ff),
        }
    }
    starts.push(n);
    Ok((starts, labels))
}

fn label_at<L: Target>(labels: &[(L, usize)], l: L) -> Result<usize, String> {
    labels.iter().find(|(x, _)| *x == l).map(|&(_, at)| at).ok_or(format!("no label {l:?}"))
}

fn cond_jump<L: Target>(a: &Asm<L>) -> Option<(u16, L, L)> {
    match *a {
        Asm::Jeq(_, t, f) => Some((BPF_JEQ_K, t, f)),
        Asm::Jset(_, t, f) => Some((BPF_JSET_K, t, f)),
        Asm::Jge(_, t, f) => Some((BPF_JGE_K, t, f)),
        Asm::Jgt(_, t, f) => Some((BPF_JGT_K, t, f)),
        _ => None,
    }
}

fn jump_k<L: Target>(a: &Asm<L>) -> u32 {
    match *a {
        Asm::Jeq(k, ..) | Asm::Jset(k, ..) | Asm::Jge(k, ..) | Asm::Jgt(k, ..) => k,
        _ => 0,
    }
}
