//! The calls of the file layer whose behaviour differs between the platforms the core is built
//! for — Linux and macOS (the file layer is Unix-only; Windows is not supported yet) — each behind
//! a `cfg` that says what the other platform does instead.
//!
//! Everything else the file layer calls is POSIX and behaves alike on both, checked by compiling
//! for both (`cargo clippy --target x86_64-apple-darwin` / `aarch64-apple-darwin` in the full test
//! command) and by the Linux test suite:
//! * `openat`, `renameat`, `linkat` (no flags), `unlinkat`, `readlinkat`, `mkdirat`, `fstatat`
//!   with `AT_SYMLINK_NOFOLLOW`, and `O_NOFOLLOW | O_EXCL | O_CLOEXEC | O_NONBLOCK | O_DIRECTORY`:
//!   macOS has each since 10.10 (the wheels' floor is 10.12); opening a symlink with `O_NOFOLLOW`
//!   fails with `ELOOP` on both.
//! * `flock`: native on both (macOS has BSD's own); advisory on both, whole-file, released when
//!   the descriptor closes.
//! * `File::sync_all` (every file a save writes): Rust's standard library implements it with
//!   `fcntl(F_FULLFSYNC)` on macOS, where a plain `fsync` leaves the data in the drive's write
//!   cache; on Linux it is `fsync`. Directories are synced by [`sync_directory`] below.
//! * `mmap`/`madvise` (`MADV_RANDOM`, `MADV_NORMAL`): both; huge pages differ ([`advise_huge_pages`]).

use std::io;
use std::os::fd::RawFd;

/// Makes the entries of the directory open at `fd` durable (the renames and unlinks of a save).
///
/// * Linux: `fsync(2)` of the directory.
/// * macOS: `fcntl(F_FULLFSYNC)`, which also flushes the drive's write cache (`fsync` there does
///   not), falling back to `fsync` where the file system refuses it, as SQLite does.
pub(crate) fn sync_directory(fd: RawFd) -> io::Result<()> {
    #[cfg(target_vendor = "apple")]
    {
        // SAFETY: fcntl on a descriptor the caller owns, with no pointer argument.
        if unsafe { libc::fcntl(fd, libc::F_FULLFSYNC) } == 0 {
            return Ok(());
        }
    }
    // SAFETY: fsync on a descriptor the caller owns.
    if unsafe { libc::fsync(fd) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Asks for transparent huge pages on private memory a file is read into (advice only; failure
/// is ignored).
///
/// * Linux: `madvise(MADV_HUGEPAGE)`, as numpy does for large arrays: reading 1 GiB then takes
///   512 page faults instead of 262,144.
/// * macOS: there is no such advice (the kernel chooses superpages itself); nothing is asked.
pub(crate) fn advise_huge_pages(map: &memmap2::MmapMut) {
    #[cfg(target_os = "linux")]
    {
        let _ = map.advise(memmap2::Advice::HugePage);
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = map;
    }
}

/// A vector of `n` float64 values whose memory the kernel is asked to back with transparent huge
/// pages before anything touches it (advice only), filled with zeros written here (`zeroed`: the
/// first write by other threads to a lazily zeroed page is a copy-on-write fault with a TLB
/// shootdown to every core) or left to calloc's fresh pages (every value written before it is
/// read). numpy asks the same for its large arrays; 2 MiB pages take 512 times fewer faults.
///
/// * Linux: `madvise(MADV_HUGEPAGE)` on the 2 MiB-aligned part of the allocation.
/// * macOS: no such advice (the kernel chooses superpages itself).
pub(crate) fn huge_f64s(n: usize, zeroed: bool) -> Vec<f64> {
    if zeroed {
        let mut v: Vec<f64> = Vec::with_capacity(n);
        advise_huge(v.as_mut_ptr() as usize, n.saturating_mul(8));
        v.resize(n, 0.0);
        v
    } else {
        huge_fresh(n)
    }
}

/// [`huge_f64s`] of float32 values, left to calloc's fresh pages (every value written before
/// it is read).
pub(crate) fn huge_f32s(n: usize) -> Vec<f32> {
    huge_fresh(n)
}

/// `n` zero values in calloc's fresh pages (large blocks are fresh mappings, untouched until the
/// first write), advised as huge pages.
fn huge_fresh<T: Copy + Default + PartialEq>(n: usize) -> Vec<T> {
    let mut v = vec![T::default(); n];
    advise_huge(v.as_mut_ptr() as usize, n.saturating_mul(std::mem::size_of::<T>()));
    v
}

/// `madvise(MADV_HUGEPAGE)` on the 2 MiB-aligned part of the `bytes` at `start` (Linux).
fn advise_huge(start: usize, bytes: usize) {
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        let end = start.saturating_add(bytes);
        let (lo, hi) = (start.div_ceil(HUGE).saturating_mul(HUGE), end / HUGE * HUGE);
        if hi > lo {
            // SAFETY: [lo, hi) lies inside an allocation of `bytes` bytes the caller just made
            // and owns; MADV_HUGEPAGE only changes how its pages are backed, not their bytes.
            unsafe {
                libc::madvise(lo as *mut libc::c_void, hi - lo, libc::MADV_HUGEPAGE);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (start, bytes);
    }
}

/// The process's umask as the kernel reports it without changing it, where it does.
///
/// * Linux (4.7 and later): the `Umask:` line of `/proc/self/status`.
/// * macOS: no procfs; `None`, and the caller falls back to setting and restoring the mask.
pub(crate) fn reported_umask() -> Option<u32> {
    #[cfg(target_os = "linux")]
    {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let line = status.lines().find_map(|l| l.strip_prefix("Umask:"))?;
        u32::from_str_radix(line.trim(), 8).ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}
