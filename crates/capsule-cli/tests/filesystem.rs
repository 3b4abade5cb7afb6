//! The filesystem rules (`--allow`, `--read-only`, `--writable`, `--hide`,
//! a profile's `[filesystem]`, the `serve` spec's `filesystem`), `~`
//! expansion and the default hiding of the caller's secrets
//! (docs/filesystem.md), observed from inside with a shell script and on
//! the host.
//!
//! The harness runs capsule with an empty environment: each test gives it
//! a `HOME` in its scratch directory (the test user's passwd home does not
//! usually exist).

use capsule_testkit as common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use capsule::host::fsrules::SECRETS;
use common::*;
use serde_json::{json, Value};

/// For each argument `r:PATH` prints `r:PATH=` and what the sandbox shows
/// there: `missing`, `dir:<entries,>` or `file:<content|>`; for `w:PATH`,
/// `ok` or `denied` for appending to the file, or creating
/// `written-in-sandbox` in the directory.
const SCRIPT: &str = r#"
for a in "$@"; do
  p=${a#?:}
  case $a in
  r:*) if [ -d "$p" ]; then s="dir:$(ls -A "$p" | tr '\n' ,)"
       elif [ -e "$p" ]; then s="file:$(cat "$p" 2>&1 | tr '\n' '|')"
       else s=missing; fi ;;
  w:*) if [ -d "$p" ]; then t="$p/written-in-sandbox"; else t="$p"; fi
       if (echo sandbox >> "$t") 2>/dev/null; then s=ok; else s=denied; fi ;;
  esac
  printf '%s=%s\n' "$a" "$s"
done
"#;

/// `capsule run -q OPTS -- sh -c SCRIPT sh CHECKS...` with `HOME=home`.
fn look(home: Option<&Path>, opts: &[&str], checks: &[String]) -> Out {
    let mut c = capsule(&["run", "-q"]);
    c.args(opts).args(&["--", "/bin/sh", "-c", SCRIPT, "sh"]).args(checks);
    if let Some(h) = home {
        c.env("HOME", h.to_str().unwrap());
    }
    c.run()
}

fn r(p: &Path) -> String {
    format!("r:{}", p.display())
}

fn w(p: &Path) -> String {
    format!("w:{}", p.display())
}

/// Runs the checks and returns what the sandbox saw, asserting success.
#[track_caller]
fn seen(home: Option<&Path>, opts: &[&str], checks: &[String]) -> Kv {
    let out = look(home, opts, checks);
    out.assert_code(0);
    let kv = out.kv();
    for c in checks {
        assert!(kv.get(c).is_some(), "no answer for {c}; {}", out.describe());
    }
    kv
}

/// The capsule run failed before the program ran, with a message holding
/// every one of `needles`.
#[track_caller]
fn refused(out: &Out, needles: &[&str]) {
    out.assert_code(125);
    assert!(out.stdout.is_empty(), "the program ran: {}", out.describe());
    for n in needles {
        assert!(out.stderr.contains(n), "the error does not say `{n}`; {}", out.describe());
    }
}

/// A home in the test's scratch directory, owned by the test user.
fn home(dir: &Scratch) -> PathBuf {
    dir.mkdir("home")
}

/// Creates the file `rel` (and its parents) under `base`, owned by the
/// test user.
fn put(base: &Path, rel: &str, content: &str) -> PathBuf {
    let p = base.join(rel);
    let mut d = base.to_path_buf();
    for c in Path::new(rel).parent().into_iter().flat_map(|p| p.components()) {
        d.push(c);
        if !d.exists() {
            std::fs::create_dir(&d).unwrap();
            chown_to_user(&d);
        }
    }
    std::fs::write(&p, content).unwrap();
    chown_to_user(&p);
    p
}

// ---------------------------------------------------------------- default secrets

