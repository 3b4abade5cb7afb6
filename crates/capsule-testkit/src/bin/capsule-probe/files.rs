//! Files and mounts: the running binary, read-only paths, stat.

use std::ffi::CString;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;

use crate::{cstr, io_res, out, res};

pub(crate) fn cmd_open_exe(write: bool) {
    let mut entries: Vec<(i32, String)> = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            if let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() {
                entries.push((pid, format!("/proc/{pid}/exe")));
            }
        }
    }
    // PID 1 also when /proc does not list it (it is hidden in capsule).
    if !entries.iter().any(|&(pid, _)| pid == 1) {
        entries.push((1, "/proc/1/exe".into()));
    }
    entries.sort();
    entries.push((-1, "/proc/self/exe".into()));
    entries.push((-2, "/proc/thread-self/exe".into()));
    out("count", entries.len());
    let mut any_writable = false;
    for (pid, path) in entries {
        let key = if pid >= 0 {
            format!("exe.{pid}")
        } else {
            format!("exe.{}", path.trim_start_matches("/proc/").trim_end_matches("/exe"))
        };
        let target =
            std::fs::read_link(&path).map(|p| p.display().to_string()).unwrap_or_else(|e| io_res::<()>(&Err(e)));
        out(&format!("{key}.link"), target);
        let c = cstr(&path);
        for (name, flags) in
            [("wronly", libc::O_WRONLY), ("rdwr", libc::O_RDWR), ("append", libc::O_WRONLY | libc::O_APPEND)]
        {
            // SAFETY: valid C string; fd closed below.
            let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC) };
            out(&format!("{key}.{name}"), res(fd as i64));
            if fd >= 0 {
                any_writable = true;
                if write {
                    try_corrupt(fd, &format!("{key}.{name}"));
                }
                // SAFETY: fd is ours.
                unsafe { libc::close(fd) };
            }
        }
        // O_PATH, then reopen through /proc/self/fd/N for writing.
        // SAFETY: valid C string.
        let pfd = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
        out(&format!("{key}.opath"), res(pfd as i64));
        if pfd >= 0 {
            let re = cstr(&format!("/proc/self/fd/{pfd}"));
            for (name, flags) in [("reopen_wronly", libc::O_WRONLY), ("reopen_rdwr", libc::O_RDWR)] {
                // SAFETY: valid C string.
                let fd = unsafe { libc::open(re.as_ptr(), flags | libc::O_CLOEXEC) };
                out(&format!("{key}.{name}"), res(fd as i64));
                if fd >= 0 {
                    any_writable = true;
                    if write {
                        try_corrupt(fd, &format!("{key}.{name}"));
                    }
                    // SAFETY: fd is ours.
                    unsafe { libc::close(fd) };
                }
            }
            // SAFETY: pfd is ours.
            unsafe { libc::close(pfd) };
        }
    }
    out("any_writable", any_writable as i32);
}

/// What an attacker would do with a writable exe: overwrite its start.
fn try_corrupt(fd: i32, key: &str) {
    let data = b"PWNED-BY-CAPSULE-PROBE";
    // SAFETY: data is valid for data.len() bytes.
    let r = unsafe { libc::pwrite(fd, data.as_ptr().cast(), data.len(), 0) };
    out(&format!("{key}.pwrite"), res(r as i64));
}

pub(crate) fn try_write(path: &str, data: &[u8]) -> String {
    let r = std::fs::OpenOptions::new().create(true).append(true).open(path).and_then(|mut f| f.write_all(data));
    io_res(&r)
}

