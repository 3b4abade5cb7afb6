//! Compiling a parsed policy into classic BPF for one architecture: names
//! and argument conditions checked (on aarch64, the rules for calls it
//! lacks carried over to the calls it makes instead), the automatic
//! NEW_LISTENER rule, a binary tree over the syscall numbers.

use std::collections::BTreeMap;

use super::epilogue::{assemble, Asm, Target};
use super::names;
use super::policy::{Action, ArgCond, Op, Policy};
use super::Filter;
use crate::sys::seccomp::{AUDIT_ARCH_AARCH64, AUDIT_ARCH_X86_64, X32};

/// The architecture a filter is compiled for: the build's own
/// ([`Arch::NATIVE`]) at run time; tests compile for both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    X86_64,
    Aarch64,
}

impl Arch {
    #[cfg(target_arch = "x86_64")]
    pub const NATIVE: Arch = Arch::X86_64;
    #[cfg(target_arch = "aarch64")]
    pub const NATIVE: Arch = Arch::Aarch64;

    /// `AUDIT_ARCH_*`, what `seccomp_data.arch` holds for its calls.
    pub fn audit(self) -> u32 {
        match self {
            Arch::X86_64 => AUDIT_ARCH_X86_64,
            Arch::Aarch64 => AUDIT_ARCH_AARCH64,
        }
    }

    /// Its number of a syscall name.
    pub(crate) fn nr(self, name: &str) -> Option<u32> {
        match self {
            Arch::X86_64 => names::x86_64_nr(name),
            Arch::Aarch64 => names::aarch64_nr(name),
        }
    }
}

/// One rule after validation and expansion: single syscall, conditions
/// checked.
#[derive(Debug, Clone)]
struct Flat {
    /// Which rule of the file (`rule[3]`), or `automatic NEW_LISTENER rule`.
    source: String,
    /// The rule came from the policy (not added by capsule).
    user: bool,
    /// Carried over from a call the architecture lacks (`open` as
    /// `openat(AT_FDCWD, ...)`): ahead of the call's own rules.
    successor: bool,
    name: String,
    nr: u32,
    action: Action,
    conds: Vec<Cond>,
}

/// One comparison: the argument's index and what it must satisfy.
type Cond = (u32, Cmp);

/// A comparison of one 64-bit argument (unsigned).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Cmp {
    Eq(u64),
    Ne(u64),
    Lt(u64),
    Le(u64),
    Gt(u64),
    Ge(u64),
    /// `(arg & mask) == value`.
    Masked(u64, u64),
    /// The low 32 bits are none of these.
    NotIn(Vec<u32>),
}

const SECCOMP_SET_MODE_FILTER: u64 = 1;
const SECCOMP_FILTER_FLAG_NEW_LISTENER: u64 = 1 << 3;

/// Validates and compiles a parsed policy for this build's architecture.
pub fn compile_policy(p: &Policy) -> Result<Filter, String> {
    compile_policy_for(p, Arch::NATIVE)
}

