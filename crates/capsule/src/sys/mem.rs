//! Memory mappings: clone stacks, sealed memfd maps and the shared run arena.

use std::ffi::CStr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::ptr;

use super::{cvt, fcntl, owned, raw_syscall, write_all, SysResult};

/// A stack for [`clone_until_exec`](super::clone_until_exec) children: a private anonymous mapping,
/// unmapped on drop. A forked process gets its own copy-on-write copy, so
/// one stack serves every run of a supervisor.
pub struct Stack {
    pub(super) base: *mut libc::c_void,
    pub(super) len: usize,
}

/// mmap(2) at an address of the kernel's choice; the address or -errno.
///
/// # Safety
/// As mmap(2): `fd` must be -1 (anonymous) or a descriptor mapped as the
/// caller's uses of the mapping allow.
unsafe fn mmap(len: usize, prot: i32, flags: i32, fd: RawFd) -> SysResult<*mut libc::c_void> {
    // SAFETY: a new mapping at an address the kernel picks (addr 0, no
    // MAP_FIXED) replaces nothing; the rest is the caller's contract. fd
    // -1 is sign-extended.
    let r = cvt(unsafe { raw_syscall(libc::SYS_mmap, [0, len as u64, prot as u64, flags as u64, fd as u64, 0]) })?;
    Ok(r as usize as *mut libc::c_void)
}

/// munmap(2) of a mapping made by [`mmap`].
///
/// # Safety
/// Nothing may use `[base, base + len)` afterwards.
unsafe fn munmap(base: *mut libc::c_void, len: usize) {
    // SAFETY: the caller's contract.
    unsafe { raw_syscall(libc::SYS_munmap, [base as u64, len as u64, 0, 0, 0, 0]) };
}

impl Stack {
    pub fn new(len: usize) -> SysResult<Self> {
        // SAFETY: anonymous private mapping, no fd; checked for failure.
        let base = unsafe {
            mmap(
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK | libc::MAP_NORESERVE,
                -1,
            )
        }?;
        Ok(Stack { base, len })
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        // SAFETY: base/len are the mapping created in new().
        unsafe { munmap(self.base, self.len) };
    }
}

/// memfd_create(2); the new descriptor.
fn memfd_create(name: &CStr, flags: u32) -> SysResult<OwnedFd> {
    // SAFETY: name is a valid C string; the flags are plain bits.
    let fd = cvt(unsafe { raw_syscall(libc::SYS_memfd_create, [name.as_ptr() as u64, flags as u64, 0, 0, 0, 0]) })?;
    Ok(owned(fd))
}

/// A new memfd (close-on-exec).
pub fn memfd(name: &CStr) -> SysResult<OwnedFd> {
    memfd_create(name, libc::MFD_CLOEXEC)
}

/// Plain-old-data slices stored in a [`SealedMap`] (no padding, no
/// pointers, any bit pattern valid).
pub trait Pod: Copy {}
impl Pod for libc::sock_filter {}
impl Pod for u8 {}

/// The read-only shared mapping of a sealed memfd: data written once and
/// never changed (F_SEAL_WRITE, SHRINK, GROW, SEAL), which processes forked
/// after it was made see at the same address without a copy. The
/// descriptor is closed once mapped (the mapping keeps the memfd alive), so
/// a supervisor holds no descriptor per policy.
pub struct SealedMap {
    base: *mut libc::c_void,
    /// Bytes of data (the mapping is at least one byte long).
    len: usize,
}

impl SealedMap {
    /// A sealed copy of `data`; `name` shows in /proc/PID/fd and maps.
    pub fn new<T: Pod>(name: &CStr, data: &[T]) -> SysResult<Self> {
        // SAFETY: T is Pod, so its bytes are initialized and may be viewed
        // as u8 for the slice's whole length.
        let bytes = unsafe { std::slice::from_raw_parts(data.as_ptr() as *const u8, std::mem::size_of_val(data)) };
        let fd = memfd_create(name, libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)?;
        write_all(fd.as_raw_fd(), bytes)?;
        let seals = libc::F_SEAL_WRITE | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals)?;
        let map_len = bytes.len().max(1);
        // SAFETY: a new read-only shared mapping of our memfd (writable
        // shared mappings are what F_SEAL_WRITE forbids); checked for
        // failure. An empty file maps as one page that is never read.
        let base = unsafe { mmap(map_len, libc::PROT_READ, libc::MAP_SHARED, fd.as_raw_fd()) }?;
        Ok(SealedMap { base, len: bytes.len() })
    }

    /// The data as `T`s (the mapping is page-aligned, so suitably aligned).
    pub fn as_slice<T: Pod>(&self) -> &[T] {
        // SAFETY: the mapping holds `len` bytes written from a [T] in new()
        // and sealed against change; page alignment satisfies T's alignment;
        // it lives as long as self (and in a forked child, for ever).
        unsafe { std::slice::from_raw_parts(self.base as *const T, self.len / std::mem::size_of::<T>()) }
    }
}

