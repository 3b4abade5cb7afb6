//! Compiling a parsed policy with libseccomp: names and argument conditions
//! checked, the automatic NEW_LISTENER rule, the BPF read back.

use std::collections::BTreeMap;
use std::io::Read;

use libseccomp::{ScmpArch, ScmpArgCompare, ScmpCompareOp, ScmpFilterContext, ScmpSyscall};

use super::policy::{Action, ArgCond, Op, Policy};
use super::Filter;
use crate::sys;

/// One rule after validation and expansion: single syscall, conditions
/// ready for libseccomp.
#[derive(Debug, Clone)]
struct Flat {
    /// Which rule of the file (`rule[3]`), or `automatic NEW_LISTENER rule`.
    source: String,
    /// The rule came from the policy (not added by capsule).
    user: bool,
    name: String,
    nr: i32,
    action: Action,
    conds: Vec<Cond>,
}

/// One comparison for libseccomp: (argument index, op, value).
type Cond = (u32, ScmpCompareOp, u64);

const SECCOMP_SET_MODE_FILTER: u64 = 1;
const SECCOMP_FILTER_FLAG_NEW_LISTENER: u64 = 1 << 3;

/// Validates and compiles a parsed policy.
pub fn compile_policy(p: &Policy) -> Result<Filter, String> {
    let non_native = p.non_native_action.unwrap_or(match p.default_action {
        Action::Allow | Action::Log => Action::Errno(libc::ENOSYS as u16),
        a => a,
    });
    // Names first: report every unknown one at once.
    let mut unknown = Vec::new();
    let mut resolved: Vec<Vec<(String, i32)>> = Vec::new();
    for (i, r) in p.rules.iter().enumerate() {
        let mut v = Vec::new();
        if r.syscall.names().is_empty() {
            return Err(format!("rule[{i}].syscall: the list is empty"));
        }
        for name in r.syscall.names() {
            match native_nr(name) {
                Some(nr) => v.push((name.clone(), nr)),
                None => unknown.push(format!("`{name}` (rule[{i}])")),
            }
        }
        resolved.push(v);
    }
    if !unknown.is_empty() {
        return Err(format!("unknown x86_64 syscall names: {}", unknown.join(", ")));
    }
    let mut flat = Vec::new();
    for (i, (r, names)) in p.rules.iter().zip(&resolved).enumerate() {
        let expanded = expand_conds(&r.args).map_err(|e| format!("rule[{i}].{e}"))?;
        for (name, nr) in names {
            for conds in &expanded {
                flat.push(Flat {
                    source: format!("rule[{i}]"),
                    user: true,
                    name: name.clone(),
                    nr: *nr,
                    action: r.action,
                    conds: conds.clone(),
                });
            }
        }
    }
    let notify =
        p.default_action == Action::Kill || non_native == Action::Kill || flat.iter().any(|f| f.action == Action::Kill);
    if notify {
        flat = guard_new_listener(flat)?;
    }
    check_conflicts(&flat, p.default_action)?;

    let ctx_err = |what: &str, e: libseccomp::error::SeccompError| format!("libseccomp: {what}: {e}");
    let mut ctx = ScmpFilterContext::new(p.default_action.scmp()).map_err(|e| ctx_err("creating the filter", e))?;
    ctx.set_act_badarch(non_native.scmp()).map_err(|e| ctx_err("setting the non-native action", e))?;
    // A binary tree over the syscall numbers instead of a chain: the
    // kernel emulates the filter once per syscall number and ABI when it
    // is installed (to fill its action cache), and converts and JITs every
    // instruction, for every run.
    ctx.set_ctl_optimize(2).map_err(|e| ctx_err("asking for the binary-tree layout", e))?;
    for f in &flat {
        if f.action == p.default_action {
            // Only automatic rules get here (see check_conflicts): the
            // default action covers them.
            continue;
        }
        let cmps: Vec<ScmpArgCompare> = f.conds.iter().map(|&(i, op, v)| ScmpArgCompare::new(i, op, v)).collect();
        ctx.add_rule_conditional_exact(f.action.scmp(), ScmpSyscall::from(f.nr), &cmps)
            .map_err(|e| format!("{} ({} `{}`): libseccomp refuses the rule: {e}", f.source, f.name, f.action))?;
    }
    let program = export(&ctx)?;
    Ok(Filter { program, notify, net_log_from: 0 })
}