/// One round of write attempts on each path; returns the observations.
fn write_round(tag: &str, paths: &[String]) {
    for (i, p) in paths.iter().enumerate() {
        let md = std::fs::metadata(p);
        let key = format!("{tag}.{i}");
        match md {
            Ok(m) if m.is_dir() => {
                let f = format!("{}/capsule-probe-{tag}", p.trim_end_matches('/'));
                out(&format!("{key}.create"), try_write(&f, b"x\n"));
                let d = format!("{}/capsule-probe-dir-{tag}", p.trim_end_matches('/'));
                out(&format!("{key}.mkdir"), io_res(&std::fs::create_dir(&d)));
            }
            Ok(_) => {
                out(&format!("{key}.append"), try_write(p, b"capsule-probe was here\n"));
                let c = cstr(p);
                // SAFETY: valid C string.
                let fd = unsafe { libc::open(c.as_ptr(), libc::O_WRONLY | libc::O_TRUNC) };
                out(&format!("{key}.truncate"), res(fd as i64));
                if fd >= 0 {
                    // SAFETY: fd is ours.
                    unsafe { libc::close(fd) };
                }
                // SAFETY: valid C string.
                out(&format!("{key}.chmod"), res(unsafe { libc::chmod(c.as_ptr(), 0o777) } as i64));
                let renamed = format!("{p}.renamed");
                out(&format!("{key}.rename"), io_res(&std::fs::rename(p, &renamed)));
                out(&format!("{key}.unlink"), io_res(&std::fs::remove_file(p)));
            }
            Err(e) => out(&format!("{key}.stat"), io_res::<()>(&Err(e))),
        }
    }
}

/// The mount point (from /proc/self/mountinfo) holding `path`.
fn mount_point_of(path: &str) -> String {
    let mi = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut best = "/".to_string();
    for l in mi.lines() {
        if let Some(mp) = l.split_whitespace().nth(4) {
            let mp = mp.replace("\\040", " ");
            let under = path == mp || mp == "/" || path.starts_with(&format!("{}/", mp.trim_end_matches('/')));
            if under && mp.len() >= best.len() {
                best = mp;
            }
        }
    }
    best
}

pub(crate) fn cmd_write_ro(paths: &[String]) {
    write_round("plain", paths);
    // SAFETY: getuid/getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    // SAFETY: unshare takes only flags.
    let r = unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) };
    out("unshare", res(r as i64));
    if r != 0 {
        return;
    }
    out("setgroups", io_res(&std::fs::write("/proc/self/setgroups", "deny")));
    out("uid_map", io_res(&std::fs::write("/proc/self/uid_map", format!("0 {uid} 1"))));
    out("gid_map", io_res(&std::fs::write("/proc/self/gid_map", format!("0 {gid} 1"))));
    write_round("nested", paths);

    let null = std::ptr::null::<libc::c_char>();
    for (i, p) in paths.iter().enumerate() {
        let target = if std::fs::metadata(p).map(|m| m.is_dir()).unwrap_or(false) {
            p.clone()
        } else {
            std::path::Path::new(p).parent().map(|x| x.display().to_string()).unwrap_or("/".into())
        };
        let mp = mount_point_of(&target);
        out(&format!("target.{i}"), &target);
        out(&format!("mountpoint.{i}"), &mp);
        let t = cstr(&target);
        let m = cstr(&mp);
        // SAFETY: all pointers are valid C strings or null where the
        // syscall allows it.
        unsafe {
            // Remount the bind mount and the superblock read-write.
            let r = libc::mount(null, m.as_ptr(), null, libc::MS_REMOUNT | libc::MS_BIND, std::ptr::null());
            out(&format!("remount_bind_rw.{i}"), res(r as i64));
            let r = libc::mount(null, m.as_ptr(), null, libc::MS_REMOUNT, std::ptr::null());
            out(&format!("remount_sb_rw.{i}"), res(r as i64));
            let r = libc::mount(null, c"/".as_ptr(), null, libc::MS_REMOUNT | libc::MS_BIND, std::ptr::null());
            out(&format!("remount_root_rw.{i}"), res(r as i64));
        }
        write_round(&format!("after_remount{i}"), paths);
        // SAFETY: as above.
        unsafe {
            // A fresh bind of the target onto itself, then remount it rw.
            let r = libc::mount(t.as_ptr(), t.as_ptr(), null, libc::MS_BIND | libc::MS_REC, std::ptr::null());
            out(&format!("self_bind.{i}"), res(r as i64));
            if r == 0 {
                let r = libc::mount(null, t.as_ptr(), null, libc::MS_REMOUNT | libc::MS_BIND, std::ptr::null());
                out(&format!("self_bind_remount_rw.{i}"), res(r as i64));
            }
        }
        write_round(&format!("after_selfbind{i}"), paths);
        // SAFETY: as above.
        unsafe {
            let r = libc::umount2(t.as_ptr(), libc::MNT_DETACH);
            out(&format!("umount_target.{i}"), res(r as i64));
            let r = libc::umount2(m.as_ptr(), libc::MNT_DETACH);
            out(&format!("umount_mountpoint.{i}"), res(r as i64));
            let r = libc::umount2(m.as_ptr(), libc::MNT_DETACH);
            out(&format!("umount_mountpoint_again.{i}"), res(r as i64));
        }
        write_round(&format!("after_umount{i}"), paths);
    }
    // Last, a tmpfs over each target: writes then go to the tmpfs, never to
    // the host (the test checks the host side). Done after all the other
    // rounds so their writes still aim at the host view.
    for (i, p) in paths.iter().enumerate() {
        let target = if std::fs::metadata(p).map(|m| m.is_dir()).unwrap_or(false) {
            p.clone()
        } else {
            std::path::Path::new(p).parent().map(|x| x.display().to_string()).unwrap_or("/".into())
        };
        let t = cstr(&target);
        let tmpfs = cstr("tmpfs");
        // SAFETY: valid C strings.
        let r = unsafe { libc::mount(tmpfs.as_ptr(), t.as_ptr(), tmpfs.as_ptr(), 0, std::ptr::null()) };
        out(&format!("tmpfs_over.{i}"), res(r as i64));
        write_round(&format!("after_tmpfs{i}"), paths);
    }
}

