//! The directory commit lock: an exclusive `flock` on the checkpoint's directory, held while a
//! save commits (or a recovery runs) there, taken with a bounded, interruptible wait.
//!
//! Why the directory and not a lock file: a lock file would be one more file left beside every
//! checkpoint forever (and itself a crash leftover to explain); the directory always exists, a
//! crashed holder's lock vanishes with its process, and readers can probe it without creating
//! anything (they may have no write access). The price is that commits of different checkpoints
//! in one directory take turns, which only serializes the few renames and syncs of each commit.
//! Where the file system has no `flock`, saves proceed unlocked (see docs/format.md).
//!
//! Anyone who can open the directory can hold its `flock` (including other users of a shared
//! directory): so the wait is bounded — `ORTCKPT_LOCK_TIMEOUT` seconds, 60 by default — and asks
//! `keep_going` (Ctrl-C in Python) between polls; then it fails with an error naming the
//! directory.

use std::io;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::dir::Dir;
use crate::{Error, Result};

/// Seconds a save waits for another process's commit lock by default.
pub const DEFAULT_LOCK_TIMEOUT_SECS: f64 = 60.0;

/// The configured wait: `ORTCKPT_LOCK_TIMEOUT` (seconds, may be fractional) or the default.
pub fn lock_timeout() -> Duration {
    std::env::var("ORTCKPT_LOCK_TIMEOUT")
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map_or(Duration::from_secs_f64(DEFAULT_LOCK_TIMEOUT_SECS), |s| Duration::from_secs_f64(s.min(1e9)))
}

/// True when `e` says the file system has no `flock` (some network and FUSE file systems).
pub fn lock_unsupported(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOLCK) | Some(libc::EINVAL) | Some(libc::EOPNOTSUPP))
}

/// A held commit lock (released when dropped, with its directory descriptor).
pub struct DirLock {
    _dir: Option<Dir>,
}

impl DirLock {
    /// Takes `dir`'s exclusive lock, polling with a growing pause (1 ms to 50 ms) for at most
    /// [`lock_timeout`]; `keep_going` returning false stops with [`Error::Interrupted`].
    pub fn exclusive(dir: &Path, keep_going: &mut dyn FnMut() -> bool) -> Result<DirLock> {
        // A description of its own: `flock` locks belong to open file descriptions.
        let handle = Dir::open(dir)?;
        let timeout = lock_timeout();
        let start = Instant::now();
        let mut pause = Duration::from_millis(1);
        loop {
            match handle.try_flock(libc::LOCK_EX) {
                Ok(true) => return Ok(DirLock { _dir: Some(handle) }),
                Ok(false) => {}
                Err(e) if lock_unsupported(&e) => return Ok(DirLock { _dir: None }),
                Err(e) => return Err(Error::io(dir, "lock directory", e)),
            }
            if start.elapsed() >= timeout {
                return Err(Error::io(
                    dir,
                    "lock directory",
                    io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "another process has held its commit lock (flock) for over {:.1} s: a save or \
                             recovery is running there, or a process (possibly another user's) keeps the \
                             lock; try again later, or raise ORTCKPT_LOCK_TIMEOUT (seconds)",
                            timeout.as_secs_f64()
                        ),
                    ),
                ));
            }
            if !keep_going() {
                return Err(Error::Interrupted { path: dir.to_path_buf() });
            }
            std::thread::sleep(pause.min(timeout.saturating_sub(start.elapsed())));
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_lock_times_out_and_interrupts() {
        let tmp = tempfile::tempdir().unwrap();
        let held = DirLock::exclusive(tmp.path(), &mut || true).unwrap();
        let mut asked = 0;
        let err = DirLock::exclusive(tmp.path(), &mut || {
            asked += 1;
            asked < 3
        })
        .err()
        .unwrap();
        assert!(matches!(err, Error::Interrupted { .. }), "{err}");
        drop(held);
        assert!(DirLock::exclusive(tmp.path(), &mut || true).is_ok());
    }
}