impl Drop for SealedMap {
    fn drop(&mut self) {
        // SAFETY: base/len are the mapping created in new().
        unsafe { munmap(self.base, self.len.max(1)) };
    }
}

/// Anonymous shared memory holding a `T` at its start and a byte area
/// after it, at the same address in the supervisor and every process it
/// forks afterwards (PID 1, the tracee until its execve unmaps it). The
/// supervisor lays out a run's strings and pointer arrays in the byte area
/// with [`Arena::put`]; the children read them in place, so pointers into
/// the arena are valid on both sides. Pages are touched only as used.
pub struct Arena<T> {
    pub(super) ptr: *mut u8,
    pub(super) len: usize,
    /// Next free offset of the byte area (supervisor side).
    pub(super) next: std::cell::Cell<usize>,
    pub(super) _t: std::marker::PhantomData<T>,
}

// Rounds up to a multiple of 16.
pub(super) const fn align16(n: usize) -> usize {
    (n + 15) & !15
}

impl<T: Default> Arena<T> {
    pub fn new(len: usize) -> SysResult<Self> {
        let len = len.max(align16(std::mem::size_of::<T>()) + 4096);
        // SAFETY: anonymous shared mapping, no fd; checked for failure.
        let p = unsafe {
            mmap(
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
            )
        }?;
        // SAFETY: the mapping is fresh, page-aligned, writable and big enough for T.
        unsafe { (p as *mut T).write(T::default()) };
        Ok(Arena {
            ptr: p.cast(),
            len,
            next: std::cell::Cell::new(align16(std::mem::size_of::<T>())),
            _t: std::marker::PhantomData,
        })
    }
}