/// How a policy's name resolves on an architecture.
enum Resolved {
    Nr(u32),
    /// aarch64: a call it makes with another one, with some arguments fixed.
    Successor(&'static names::Successor, u32),
    /// aarch64: an x86_64 call without a counterpart; no call matches.
    Absent,
}

fn resolve(arch: Arch, name: &str) -> Option<Resolved> {
    if let Some(nr) = arch.nr(name) {
        return Some(Resolved::Nr(nr));
    }
    if arch == Arch::X86_64 || names::x86_64_nr(name).is_none() {
        return None;
    }
    Some(match names::aarch64_successor(name) {
        Some(s) => Resolved::Successor(s, arch.nr(s.name).expect("a successor is an aarch64 call")),
        None => Resolved::Absent,
    })
}

/// A rule's conditions carried over to the successor call: the arguments
/// moved, the fixed ones added.
fn successor_conds(s: &names::Successor, name: &str, conds: &[Cond]) -> Result<Vec<Cond>, String> {
    let mut out: Vec<Cond> = s
        .fixed
        .iter()
        .map(|&(i, f)| match f {
            names::Fixed::Int(v) => (i, Cmp::Masked(0xffff_ffff, u64::from(v))),
            names::Fixed::Long(v) => (i, Cmp::Eq(v)),
        })
        .collect();
    for (i, cmp) in conds {
        match s.args.get(*i as usize).copied().flatten() {
            Some(to) => out.push((to, cmp.clone())),
            None => {
                return Err(format!(
                    "a condition on argument {i} of `{name}`, which aarch64 makes as `{}` where that argument has \
                     no counterpart: condition on `{}` itself",
                    s.name, s.name
                ))
            }
        }
    }
    Ok(out)
}

/// Validates and compiles a parsed policy for `arch`.
pub fn compile_policy_for(p: &Policy, arch: Arch) -> Result<Filter, String> {
    let non_native = p.non_native_action.unwrap_or(match p.default_action {
        Action::Allow | Action::Log => Action::Errno(libc::ENOSYS as u16),
        a => a,
    });
    // Names first: report every unknown one at once.
    let mut unknown = Vec::new();
    let mut resolved: Vec<Vec<(String, Resolved)>> = Vec::new();
    for (i, r) in p.rules.iter().enumerate() {
        let mut v = Vec::new();
        if r.syscall.names().is_empty() {
            return Err(format!("rule[{i}].syscall: the list is empty"));
        }
        for name in r.syscall.names() {
            match resolve(arch, name) {
                Some(res) => v.push((name.clone(), res)),
                None => unknown.push(format!("`{name}` (rule[{i}])")),
            }
        }
        resolved.push(v);
    }
    if !unknown.is_empty() {
        let what = if arch == Arch::X86_64 { "x86_64 syscall names" } else { "syscall names" };
        return Err(format!("unknown {what}: {}", unknown.join(", ")));
    }
    let mut flat = Vec::new();
    let mut carried = Vec::new();
    for (i, (r, names)) in p.rules.iter().zip(&resolved).enumerate() {
        let conds = conditions(&r.args).map_err(|e| format!("rule[{i}].{e}"))?;
        for (name, res) in names {
            let source = format!("rule[{i}]");
            let (nr, conds, successor) = match res {
                Resolved::Nr(nr) => (*nr, conds.clone(), false),
                Resolved::Successor(s, nr) => {
                    (*nr, successor_conds(s, name, &conds).map_err(|e| format!("{source}: {e}"))?, true)
                }
                Resolved::Absent => continue,
            };
            let f = Flat { source, user: true, successor, name: name.clone(), nr, action: r.action, conds };
            if successor {
                carried.push(f)
            } else {
                flat.push(f)
            }
        }
    }
    let flat = with_successors(flat, carried, p.default_action);
    let notify =
        p.default_action == Action::Kill || non_native == Action::Kill || flat.iter().any(|f| f.action == Action::Kill);
    let mut flat = flat;
    if notify {
        flat = guard_new_listener(flat, arch)?;
    }
    check_conflicts(&flat, p.default_action)?;
    // Only automatic rules have the default action here (see
    // check_conflicts): the default covers them.
    flat.retain(|f| f.action != p.default_action);
    let program =
        assemble(&generate(arch, p.default_action, non_native, &flat)).map_err(|e| format!("assembling: {e}"))?;
    // BPF_MAXINSNS.
    if program.len() > 4096 {
        return Err(format!("the filter has {} instructions; the kernel takes at most 4096", program.len()));
    }
    Ok(Filter { program, notify, net_log_from: 0 })
}

/// This build's number of a syscall name.
#[cfg(all(test, target_arch = "x86_64"))]
pub(super) fn native_nr(name: &str) -> Option<u32> {
    Arch::NATIVE.nr(name)
}

/// The rules carried over from calls the architecture lacks, ahead of the
/// rules of the calls they became (the first rule that holds decides):
/// `open`'s rule decides for `openat(AT_FDCWD, ...)`, `openat`'s for the
/// rest. One that would decide as the call's own unconditional rule (or,
/// without rules, the default) is left out: it changes nothing.
fn with_successors(flat: Vec<Flat>, carried: Vec<Flat>, default: Action) -> Vec<Flat> {
    if carried.is_empty() {
        return flat;
    }
    let mut out = Vec::new();
    for c in carried {
        let own: Vec<&Flat> = flat.iter().filter(|f| f.nr == c.nr).collect();
        let same = match own.iter().find(|f| f.conds.is_empty()) {
            Some(u) => u.action == c.action,
            None => own.is_empty() && c.action == default,
        };
        if !same {
            out.push(c);
        }
    }
    out.extend(flat);
    out
}

/// The conditions of a rule, checked.
fn conditions(args: &[ArgCond]) -> Result<Vec<Cond>, String> {
    let mut conds = Vec::new();
    let mut seen = [false; 6];
    for (j, a) in args.iter().enumerate() {
        let at = |m: String| format!("args[{j}]: {m}");
        if a.index > 5 {
            return Err(at(format!("index {} is out of range: a syscall has arguments 0-5", a.index)));
        }
        if std::mem::replace(&mut seen[a.index as usize], true) {
            return Err(at(format!(
                "a second condition on argument {}: a rule compares each argument once (write another rule)",
                a.index
            )));
        }
        match a.op {
            Op::NotIn => {
                if a.value.is_some() || a.mask.is_some() {
                    return Err(at("`not_in` takes `values`, not `value` or `mask`".into()));
                }
                let Some(vals) = &a.values else { return Err(at("`not_in` needs `values = [...]`".into())) };
                if vals.is_empty() {
                    return Err(at("`values` is empty".into()));
                }
                let mut v32 = Vec::new();
                for v in vals {
                    v32.push(u32::try_from(v.0).map_err(|_| {
                        at(format!("`not_in` compares the low 32 bits: {:#x} does not fit in 32 bits", v.0))
                    })?);
                }
                conds.push((a.index, Cmp::NotIn(v32)));
            }
            op => {
                if a.values.is_some() {
                    return Err(at("`values` is only for `not_in`".into()));
                }
                let Some(value) = a.value else { return Err(at("the condition needs a `value`".into())) };
                let cmp = match op {
                    Op::Eq => Cmp::Eq(value.0),
                    Op::Ne => Cmp::Ne(value.0),
                    Op::Lt => Cmp::Lt(value.0),
                    Op::Le => Cmp::Le(value.0),
                    Op::Gt => Cmp::Gt(value.0),
                    Op::Ge => Cmp::Ge(value.0),
                    Op::MaskedEq => {
                        let Some(mask) = a.mask else {
                            return Err(at("`masked_eq` needs a `mask`".into()));
                        };
                        if value.0 & !mask.0 != 0 {
                            return Err(at(format!(
                                "value {:#x} has bits outside mask {:#x}: the condition never holds",
                                value.0, mask.0
                            )));
                        }
                        Cmp::Masked(mask.0, value.0)
                    }
                    Op::NotIn => unreachable!("handled above"),
                };
                if a.mask.is_some() && op != Op::MaskedEq {
                    return Err(at("`mask` is only for `masked_eq`".into()));
                }
                conds.push((a.index, cmp));
            }
        }
    }
    Ok(conds)
}

/// With user notifications in the filter, `seccomp(SECCOMP_SET_MODE_FILTER,
/// flags with SECCOMP_FILTER_FLAG_NEW_LISTENER)` must fail with EPERM: a
/// newer filter's listener is asked first and could let our `kill`ed calls
/// through. The policy's own rules for `seccomp` are narrowed to the other
/// calls (split into rules disjoint from the automatic one, so their order
/// does not matter). `op` and `flags` are `unsigned int` in the
/// kernel: only their low 32 bits count.
fn guard_new_listener(flat: Vec<Flat>, arch: Arch) -> Result<Vec<Flat>, String> {
    let nr = arch.nr("seccomp").expect("every architecture has seccomp");
    let op_is_filter = (0u32, Cmp::Masked(0xffff_ffff, SECCOMP_SET_MODE_FILTER));
    let other_op = (0u32, Cmp::NotIn(vec![SECCOMP_SET_MODE_FILTER as u32]));
    let with_listener = (1u32, Cmp::Masked(SECCOMP_FILTER_FLAG_NEW_LISTENER, SECCOMP_FILTER_FLAG_NEW_LISTENER));
    let no_listener = (1u32, Cmp::Masked(SECCOMP_FILTER_FLAG_NEW_LISTENER, 0));
    let eperm = Action::Errno(libc::EPERM as u16);
    // The policy refuses every `seccomp` call with EPERM already.
    if flat.iter().any(|f| f.nr == nr && f.conds.is_empty() && f.action == eperm) {
        return Ok(flat);
    }
    let mut out = Vec::new();
    for f in flat {
        if f.nr != nr || f.action == eperm {
            out.push(f);
            continue;
        }
        if f.conds.iter().any(|c| c.0 <= 1) {
            return Err(format!(
                "{}: conditions on arguments 0 and 1 of `seccomp` cannot be combined with the automatic rule \
                 refusing SECCOMP_FILTER_FLAG_NEW_LISTENER (the policy uses `kill`); condition on the other \
                 arguments only, or use `errno EPERM`",
                f.source
            ));
        }
        // Any op without the listener flag...
        let mut a = f.clone();
        a.conds.push(no_listener.clone());
        out.push(a);
        // ...and every op but SECCOMP_SET_MODE_FILTER with it.
        let mut b = f.clone();
        b.conds.push(other_op.clone());
        b.conds.push(with_listener.clone());
        out.push(b);
    }
    out.push(Flat {
        source: "the automatic NEW_LISTENER rule".into(),
        user: false,
        successor: false,
        name: "seccomp".into(),
        nr,
        action: eperm,
        conds: vec![op_is_filter, with_listener],
    });
    Ok(out)
}

/// Rules that would have no effect: a policy rule with the default action;
/// the same syscall unconditionally twice; an unconditional rule next to
/// conditional ones (the unconditional one would win).
fn check_conflicts(flat: &[Flat], default: Action) -> Result<(), String> {
    let mut by_nr: BTreeMap<u32, Vec<&Flat>> = BTreeMap::new();
    for f in flat {
        if f.user && f.action == default {
            return Err(format!(
                "{} (`{}`): the action `{}` is the default action, so the rule has no effect; remove it",
                f.source, f.name, f.action
            ));
        }
        by_nr.entry(f.nr).or_default().push(f);
    }
    for rules in by_nr.values() {
        // Carried-over rules always have conditions and come first: an
        // unconditional rule of the call itself decides the rest.
        let own = || rules.iter().filter(|f| !f.successor);
        let uncond: Vec<&&Flat> = own().filter(|f| f.conds.is_empty()).collect();
        if let Some(first) = uncond.first() {
            if let Some(other) = own().find(|f| !std::ptr::eq(**f, **first)) {
                let what = if other.conds.is_empty() && other.action == first.action {
                    "duplicate rule".to_string()
                } else if other.conds.is_empty() {
                    format!("conflicting rules (`{}` and `{}`)", first.action, other.action)
                } else {
                    format!(
                        "conflicting rules: {} applies `{}` to every call, so the conditions of {} would be ignored",
                        first.source, first.action, other.source
                    )
                };
                return Err(format!("`{}` in {} and {}: {what}", first.name, first.source, other.source));
            }
        }
    }
    Ok(())
}

/// Labels of the generated code (numbers; see [`Target`]).
struct Labels(u32);

impl Labels {
    fn fresh(&mut self) -> u32 {
        self.0 += 1;
        self.0
    }
}

/// The program: the ABI check, then a binary tree over the syscall
/// numbers whose leaves return an action or check a syscall's arguments.
/// The kernel emulates the filter once per syscall number and ABI when it
/// is installed (to fill its action cache), and converts and JITs every
/// instruction, for every run: a tree keeps both short.
fn generate(arch: Arch, default: Action, non_native: Action, flat: &[Flat]) -> Vec<Asm<u32>> {
    use Asm::*;
    let next = u32::NEXT;
    let mut l = Labels(0);
    let (native, number) = (l.fresh(), l.fresh());
    let mut code = match arch {
        // Another arch (i386 included) and x32 numbers get the non-native
        // action; -1 (no call: a tracer skipping it) is no x32 number.
        Arch::X86_64 => vec![
            Ld(4),
            Jeq(AUDIT_ARCH_X86_64, native, next),
            Ret(non_native.ret()),
            Label(native),
            Ld(0),
            Jge(X32, next, number),
            Jeq(u32::MAX, number, next),
            Ret(non_native.ret()),
            Label(number),
        ],
        // Another arch (32-bit ARM) gets the non-native action.
        Arch::Aarch64 => {
            vec![Ld(4), Jeq(AUDIT_ARCH_AARCH64, native, next), Ret(non_native.ret()), Label(native), Ld(0)]
        }
    };
    let mut by_nr: BTreeMap<u32, Vec<&Flat>> = BTreeMap::new();
    for f in flat {
        by_nr.entry(f.nr).or_default().push(f);
    }
    let end = if arch == Arch::X86_64 { X32 } else { u32::MAX };
    tree(&segments(default, &by_nr), end, &mut l, &mut code);
    code
}

/// What a range of syscall numbers leads to.
#[derive(Debug, Clone, Copy)]
enum Leaf<'a> {
    Ret(Action),
    /// The rules of one syscall (with conditions), then the default.
    Rules(&'a [&'a Flat], Action),
}