/// Every path of the default list is hidden (each made a directory holding
/// a secret here), and secrets that are files (`.netrc`,
/// `.docker/config.json`, ...) read empty; neither can be written; what
/// is next to them stays visible; the host's files are unchanged.
#[test]
fn default_secrets_are_hidden() {
    require!("default_secrets_are_hidden", userns_available());
    let dir = Scratch::new("fs-secrets");
    let home_d = home(&dir);
    let mut checks = Vec::new();
    for s in SECRETS {
        let rel = s.trim_start_matches("~/");
        let inner = put(&home_d, &format!("{rel}/secret"), "SECRET");
        checks.push(r(&home_d.join(rel)));
        checks.push(r(&inner));
        checks.push(w(&home_d.join(rel)));
    }
    let out = look(Some(&home_d), &[], &checks);
    out.assert_code(0);
    let kv = out.kv();
    for s in SECRETS {
        let p = home_d.join(s.trim_start_matches("~/"));
        assert_eq!(kv.get(&r(&p)), Some("dir:"), "{s} not hidden; {}", out.describe());
        assert_eq!(kv.get(&r(&p.join("secret"))), Some("missing"), "{s}; {}", out.describe());
        assert_eq!(kv.get(&w(&p)), Some("denied"), "{s} writable; {}", out.describe());
        assert_eq!(std::fs::read_to_string(p.join("secret")).unwrap(), "SECRET");
        assert!(!p.join("written-in-sandbox").exists());
    }

    // Secrets that are files, beside files that are not.
    let dir = Scratch::new("fs-secret-files");
    let home_d = home(&dir);
    let files =
        [".netrc", ".docker/config.json", ".git-credentials", ".cargo/credentials.toml", ".config/gh/hosts.yml"];
    let others = ["notes.txt", ".docker/daemon.json", ".cargo/config.toml", ".config/gh/config.yml"];
    let mut checks = Vec::new();
    for f in files {
        checks.push(r(&put(&home_d, f, "TOKEN")));
        checks.push(w(&home_d.join(f)));
    }
    for f in others {
        checks.push(r(&put(&home_d, f, "plain")));
    }
    let out = look(Some(&home_d), &[], &checks);
    out.assert_code(0);
    let kv = out.kv();
    for f in files {
        let p = home_d.join(f);
        assert_eq!(kv.get(&r(&p)), Some("file:"), "{f} not hidden; {}", out.describe());
        assert_eq!(kv.get(&w(&p)), Some("denied"), "{f} writable; {}", out.describe());
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "TOKEN", "{f} changed on the host");
    }
    for f in others {
        assert_eq!(kv.get(&r(&home_d.join(f))), Some("file:plain"), "{f} hidden too; {}", out.describe());
    }
}

/// `--allow ~/.ssh` (or the profile's `allow`) shows one secret again and
/// no other; `--no-hide-secrets` (or `hide_secrets = false`) shows them all.
#[test]
fn allow_and_no_hide_secrets_show_them_again() {
    require!("allow_and_no_hide_secrets_show_them_again", userns_available());
    let dir = Scratch::new("fs-allow");
    let home_d = home(&dir);
    let key = put(&home_d, ".ssh/id_ed25519", "KEY");
    let aws = put(&home_d, ".aws/credentials", "AWS");
    let netrc = put(&home_d, ".netrc", "NETRC");
    let checks = [r(&key), r(&aws), r(&netrc)];
    let want = |kv: &Kv, k: &str, a: &str, n: &str| {
        assert_eq!((kv.must(&checks[0]), kv.must(&checks[1]), kv.must(&checks[2])), (k, a, n), "{kv:?}");
    };
    want(&seen(Some(&home_d), &[], &checks), "missing", "missing", "file:");
    want(&seen(Some(&home_d), &["--allow", "~/.ssh"], &checks), "file:KEY", "missing", "file:");
    let abs = home_d.join(".netrc").display().to_string();
    want(&seen(Some(&home_d), &["--allow", &abs], &checks), "missing", "missing", "file:NETRC");
    want(&seen(Some(&home_d), &["--no-hide-secrets"], &checks), "file:KEY", "file:AWS", "file:NETRC");
    // The same from profiles.
    let prof = dir.write("allow.toml", b"[filesystem]\nallow = [\"~/.aws\"]\n").display().to_string();
    want(&seen(Some(&home_d), &["--profile", &prof], &checks), "missing", "file:AWS", "file:");
    let prof = dir.write("off.toml", b"[filesystem]\nhide_secrets = false\n").display().to_string();
    want(&seen(Some(&home_d), &["--profile", &prof], &checks), "file:KEY", "file:AWS", "file:NETRC");
    // A flag overrides the profile's rule for the same path.
    let prof = dir.write("hide.toml", b"[filesystem]\nhide = [\"~/.ssh\"]\n").display().to_string();
    want(&seen(Some(&home_d), &["--profile", &prof, "--allow", "~/.ssh"], &checks), "file:KEY", "missing", "file:");
}

