//! The user and group database: the one lookup of `/etc/passwd` and
//! `/etc/group`, with `getent` for the entries only NSS knows (LDAP,
//! sssd). capsule is linked statically, and NSS modules loaded into a
//! static program crash it, so a dynamically linked `getent` asks for it.

use std::path::Path;
use std::process::{Command, Stdio};

/// Which database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Db {
    Passwd,
    Group,
}

impl Db {
    fn name(self) -> &'static str {
        match self {
            Db::Passwd => "passwd",
            Db::Group => "group",
        }
    }
}

/// What `pick` makes of the first entry of `db` for `id` (the third field)
/// that it accepts, looked for in `/etc/passwd` or `/etc/group`, then
/// through `getent`. `pick` gets the entry's fields split at `:`.
pub fn lookup<T>(db: Db, id: u32, pick: impl Fn(&[&str]) -> Option<T>) -> Option<T> {
    let file = std::fs::read_to_string(format!("/etc/{}", db.name())).ok();
    file.and_then(|text| find(&text, id, &pick)).or_else(|| find(&getent(db, id)?, id, &pick))
}

/// The name of `id` in `db`, if it has one.
pub fn name(db: Db, id: u32) -> Option<String> {
    lookup(db, id, |f| Some(f[0].to_string()))
}

/// The first line of an `/etc/passwd`- or `/etc/group`-style `text` for
/// `id` that `pick` accepts.
fn find<T>(text: &str, id: u32, pick: &impl Fn(&[&str]) -> Option<T>) -> Option<T> {
    text.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() > 2 && f[2].parse::<u32>().ok() == Some(id)).then(|| pick(&f)).flatten()
    })
}

/// `getent DB ID`'s output; None when it has no entry or cannot run.
fn getent(db: Db, id: u32) -> Option<String> {
    let getent = ["/usr/bin/getent", "/bin/getent"].into_iter().find(|p| Path::new(p).exists())?;
    let out = Command::new(getent)
        .args([db.name(), &id.to_string()])
        .env_clear()
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    String::from_utf8(out.stdout).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_first_accepted_entry() {
        let text = "root:x:0:0:root:/root:/bin/bash\nbad line\nme:x:1000:1000::/home/me:/bin/sh\nme2:x:1000:1000::/h:/bin/sh\n";
        assert_eq!(find(text, 1000, &|f| Some(f[0].to_string())), Some("me".into()));
        assert_eq!(find(text, 1000, &|f| (f[0] != "me").then(|| f[5].to_string())), Some("/h".into()));
        assert_eq!(find(text, 42, &|f| Some(f[0].to_string())), None);
    }

    #[test]
    fn getent_agrees_with_the_files() {
        assert_eq!(name(Db::Passwd, 0).as_deref(), Some("root"));
        assert_eq!(name(Db::Group, 0).as_deref(), Some("root"));
        if Path::new("/usr/bin/getent").exists() || Path::new("/bin/getent").exists() {
            let pick = |f: &[&str]| Some(f[0].to_string());
            assert_eq!(find(&getent(Db::Passwd, 0).unwrap(), 0, &pick).as_deref(), Some("root"));
        }
        assert_eq!(name(Db::Passwd, 0x7fff_fff0), None);
    }
}