/// The numbers below X32 as ranges `[from, next from)` and their leaves,
/// neighbours with the same action merged.
fn segments<'a>(default: Action, by_nr: &'a BTreeMap<u32, Vec<&'a Flat>>) -> Vec<(u32, Leaf<'a>)> {
    let mut segs: Vec<(u32, Leaf<'a>)> = Vec::new();
    let mut push = |from: u32, leaf: Leaf<'a>| {
        if segs.last().is_some_and(|&(start, _)| start == from) {
            segs.pop();
        }
        match (segs.last(), leaf) {
            (Some(&(_, Leaf::Ret(a))), Leaf::Ret(b)) if a == b => {}
            _ => segs.push((from, leaf)),
        }
    };
    push(0, Leaf::Ret(default));
    for (&nr, rules) in by_nr {
        let leaf = match rules.as_slice() {
            [only] if only.conds.is_empty() => Leaf::Ret(only.action),
            _ => Leaf::Rules(rules, default),
        };
        push(nr, leaf);
        push(nr + 1, Leaf::Ret(default));
    }
    segs
}

/// At most this many numbers of a range with their own leaf are compared
/// one by one (`jeq`) rather than split further.
const CHAIN: usize = 4;

/// The code for the numbers `segs` covers, up to `end`: a `jge` splitting
/// them in halves, or, for a range where a few single numbers stand out of
/// one action, a `jeq` for each (cheaper for the scattered numbers of an
/// allowlist).
fn tree(segs: &[(u32, Leaf)], end: u32, l: &mut Labels, code: &mut Vec<Asm<u32>>) {
    use Asm::*;
    match segs {
        [] => {}
        [(_, leaf)] => body(leaf, l, code),
        _ => match background(segs, end) {
            Some(bg) => {
                let singles: Vec<(u32, Leaf, u32)> = segs
                    .iter()
                    .filter(|(_, leaf)| !matches!(leaf, Leaf::Ret(a) if *a == bg))
                    .map(|&(nr, leaf)| (nr, leaf, l.fresh()))
                    .collect();
                // One `ret` per action: numbers that return the same share it.
                let mut targets: Vec<(Leaf, u32)> = Vec::new();
                for &(nr, leaf, own) in &singles {
                    let to = match leaf {
                        Leaf::Ret(a) => match targets.iter().find(|(t, _)| matches!(t, Leaf::Ret(b) if *b == a)) {
                            Some(&(_, to)) => to,
                            None => {
                                targets.push((leaf, own));
                                own
                            }
                        },
                        Leaf::Rules(..) => {
                            targets.push((leaf, own));
                            own
                        }
                    };
                    code.push(Jeq(nr, to, u32::NEXT));
                }
                code.push(Ret(bg.ret()));
                for (leaf, label) in targets {
                    code.push(Label(label));
                    body(&leaf, l, code);
                }
            }
            None => {
                let mid = segs.len() / 2;
                let right = l.fresh();
                code.push(Jge(segs[mid].0, right, u32::NEXT));
                tree(&segs[..mid], segs[mid].0, l, code);
                code.push(Label(right));
                tree(&segs[mid..], end, l, code);
            }
        },
    }
}