/// The common credentials the default list lacked (database
/// passwords, cloud and registry tokens, shell histories) are hidden, files
/// and directories alike; what is next to them stays visible.
#[test]
fn common_credentials_are_hidden() {
    require!("common_credentials_are_hidden", userns_available());
    let dir = Scratch::new("fs-credentials");
    let home_d = home(&dir);
    let files = [
        ".pgpass",
        ".my.cnf",
        ".s3cfg",
        ".bash_history",
        ".zsh_history",
        ".local/share/fish/fish_history",
        ".python_history",
        ".psql_history",
        ".mysql_history",
        ".node_repl_history",
        ".lesshst",
        ".gradle/gradle.properties",
        ".m2/settings.xml",
        ".config/pip/pip.conf",
        ".pip/pip.conf",
        ".config/doctl/config.yaml",
        ".oci/config",
    ];
    let others = [
        ".gradle/init.gradle",
        ".m2/repository/x.pom",
        ".config/pip/other.conf",
        ".local/share/fish/other",
        "notes.txt",
    ];
    let mut checks = Vec::new();
    for f in files {
        checks.push(r(&put(&home_d, f, "TOKEN")));
        checks.push(w(&home_d.join(f)));
    }
    for f in others {
        checks.push(r(&put(&home_d, f, "plain")));
    }
    let out = look(Some(&home_d), &[], &checks);
    out.assert_code(0);
    let kv = out.kv();
    for f in files {
        let p = home_d.join(f);
        let want = if f.starts_with(".config/doctl/") || f.starts_with(".oci/") { "missing" } else { "file:" };
        assert_eq!(kv.get(&r(&p)), Some(want), "{f} not hidden; {}", out.describe());
        assert_ne!(kv.get(&w(&p)), Some("ok"), "{f} writable; {}", out.describe());
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "TOKEN", "{f} changed on the host");
    }
    for f in others {
        assert_eq!(kv.get(&r(&home_d.join(f))), Some("file:plain"), "{f} hidden too; {}", out.describe());
    }
}

/// With `HOME` pointing elsewhere (CI, `sudo -H`), the secrets
/// of the caller's passwd home are hidden too, not only `$HOME`'s; `~` (and
/// so `--allow ~/.ssh`) stays `$HOME`'s.
#[test]
fn secrets_of_the_passwd_home_are_hidden_too() {
    require!("secrets_of_the_passwd_home_are_hidden_too", userns_available());
    let pw = passwd_home_of(h().uid).expect("the test user has a passwd entry");
    if !pw.is_absolute() || pw.parent().is_none() || pw.components().any(|c| c == std::path::Component::ParentDir) {
        skip(
            "secrets_of_the_passwd_home_are_hidden_too",
            &format!("the test user's home {} is not usable", pw.display()),
        );
        return;
    }
    // The test user's home usually does not exist: made for the test
    // (what it made is removed after), a key file of its own in ~/.ssh.
    struct Undo(PathBuf, Option<PathBuf>);
    impl Drop for Undo {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
            if let Some(made) = &self.1 {
                let _ = std::fs::remove_dir_all(made);
            }
        }
    }
    let mut made = None;
    let mut d = PathBuf::from("/");
    for c in pw.join(".ssh").components().skip(1) {
        d.push(c);
        if !d.exists() {
            std::fs::create_dir(&d).unwrap();
            std::fs::set_permissions(&d, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
            chown_to_user(&d);
            made.get_or_insert_with(|| d.clone());
        }
    }
    let key = pw.join(".ssh").join(unique("capsule-test-key"));
    let _undo = Undo(key.clone(), made);
    std::fs::write(&key, "PASSWD-HOME-KEY").unwrap();
    chown_to_user(&key);
    let dir = Scratch::new("fs-passwd-home");
    let home_d = home(&dir);
    let ci_key = put(&home_d, ".ssh/id", "CI-KEY");
    let checks = [r(&key), r(&ci_key)];
    let got = |kv: &Kv| (kv.must(&checks[0]).to_string(), kv.must(&checks[1]).to_string());
    let kv = seen(Some(&home_d), &[], &checks);
    assert_eq!(
        got(&kv),
        ("missing".into(), "missing".into()),
        "HOME={}, passwd home {}",
        home_d.display(),
        pw.display()
    );
    let kv = seen(Some(&home_d), &["--allow", "~/.ssh"], &checks);
    assert_eq!(got(&kv), ("missing".into(), "file:CI-KEY".into()), "--allow ~/.ssh is $HOME's");
    let kv = seen(Some(&home_d), &["--no-hide-secrets"], &checks);
    assert_eq!(got(&kv), ("file:PASSWD-HOME-KEY".into(), "file:CI-KEY".into()));
    // HOME is the passwd home: hidden once, as before.
    let kv = seen(Some(&pw), &[], &[r(&key)]);
    assert_eq!(kv.must(&r(&key)), "missing");
}