/// The x86_64 number of a syscall name (pseudo-syscalls of other ABIs are
/// unknown).
pub(super) fn native_nr(name: &str) -> Option<i32> {
    if name.is_empty() || name.contains('\0') {
        return None;
    }
    let s = ScmpSyscall::from_name_by_arch(name, ScmpArch::X8664).ok()?;
    let nr = i32::from(s);
    (nr >= 0).then_some(nr)
}

/// The conditions of a rule, as one or more conjunctions for libseccomp
/// (a `not_in` becomes several).
fn expand_conds(args: &[ArgCond]) -> Result<Vec<Vec<Cond>>, String> {
    let mut base = Vec::new();
    let mut not_in: Option<(u32, Vec<u32>)> = None;
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
                if not_in.is_some() {
                    return Err(at("only one `not_in` per rule".into()));
                }
                not_in = Some((a.index, v32));
            }
            op => {
                if a.values.is_some() {
                    return Err(at("`values` is only for `not_in`".into()));
                }
                let Some(value) = a.value else { return Err(at("the condition needs a `value`".into())) };
                let sop = match op {
                    Op::Eq => ScmpCompareOp::Equal,
                    Op::Ne => ScmpCompareOp::NotEqual,
                    Op::Lt => ScmpCompareOp::Less,
                    Op::Le => ScmpCompareOp::LessOrEqual,
                    Op::Gt => ScmpCompareOp::Greater,
                    Op::Ge => ScmpCompareOp::GreaterEqual,
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
                        ScmpCompareOp::MaskedEqual(mask.0)
                    }
                    Op::NotIn => unreachable!("handled above"),
                };
                if a.mask.is_some() && op != Op::MaskedEq {
                    return Err(at("`mask` is only for `masked_eq`".into()));
                }
                base.push((a.index, sop, value.0));
            }
        }
    }
    let Some((index, values)) = not_in else { return Ok(vec![base]) };
    let mut cubes = Vec::new();
    not_in_cover(&values, 0, 0, &mut cubes);
    Ok(cubes
        .into_iter()
        .map(|(mask, value)| {
            let mut c = base.clone();
            c.push((index, ScmpCompareOp::MaskedEqual(u64::from(mask)), u64::from(value)));
            c
        })
        .collect())
}

/// Covers the 32-bit values outside `values` with masked comparisons
/// `(x & mask) == value`, starting from the cube where the bits of
/// `fixed_mask` equal `fixed_value`: disjoint cubes whose union is exactly
/// the complement (libseccomp allows one comparison per argument, so a
/// "none of these" becomes several rules).
pub(super) fn not_in_cover(values: &[u32], fixed_mask: u32, fixed_value: u32, out: &mut Vec<(u32, u32)>) {
    let inside: Vec<u32> = values.iter().copied().filter(|v| v & fixed_mask == fixed_value).collect();
    if inside.is_empty() {
        out.push((fixed_mask, fixed_value));
        return;
    }
    if fixed_mask == u32::MAX {
        return;
    }
    // A free bit on which every value inside agrees: its other side is free
    // of values, one cube; else split on the lowest free bit.
    let free = !fixed_mask;
    let agree = (0..32)
        .map(|b| 1u32 << b)
        .find(|&bit| free & bit != 0 && (inside.iter().all(|v| v & bit != 0) || inside.iter().all(|v| v & bit == 0)));
    match agree {
        Some(bit) => {
            let side = inside[0] & bit;
            out.push((fixed_mask | bit, fixed_value | (side ^ bit)));
            not_in_cover(values, fixed_mask | bit, fixed_value | side, out);
        }
        None => {
            let bit = 1u32 << free.trailing_zeros();
            not_in_cover(values, fixed_mask | bit, fixed_value, out);
            not_in_cover(values, fixed_mask | bit, fixed_value | bit, out);
        }
    }
}