/// The action of `segs` but for at most [`CHAIN`] single numbers, if any:
/// each range wider than one number returns it.
fn background(segs: &[(u32, Leaf)], end: u32) -> Option<Action> {
    let mut bg = None;
    for (i, &(from, leaf)) in segs.iter().enumerate() {
        let to = segs.get(i + 1).map_or(end, |s| s.0);
        if to - from > 1 {
            match leaf {
                Leaf::Ret(a) if bg.is_none_or(|b| b == a) => bg = Some(a),
                _ => return None,
            }
        }
    }
    let bg = bg?;
    // The others are single numbers.
    let singles = segs.iter().filter(|(_, leaf)| !matches!(leaf, Leaf::Ret(a) if *a == bg)).count();
    (singles <= CHAIN).then_some(bg)
}

/// A leaf: its action, or a syscall's rules in the file's order (the first
/// whose conditions all hold decides), then the default.
fn body(leaf: &Leaf, l: &mut Labels, code: &mut Vec<Asm<u32>>) {
    use Asm::*;
    match leaf {
        Leaf::Ret(a) => code.push(Ret(a.ret())),
        Leaf::Rules(rules, default) => {
            for f in *rules {
                let fail = l.fresh();
                for (index, cmp) in &f.conds {
                    condition(*index, cmp, fail, l, code);
                }
                code.extend([Ret(f.action.ret()), Label(fail)]);
            }
            code.push(Ret(default.ret()));
        }
    }
}