// ---------------------------------------------------------------- ~ expansion

/// `~` is `$HOME` as capsule's caller has it: the rules and the default
/// secrets follow it; without a usable `$HOME` it is the caller's home in
/// /etc/passwd.
#[test]
fn tilde_follows_home() {
    require!("tilde_follows_home", userns_available());
    let dir = Scratch::new("fs-tilde");
    let a = dir.mkdir("a");
    let b = dir.mkdir("b");
    for h in [&a, &b] {
        put(h, "x/f", "X");
        put(h, ".ssh/id", "KEY");
    }
    let checks = [r(&a.join("x/f")), r(&a.join(".ssh/id")), r(&b.join("x/f")), r(&b.join(".ssh/id"))];
    let kv = seen(Some(&a), &["--hide", "~/x"], &checks);
    let got: Vec<&str> = checks.iter().map(|c| kv.must(c)).collect();
    assert_eq!(got, ["missing", "missing", "file:X", "file:KEY"], "HOME={}", a.display());
    let kv = seen(Some(&b), &["--hide", "~/x"], &checks);
    let got: Vec<&str> = checks.iter().map(|c| kv.must(c)).collect();
    assert_eq!(got, ["file:X", "file:KEY", "missing", "missing"], "HOME={}", b.display());
    // `~` alone, and `~/` in a profile.
    let prof = dir.write("p.toml", b"[filesystem]\nhide = [\"~/\"]\n").display().to_string();
    let kv = seen(Some(&a), &["--profile", &prof], &[r(&a)]);
    assert_eq!(kv.must(&r(&a)), "dir:");
    let kv = seen(Some(&a), &["--hide", "~"], &[r(&a)]);
    assert_eq!(kv.must(&r(&a)), "dir:");

    // No HOME (or a relative one): the passwd entry of the caller, named
    // by the error for a missing writable path.
    let passwd_home = passwd_home_of(h().uid).expect("the test user has a passwd entry");
    let usable = passwd_home.is_absolute() && !passwd_home.components().any(|c| c == std::path::Component::ParentDir);
    for env_home in [None, Some(Path::new("relative/home"))] {
        let out = look(env_home, &["--writable", "~/capsule-no-such-dir"], &[]);
        if usable {
            let want = passwd_home.join("capsule-no-such-dir").display().to_string();
            refused(&out, &["filesystem.writable", &want]);
        } else {
            refused(&out, &["filesystem.writable[0]", "home is unknown"]);
        }
    }
    if usable && passwd_home.is_dir() && passwd_home != Path::new("/") {
        // The real passwd home exists here: `~` hides it.
        let kv = seen(None, &["--hide", "~"], &[r(&passwd_home)]);
        assert_eq!(kv.must(&r(&passwd_home)), "dir:");
    } else {
        eprintln!("tilde_follows_home: {} does not exist; checked through the error only", passwd_home.display());
    }
}

fn passwd_home_of(uid: u32) -> Option<PathBuf> {
    let text = std::fs::read_to_string("/etc/passwd").ok()?;
    text.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() >= 7 && f[2].parse::<u32>().ok() == Some(uid)).then(|| PathBuf::from(f[5]))
    })
}

// ---------------------------------------------------------------- the rules