impl<T> Arena<T> {
    /// Copies `data` into the byte area; returns its address, or ENOSPC.
    pub fn put(&self, data: &[u8]) -> SysResult<*const u8> {
        let at = self.next.get();
        let end = at.checked_add(align16(data.len())).ok_or(libc::ENOSPC)?;
        if end > self.len {
            return Err(libc::ENOSPC);
        }
        // SAFETY: [at, at + data.len()) lies inside the mapping (checked
        // above) and was never handed out before: no reference aliases it.
        unsafe { ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.add(at), data.len()) };
        self.next.set(end);
        // SAFETY: at < len, inside the mapping.
        Ok(unsafe { self.ptr.add(at) })
    }

    /// Copies a NUL-terminated string; returns its address.
    pub fn put_cstr(&self, s: &CStr) -> SysResult<*const libc::c_char> {
        self.put(s.to_bytes_with_nul()).map(|p| p.cast())
    }

    /// Copies a pointer array (e.g. argv with its NULL); returns its address.
    pub fn put_ptrs(&self, ptrs: &[*const libc::c_char]) -> SysResult<*const *const libc::c_char> {
        // SAFETY: viewing an initialized pointer slice as bytes (pointers have
        // no padding or invalid bit patterns).
        let bytes = unsafe { std::slice::from_raw_parts(ptrs.as_ptr().cast::<u8>(), std::mem::size_of_val(ptrs)) };
        self.put(bytes).map(|p| p.cast())
    }

    /// The string at `at` (stored by [`put_cstr`](Self::put_cstr)).
    pub fn cstr(&self, at: u64) -> Option<&CStr> {
        let off = (at as usize).checked_sub(self.ptr as usize)?;
        if off >= self.len {
            return None;
        }
        // SAFETY: the bytes from `at` to the end of the mapping are readable;
        // from_bytes_until_nul stops at the first NUL within them.
        let bytes = unsafe { std::slice::from_raw_parts(at as *const u8, self.len - off) };
        CStr::from_bytes_until_nul(bytes).ok()
    }

    /// `n` elements of `U` stored by [`put`](Self::put) at `at`.
    pub fn slice<U: Copy>(&self, at: u64, n: u64) -> Option<&[U]> {
        let off = (at as usize).checked_sub(self.ptr as usize)?;
        let bytes = (n as usize).checked_mul(std::mem::size_of::<U>())?;
        if off.checked_add(bytes)? > self.len || off % std::mem::align_of::<U>() != 0 {
            return None;
        }
        // SAFETY: in bounds and aligned (checked); U is Copy plain data
        // written by put() from a valid &[U].
        Some(unsafe { std::slice::from_raw_parts(at as *const U, n as usize) })
    }

    /// The NULL-terminated pointer array at `at` (stored by
    /// [`put_ptrs`](Self::put_ptrs)), NULL included.
    pub fn ptr_array(&self, at: u64) -> Option<&[*const libc::c_char]> {
        let off = (at as usize).checked_sub(self.ptr as usize)?;
        if off >= self.len || off % 8 != 0 {
            return None;
        }
        let max = (self.len - off) / 8;
        // SAFETY: in bounds and aligned (checked); the array was written by
        // put_ptrs, and the scan stops at its NULL or the mapping's end.
        let all = unsafe { std::slice::from_raw_parts(at as *const *const libc::c_char, max) };
        let n = all.iter().position(|p| p.is_null())?;
        Some(&all[..=n])
    }

    /// Stores `value` as element `i` of the `n`-element array at `at`
    /// (child side: PID 1 reporting back). False when out of bounds.
    pub fn store<U: Copy>(&self, at: u64, n: u64, i: usize, value: U) -> bool {
        let Some(off) = (at as usize).checked_sub(self.ptr as usize) else { return false };
        let size = std::mem::size_of::<U>();
        let end = (n as usize).checked_mul(size).and_then(|b| b.checked_add(off));
        if i as u64 >= n || end.is_none_or(|e| e > self.len) || off % std::mem::align_of::<U>() != 0 {
            return false;
        }
        // SAFETY: element i lies inside the mapping and is aligned (checked
        // above); nobody holds a reference to it (the supervisor reads the
        // array only after this process has finished).
        unsafe { (at as *mut U).add(i).write_volatile(value) };
        true
    }

    /// Copies a slice of plain data; returns its address.
    pub fn put_slice<U: Copy>(&self, v: &[U]) -> SysResult<*const U> {
        // SAFETY: viewing initialized Copy data as bytes; callers only pass
        // types without padding (integers, sock_filter, pointers).
        let bytes = unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) };
        self.put(bytes).map(|p| p.cast())
    }
}

impl<T> std::ops::Deref for Arena<T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the header was initialized in new() and stays mapped until
        // drop. T holds only atomics, so shared access across processes is
        // sound.
        unsafe { &*(self.ptr as *const T) }
    }
}

impl<T> Drop for Arena<T> {
    fn drop(&mut self) {
        // SAFETY: ptr/len are the mapping created in new().
        unsafe { munmap(self.ptr.cast(), self.len) };
    }
}

/// Drops this process's page-table entries for its read-only code and
/// data (every loaded object's segments that are neither writable nor
/// relocated at start-up, as its program headers say: pages the kernel
/// reads back from the file, never written) and resets its peak resident
/// set to what is left (`/proc/self/clear_refs` 5). A process that shares
/// this memory (a run's PID 1 and tracee) and execs then records that
/// smaller peak in its rusage, not every page of code this one ever ran.
/// The pages fault back in as they are used. Best effort: a range or the
/// reset that fails is left as it is.
pub fn shed_text() {
    for &(start, len) in read_only_segments() {
        // SAFETY: MADV_DONTNEED on a range of private file mappings that are
        // not writable and hold no relocations only unmaps its pages; every
        // later access reads them back from the file, unchanged (no private
        // copy exists to lose).
        let _ =
            unsafe { raw_syscall(libc::SYS_madvise, [start as u64, len as u64, libc::MADV_DONTNEED as u64, 0, 0, 0]) };
    }
    if let Ok(f) = super::open(c"/proc/self/clear_refs", libc::O_WRONLY | libc::O_CLOEXEC, 0) {
        let _ = write_all(f.as_raw_fd(), b"5");
    }
}