/// Falls through when argument `index` satisfies `cmp`, else jumps to
/// `fail`. The 64-bit comparisons take the upper half first (x86_64 is
/// little-endian: it is the word at offset 4 of the argument).
fn condition(index: u32, cmp: &Cmp, fail: u32, l: &mut Labels, code: &mut Vec<Asm<u32>>) {
    use Asm::*;
    let next = u32::NEXT;
    let (lo, hi) = (16 + 8 * index, 20 + 8 * index);
    let halves = |v: u64| ((v >> 32) as u32, v as u32);
    let ok = l.fresh();
    match *cmp {
        Cmp::Eq(v) => {
            let (vh, vl) = halves(v);
            code.extend([Ld(hi), Jeq(vh, next, fail), Ld(lo), Jeq(vl, next, fail)]);
        }
        Cmp::Ne(v) => {
            let (vh, vl) = halves(v);
            code.extend([Ld(hi), Jeq(vh, next, ok), Ld(lo), Jeq(vl, fail, next)]);
        }
        // Above in the upper half: holds (or fails); equal: the lower
        // half decides.
        Cmp::Gt(v) | Cmp::Ge(v) => {
            let (vh, vl) = halves(v);
            code.extend([Ld(hi), Jgt(vh, ok, next), Jeq(vh, next, fail), Ld(lo)]);
            code.push(if matches!(cmp, Cmp::Gt(_)) { Jgt(vl, next, fail) } else { Jge(vl, next, fail) });
        }
        Cmp::Lt(v) | Cmp::Le(v) => {
            let (vh, vl) = halves(v);
            code.extend([Ld(hi), Jgt(vh, fail, next), Jeq(vh, next, ok), Ld(lo)]);
            code.push(if matches!(cmp, Cmp::Lt(_)) { Jge(vl, fail, next) } else { Jgt(vl, fail, next) });
        }
        Cmp::Masked(m, v) => {
            // A half the mask leaves out always matches (the value has no
            // bits outside the mask).
            for (off, mh, vh) in [(hi, (m >> 32) as u32, (v >> 32) as u32), (lo, m as u32, v as u32)] {
                if mh == 0 {
                    continue;
                }
                code.push(Ld(off));
                if mh != u32::MAX {
                    code.push(And(mh));
                }
                code.push(Jeq(vh, next, fail));
            }
        }
        Cmp::NotIn(ref values) => {
            code.push(Ld(lo));
            code.extend(values.iter().map(|&v| Jeq(v, fail, next)));
        }
    }
    code.push(Label(ok));
}