/// A profile with every kind of rule, MBOX-style: the home hidden, a
/// project in it shown again, two of its directories writable (writes
/// reach the host), one read-only beneath a writable one, one hidden
/// beneath a writable one.
#[test]
fn profile_with_each_rule() {
    require!("profile_with_each_rule", userns_available());
    let dir = Scratch::new("fs-profile");
    let home_d = home(&dir);
    put(&home_d, "private/diary", "DEAR DIARY");
    let src = put(&home_d, "proj/src/main.c", "int main;");
    let notes = put(&home_d, "proj/notes", "NOTES");
    let out_d = dir.mkdir("home/proj/out");
    let cached = put(&home_d, "proj/out/cache/blob", "CACHED");
    let data = dir.mkdir("home/proj/data");
    let keep = put(&home_d, "proj/data/ro/keep", "KEEP");
    let prof = dir.write(
        "build.toml",
        br#"
[filesystem]
hide = ["~", "~/proj/out/cache"]
allow = ["~/proj"]
writable = ["~/proj/out", "~/proj/data"]
read_only = ["~/proj/data/ro"]
"#,
    );
    let prof = prof.display().to_string();
    let checks = [
        r(&home_d),
        r(&home_d.join("private/diary")),
        r(&src),
        r(&notes),
        w(&notes),
        w(&home_d.join("proj")),
        w(&out_d),
        r(&out_d.join("cache")),
        r(&cached),
        w(&out_d.join("cache")),
        w(&data),
        r(&keep),
        w(&keep),
        w(&data.join("ro")),
        w(&home_d),
    ];
    let kv = seen(Some(&home_d), &["--profile", &prof], &checks);
    let got: Vec<(&str, &str)> = checks.iter().map(|c| (c.as_str(), kv.must(c))).collect();
    let want = [
        "dir:proj,",      // the hidden home shows only the allowed project
        "missing",        // the rest of it is gone
        "file:int main;", // allowed
        "file:NOTES",
        "denied", // allowed means visible as the host view: read-only
        "denied",
        "ok",   // writable
        "dir:", // hidden beneath a writable path
        "missing",
        "denied",
        "ok",
        "file:KEEP", // read-only beneath a writable path
        "denied",
        "denied",
        "denied", // the cover of the hidden home
    ];
    for ((c, g), w) in got.iter().zip(want) {
        assert_eq!(*g, w, "{c}: all: {got:#?}");
    }
    // The writes reached the host; nothing else changed there.
    assert_eq!(std::fs::read_to_string(out_d.join("written-in-sandbox")).unwrap(), "sandbox\n");
    assert_eq!(std::fs::read_to_string(data.join("written-in-sandbox")).unwrap(), "sandbox\n");
    assert_eq!(std::fs::read_to_string(&keep).unwrap(), "KEEP");
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "NOTES");
    assert!(!data.join("ro/written-in-sandbox").exists());
    assert!(!out_d.join("cache/written-in-sandbox").exists());
    assert_eq!(std::fs::read_to_string(&cached).unwrap(), "CACHED");
}

/// `--read-only` beneath `--writable` stays read-only, whatever way the
/// program tries (write, create, remove, rename over it); `--writable`
/// writes land on the host.
#[test]
fn read_only_under_writable_stays_read_only() {
    require!("read_only_under_writable_stays_read_only", userns_available());
    let dir = Scratch::new("fs-ro");
    let top = dir.mkdir("top");
    let ro = dir.mkdir("top/ro");
    let f = dir.write("top/ro/f", b"ORIGINAL");
    let (t, rd, fs) = (top.display().to_string(), ro.display().to_string(), f.display().to_string());
    let script = format!(
        "echo top > {t}/new && echo new-ok; echo x >> {fs} || echo append-denied; touch {rd}/g || echo create-denied; \
         rm -f {fs} || echo rm-denied; mv {rd} {t}/moved || echo mv-denied; rm -rf {rd} 2>/dev/null; cat {fs}"
    );
    let out = capsule(&["run", "-q", "--writable", &t, "--read-only", &rd, "--", "/bin/sh", "-c", &script]).run();
    out.assert_code(0);
    for w in ["new-ok", "append-denied", "create-denied", "rm-denied", "mv-denied"] {
        assert!(out.stdout.lines().any(|l| l == w), "no `{w}`; {}", out.describe());
    }
    assert!(out.stdout.ends_with("ORIGINAL"), "{}", out.describe());
    assert_eq!(std::fs::read_to_string(top.join("new")).unwrap(), "top\n");
    assert_eq!(std::fs::read_to_string(&f).unwrap(), "ORIGINAL");
    assert_eq!(std::fs::read_dir(&ro).unwrap().count(), 1);
    // Control: without --read-only the same directory is writable.
    let out = capsule(&["run", "-q", "--writable", &t, "--", "/bin/sh", "-c", &format!("echo x >> {fs}")]).run();
    out.assert_code(0);
    assert_eq!(std::fs::read_to_string(&f).unwrap(), "ORIGINALx\n");
}