pub(crate) fn cmd_stat(p: &str) {
    let key = format!("stat.{p}");
    match std::fs::symlink_metadata(p) {
        Err(e) => out(&key, io_res::<()>(&Err(e))),
        Ok(m) => {
            use std::os::unix::fs::MetadataExt;
            let ft = m.file_type();
            let kind = if ft.is_dir() {
                "dir"
            } else if ft.is_file() {
                "file"
            } else if ft.is_symlink() {
                "symlink"
            } else {
                use std::os::unix::fs::FileTypeExt;
                if ft.is_char_device() {
                    "char"
                } else if ft.is_block_device() {
                    "block"
                } else if ft.is_fifo() {
                    "fifo"
                } else {
                    "socket"
                }
            };
            out(&key, "ok");
            out(&format!("{key}.type"), kind);
            out(&format!("{key}.size"), m.len());
            out(&format!("{key}.mode"), format!("{:o}", m.mode() & 0o7777));
            out(&format!("{key}.uid"), m.uid());
            let c = CString::new(std::path::Path::new(p).as_os_str().as_bytes()).unwrap_or_default();
            // SAFETY: statvfs/statfs are plain data; c is a valid C string.
            unsafe {
                let mut sv: libc::statvfs = std::mem::zeroed();
                if libc::statvfs(c.as_ptr(), &mut sv) == 0 {
                    out(&format!("{key}.readonly"), (sv.f_flag & libc::ST_RDONLY != 0) as i32);
                    out(&format!("{key}.noexec"), (sv.f_flag & libc::ST_NOEXEC != 0) as i32);
                    out(&format!("{key}.nosuid"), (sv.f_flag & libc::ST_NOSUID != 0) as i32);
                    out(&format!("{key}.nodev"), (sv.f_flag & libc::ST_NODEV != 0) as i32);
                    out(&format!("{key}.blocks"), sv.f_blocks * sv.f_frsize);
                }
                let mut sf: libc::statfs = std::mem::zeroed();
                if libc::statfs(c.as_ptr(), &mut sf) == 0 {
                    let t = sf.f_type as i64;
                    let name = match t {
                        0x01021994 => "tmpfs".to_string(),
                        0x9fa0 => "proc".to_string(),
                        0xef53 => "ext4".to_string(),
                        0x794c7630 => "overlayfs".to_string(),
                        0x62656572 => "sysfs".to_string(),
                        _ => format!("0x{t:x}"),
                    };
                    out(&format!("{key}.fstype"), name);
                }
            }
        }
    }
}