/// The page-aligned ranges of every loaded object's `PT_LOAD` segments
/// without `PF_W`, less its `PT_GNU_RELRO` range (written once, by the
/// relocations, before it was made read-only), found once.
fn read_only_segments() -> &'static [(usize, usize)] {
    static RANGES: std::sync::OnceLock<Vec<(usize, usize)>> = std::sync::OnceLock::new();
    RANGES.get_or_init(|| {
        unsafe extern "C" fn each(info: *mut libc::dl_phdr_info, _size: libc::size_t, data: *mut libc::c_void) -> i32 {
            // SAFETY: dl_iterate_phdr passes a valid info for the call's
            // duration and `data` is the Vec handed to it below.
            let (info, out) = unsafe { (&*info, &mut *(data as *mut Vec<(usize, usize)>)) };
            let phdrs: &[libc::Elf64_Phdr] = if info.dlpi_phdr.is_null() {
                &[]
            } else {
                // SAFETY: the loader's program headers of this object, dlpi_phnum of them.
                unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) }
            };
            let page = 4096usize;
            let at = |h: &libc::Elf64_Phdr| info.dlpi_addr as usize + h.p_vaddr as usize;
            let relro =
                phdrs.iter().find(|h| h.p_type == libc::PT_GNU_RELRO).map(|h| (at(h), at(h) + h.p_memsz as usize));
            for h in phdrs.iter().filter(|h| h.p_type == libc::PT_LOAD && h.p_flags & libc::PF_W == 0) {
                // Whole pages inside the segment, less any that hold the relocated range.
                let (mut a, mut b) = ((at(h) + page - 1) & !(page - 1), (at(h) + h.p_filesz as usize) & !(page - 1));
                if let Some((ra, rb)) = relro {
                    if ra < b && rb > a {
                        if ra & !(page - 1) > a {
                            b = ra & !(page - 1)
                        } else {
                            a = (rb + page - 1) & !(page - 1)
                        }
                    }
                }
                if b > a {
                    out.push((a, b - a));
                }
            }
            0
        }
        let mut out: Vec<(usize, usize)> = Vec::new();
        // SAFETY: `each` only reads the headers it is given and pushes to `out`, which outlives the call.
        unsafe { libc::dl_iterate_phdr(Some(each), &mut out as *mut Vec<(usize, usize)> as *mut libc::c_void) };
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::{exit, fork, waitpid, Forked};

    use std::sync::atomic::{AtomicU64, Ordering::SeqCst};

    #[derive(Default)]
    struct Header {
        n: AtomicU64,
    }

    #[test]
    fn arena_round_trips_and_bounds() {
        let a = Arena::<Header>::new(8192).unwrap();
        a.n.store(7, SeqCst);
        let s1 = a.put_cstr(c"/bin/true").unwrap();
        let s2 = a.put_cstr(c"-x").unwrap();
        let argv = a.put_ptrs(&[s1, s2, ptr::null()]).unwrap();
        let got = a.ptr_array(argv as u64).unwrap();
        assert_eq!(got.len(), 3);
        assert!(got[2].is_null());
        assert_eq!(a.cstr(got[0] as u64).unwrap(), c"/bin/true");
        assert_eq!(a.cstr(got[1] as u64).unwrap(), c"-x");
        let nums = a.put_slice(&[1u64, 2, 3]).unwrap();
        assert_eq!(a.slice::<u64>(nums as u64, 3).unwrap(), &[1, 2, 3]);
        assert!(a.store(nums as u64, 3, 1, 20u64));
        assert_eq!(a.slice::<u64>(nums as u64, 3).unwrap(), &[1, 20, 3]);
        // Out of bounds: index, length, address.
        assert!(!a.store(nums as u64, 3, 3, 0u64));
        assert!(a.slice::<u64>(nums as u64, 1 << 20).is_none());
        assert!(a.cstr(1).is_none());
        assert!(a.ptr_array(0).is_none());
        // Full: an error, never a write past the end.
        assert_eq!(a.put(&[0u8; 16384]), Err(libc::ENOSPC));
        // The header is shared with a forked child.
        // SAFETY: the child stores to shared memory and ends with exit.
        match unsafe { fork() }.unwrap() {
            Forked::Child => {
                a.n.store(42, SeqCst);
                exit(0)
            }
            Forked::Parent { pid, .. } => {
                waitpid(pid, false).unwrap();
                assert_eq!(a.n.load(SeqCst), 42);
            }
        }
    }
}