/// `--hide` covers files and directories outside the home too, also when
/// a mount operation made them writable (rules apply after the mounts);
/// a missing path is fine; `--allow` of a path inside shows it again
/// read-only.
#[test]
fn hidden_paths_are_unreadable() {
    require!("hidden_paths_are_unreadable", userns_available());
    let dir = Scratch::new("fs-hide");
    let d = dir.mkdir("d");
    let f = dir.write("d/file", b"FILE");
    let sub = dir.mkdir("d/sub");
    let inner = dir.write("d/sub/inner", b"INNER");
    let shown = dir.write("d/sub/shown", b"SHOWN");
    let ds = d.display().to_string();
    let checks = [r(&f), w(&f), r(&sub), r(&inner), w(&sub), r(&d.join("nope"))];
    let kv = seen(
        None,
        &[
            "--bind",
            &ds,
            &ds,
            "--hide",
            &f.display().to_string(),
            "--hide",
            &sub.display().to_string(),
            "--hide",
            &d.join("nope").display().to_string(),
        ],
        &checks,
    );
    let got: Vec<&str> = checks.iter().map(|c| kv.must(c)).collect();
    assert_eq!(got, ["file:", "denied", "dir:", "missing", "denied", "missing"]);
    assert_eq!(std::fs::read_to_string(&f).unwrap(), "FILE");
    // A hidden directory with one file shown again inside.
    let checks = [r(&sub), r(&inner), r(&shown), w(&shown)];
    let kv = seen(None, &["--hide", &sub.display().to_string(), "--allow", &shown.display().to_string()], &checks);
    let got: Vec<&str> = checks.iter().map(|c| kv.must(c)).collect();
    assert_eq!(got, ["dir:shown,", "missing", "file:SHOWN", "denied"]);
}

/// MBOX's example: `hide ~` and `allow .` from a project directory.
#[test]
fn hide_home_allow_current_directory() {
    require!("hide_home_allow_current_directory", userns_available());
    let dir = Scratch::new("fs-mbox");
    let home_d = home(&dir);
    let proj = dir.mkdir("home/proj");
    let f = put(&home_d, "proj/configure", "CONFIGURE");
    put(&home_d, "other/file", "OTHER");
    let mut c = capsule(&["run", "-q", "--hide", "~", "--allow", ".", "--", "/bin/sh", "-c", SCRIPT, "sh"]);
    c.args(&[r(&home_d), r(&f), r(&proj), "r:.".to_string()]).env("HOME", home_d.to_str().unwrap()).cwd(&proj);
    let out = c.run();
    out.assert_code(0);
    let kv = out.kv();
    assert_eq!(kv.must(&r(&home_d)), "dir:proj,", "{}", out.describe());
    assert_eq!(kv.must(&r(&f)), "file:CONFIGURE", "{}", out.describe());
    assert_eq!(kv.must("r:."), "dir:configure,", "the working directory; {}", out.describe());
}

/// With `--empty-root` the rules make host paths visible at the same
/// path; the default secrets are hidden beneath them.
#[test]
fn empty_root_rules() {
    require!("empty_root_rules", userns_available());
    let dir = Scratch::new("fs-empty");
    let home_d = home(&dir);
    let key = put(&home_d, ".ssh/id", "KEY");
    let notes = put(&home_d, "notes", "NOTES");
    let out_d = dir.mkdir("home/out");
    let opts = [
        "--empty-root",
        "--symlink",
        "usr/bin",
        "/bin",
        "--symlink",
        "usr/lib",
        "/lib",
        "--symlink",
        "usr/lib64",
        "/lib64",
        "--dev",
        "/dev",
        "--allow",
        "/usr",
        "--read-only",
        "~",
        "--writable",
        "~/out",
    ];
    let checks = [r(&key), r(&notes), w(&notes), w(&out_d), r(Path::new("/etc/passwd")), r(Path::new("/usr"))];
    let kv = seen(Some(&home_d), &opts, &checks);
    let got: Vec<&str> = checks.iter().map(|c| kv.must(c)).collect();
    assert_eq!(&got[..5], ["missing", "file:NOTES", "denied", "ok", "missing"]);
    assert!(got[5].starts_with("dir:") && got[5].contains("bin,"), "{got:?}");
    assert!(out_d.join("written-in-sandbox").exists());
    // Nothing of the home without a rule for it, so no secret to hide.
    let kv = seen(Some(&home_d), &opts[..14], &[r(&home_d)]);
    assert_eq!(kv.must(&r(&home_d)), "missing");
}