/// With user notifications in the filter, `seccomp(SECCOMP_SET_MODE_FILTER,
/// flags with SECCOMP_FILTER_FLAG_NEW_LISTENER)` must fail with EPERM: a
/// newer filter's listener is asked first and could let our `kill`ed calls
/// through. The policy's own rules for `seccomp` are narrowed to the other
/// calls (split into disjoint rules: libseccomp lets an unconditional rule
/// override conditional ones). `op` and `flags` are `unsigned int` in the
/// kernel: only their low 32 bits count.
fn guard_new_listener(flat: Vec<Flat>) -> Result<Vec<Flat>, String> {
    let nr = native_nr("seccomp").ok_or("libseccomp does not know `seccomp`")?;
    let op_is_filter = (0u32, ScmpCompareOp::MaskedEqual(0xffff_ffff), SECCOMP_SET_MODE_FILTER);
    let with_listener =
        (1u32, ScmpCompareOp::MaskedEqual(SECCOMP_FILTER_FLAG_NEW_LISTENER), SECCOMP_FILTER_FLAG_NEW_LISTENER);
    let no_listener = (1u32, ScmpCompareOp::MaskedEqual(SECCOMP_FILTER_FLAG_NEW_LISTENER), 0);
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
        a.conds.push(no_listener);
        out.push(a);
        // ...and every op but SECCOMP_SET_MODE_FILTER with it.
        let mut cubes = Vec::new();
        not_in_cover(&[SECCOMP_SET_MODE_FILTER as u32], 0, 0, &mut cubes);
        for (mask, value) in cubes {
            let mut b = f.clone();
            b.conds.push((0, ScmpCompareOp::MaskedEqual(u64::from(mask)), u64::from(value)));
            b.conds.push(with_listener);
            out.push(b);
        }
    }
    out.push(Flat {
        source: "the automatic NEW_LISTENER rule".into(),
        user: false,
        name: "seccomp".into(),
        nr,
        action: eperm,
        conds: vec![op_is_filter, with_listener],
    });
    Ok(out)
}

/// Rules libseccomp would silently drop or refuse: a policy rule with the
/// default action; the same syscall unconditionally twice; an unconditional
/// rule next to conditional ones (the unconditional one would win).
fn check_conflicts(flat: &[Flat], default: Action) -> Result<(), String> {
    let mut by_nr: BTreeMap<i32, Vec<&Flat>> = BTreeMap::new();
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
        let uncond: Vec<&&Flat> = rules.iter().filter(|f| f.conds.is_empty()).collect();
        if let Some(first) = uncond.first() {
            if let Some(other) = rules.iter().find(|f| !std::ptr::eq(**f, **first)) {
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

/// libseccomp's BPF, read back from a memfd. (Not a pipe drained by a
/// thread: the supervisor has a pending time namespace for its children,
/// and Linux 6.1 refuses to create threads then.)
fn export(ctx: &ScmpFilterContext) -> Result<Vec<libc::sock_filter>, String> {
    use std::io::{Seek, SeekFrom};
    let fd = sys::memfd(c"capsule-bpf")
        .map_err(|e| format!("memfd_create for the BPF: {}", std::io::Error::from_raw_os_error(e)))?;
    ctx.export_bpf(&fd).map_err(|e| format!("libseccomp: exporting the BPF: {e}"))?;
    let mut f = std::fs::File::from(fd);
    let mut bytes = Vec::new();
    f.seek(SeekFrom::Start(0))
        .and_then(|_| f.read_to_end(&mut bytes))
        .map_err(|e| format!("reading the BPF back: {e}"))?;
    if bytes.is_empty() || bytes.len() % 8 != 0 {
        return Err(format!("libseccomp exported {} bytes of BPF, not whole instructions", bytes.len()));
    }
    let program: Vec<libc::sock_filter> = bytes
        .chunks_exact(8)
        .map(|c| libc::sock_filter {
            code: u16::from_ne_bytes([c[0], c[1]]),
            jt: c[2],
            jf: c[3],
            k: u32::from_ne_bytes([c[4], c[5], c[6], c[7]]),
        })
        .collect();
    // BPF_MAXINSNS.
    if program.len() > 4096 {
        return Err(format!("the filter has {} instructions; the kernel takes at most 4096", program.len()));
    }
    Ok(program)
}