/// Bad rules are refused before anything runs, naming the field or flag
/// and the path.
#[test]
fn bad_rules_are_refused() {
    require!("bad_rules_are_refused", userns_available());
    let dir = Scratch::new("fs-bad");
    let home_d = home(&dir);
    let marker = dir.join("ran");
    let run = |opts: &[&str]| {
        let mut c = capsule(&["run", "-q"]);
        c.args(opts).args(&["--", "/bin/sh", "-c", &format!("echo ran; touch {}", marker.display())]);
        c.env("HOME", home_d.to_str().unwrap());
        c.run()
    };
    let profile = |name: &str, text: &str| dir.write(name, text.as_bytes()).display().to_string();
    let cases: Vec<(Vec<String>, Vec<String>)> = vec![
        (
            vec!["--writable".into(), "~/missing".into()],
            vec!["filesystem.writable".into(), home_d.join("missing").display().to_string()],
        ),
        (vec!["--hide".into(), "~root/x".into()], vec!["filesystem.hide[0]".into(), "~root".into()]),
        (vec!["--hide".into(), "/a/../b".into()], vec!["filesystem.hide[0]".into(), "..".into()]),
        (vec!["--read-only".into(), "/".into()], vec!["filesystem.read_only[0]".into(), "root".into()]),
        (vec!["--hide".into(), "".into()], vec!["filesystem.hide[0]".into(), "empty".into()]),
        (
            vec!["--allow".into(), "~/x".into(), "--hide".into(), home_d.join("x/").display().to_string()],
            vec!["filesystem.hide[0]".into(), "also in `allow`".into(), "~/x".into()],
        ),
        (
            vec!["--profile".into(), profile("rel.toml", "[filesystem]\nallow = [\"src\"]\n")],
            vec!["filesystem.allow[0]".into(), "`src` must be an absolute path".into()],
        ),
        (
            vec![
                "--profile".into(),
                profile("both.toml", "[filesystem]\nwritable = [\"/tmp\"]\nread_only = [\"/tmp/\"]\n"),
            ],
            vec!["filesystem.writable[0]".into(), "also in `read_only`".into()],
        ),
        (
            vec!["--profile".into(), profile("nul.toml", "[filesystem]\nhide = [\"/a\\u0000b\"]\n")],
            vec!["filesystem.hide[0]".into(), "NUL".into()],
        ),
        (
            vec!["--profile".into(), profile("typo.toml", "[filesystem]\nhidden = [\"~/x\"]\n")],
            vec!["filesystem.hidden".into(), "unknown field".into()],
        ),
        (
            vec!["--profile".into(), profile("type.toml", "[filesystem]\nhide_secrets = \"no\"\n")],
            vec!["filesystem.hide_secrets".into()],
        ),
        (
            vec!["--tmpfs".into(), "/mnt".into(), "--hide".into(), "/x".into(), "--noexec".into()],
            vec!["--noexec".into()],
        ),
    ];
    for (opts, needles) in cases {
        let o: Vec<&str> = opts.iter().map(String::as_str).collect();
        let n: Vec<&str> = needles.iter().map(String::as_str).collect();
        let out = run(&o);
        refused(&out, &n);
        assert!(!marker.exists(), "{opts:?}: the program ran");
    }
}

// ---------------------------------------------------------------- serve

/// `capsule serve` takes the same rules in the spec (`~` is the server's
/// caller's home), and a PID 1 prepared ahead is used only while the
/// paths it hid are the same: a secret created, or deleted and made
/// again, after it was prepared is still hidden.
#[test]
fn serve_rules_and_prepared_runs() {
    require!("serve_rules_and_prepared_runs", userns_available());
    let dir = Scratch::new("fs-serve");
    let home_d = home(&dir);
    let x = put(&home_d, "x/f", "X");
    let mut c = capsule(&["serve"]);
    c.env("HOME", home_d.to_str().unwrap())
        .stdio(Stdio::piped(), Stdio::piped(), Stdio::piped())
        .timeout(Duration::from_secs(120));
    let mut s = c.spawn();
    let mut stdin = s.child.stdin.take().unwrap();
    let key = home_d.join(".ssh/id");
    let mut ask = |id: &str, spec: Value| -> Value {
        writeln!(stdin, "{}", json!({"id": id, "spec": spec})).unwrap();
        stdin.flush().unwrap();
        let line = s.next_line(Duration::from_secs(60)).unwrap_or_else(|| panic!("no answer to {id}"));
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["id"], id, "{v}");
        v
    };
    let cat = |p: &Path, extra: Value| {
        let mut spec = json!({
            "argv": ["/bin/sh", "-c", format!("cat {} 2>&1 || true", p.display())],
            "stdout": {"capture": 1000},
        });
        for (k, v) in extra.as_object().unwrap() {
            spec[k] = v.clone();
        }
        spec
    };
    let text = |v: &Value| v["result"]["stdout"]["text"].as_str().unwrap_or_else(|| panic!("{v}")).to_string();
    let v = ask("hide", cat(&x, json!({"filesystem": {"hide": ["~/x"]}})));
    assert!(text(&v).contains("No such file"), "{v}");
    let v = ask("error", cat(&x, json!({"filesystem": {"hide": ["~x"]}})));
    let e = v["error"].as_str().or(v["result"]["error"].as_str()).unwrap_or_else(|| panic!("{v}"));
    assert!(e.contains("filesystem.hide[0]") && e.contains("~x"), "{v}");
    // Runs of one shape: the next PID 1 is prepared while idle.
    let v = ask("before", cat(&key, json!({})));
    assert!(text(&v).contains("No such file"), "{v}");
    std::thread::sleep(Duration::from_millis(500));
    put(&home_d, ".ssh/id", "KEY");
    let v = ask("created", cat(&key, json!({})));
    assert!(text(&v).contains("No such file"), "a secret made after the run was prepared is visible: {v}");
    std::thread::sleep(Duration::from_millis(500));
    std::fs::rename(home_d.join(".ssh"), dir.join("old-ssh")).unwrap();
    put(&home_d, ".ssh/id", "NEW KEY");
    let v = ask("replaced", cat(&key, json!({})));
    assert!(text(&v).contains("No such file"), "a secret made again after the run was prepared is visible: {v}");
    let v = ask("allowed", cat(&key, json!({"filesystem": {"allow": ["~/.ssh"]}})));
    assert_eq!(text(&v), "NEW KEY", "{v}");
    drop(stdin);
    s.wait().assert_code(0);
}

/// A path shown again is found without following a link of yours on the
/// way (a sandboxed run could have planted it, to a secret): the run is
/// refused, naming the link. The same path as a directory is shown.
#[test]
fn shown_paths_do_not_follow_your_links() {
    require!("shown_paths_do_not_follow_your_links", userns_available());
    let dir = Scratch::new("fs-links");
    let home_d = home(&dir);
    put(&home_d, ".ssh/id", "KEY");
    dir.mkdir("home/proj");
    let planted = home_d.join("proj/out");
    std::os::unix::fs::symlink(home_d.join(".ssh"), &planted).unwrap();
    if h().is_root {
        std::os::unix::fs::lchown(&planted, Some(h().uid), Some(h().gid)).unwrap();
    }
    for rule in ["--allow", "--read-only"] {
        let out = look(Some(&home_d), &["--hide", "~", rule, "~/proj/out"], &[r(&planted.join("id"))]);
        refused(&out, &["is a symbolic link", &planted.display().to_string()]);
    }
    std::fs::remove_file(&planted).unwrap();
    put(&home_d, "proj/out/result", "RESULT");
    let kv = seen(Some(&home_d), &["--hide", "~", "--allow", "~/proj/out"], &[r(&planted.join("result"))]);
    assert_eq!(kv.must(&r(&planted.join("result"))), "file:RESULT");
}
