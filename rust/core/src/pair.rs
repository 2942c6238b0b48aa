//! The names around a checkpoint pair (`<path>` + `<path>.data`) and their helper files.
//!
//! Where the pair lives: the checkpoint is the given path after following only the symlinks the
//! caller or the directory's owner made (`target.rs`); the external data file is `<given path>.data`
//! (ORT finds the data file by that name) or, when the given name is a symlink and nothing has that
//! name, `<checkpoint>.data` beside the link's target ([`external_data_location`]); either name is
//! never followed. Every helper
//! file is named `.ortckpt-<h>.<suffix>`, `<h>` being 16 hex digits of the BLAKE3 hash of the
//! checkpoint's file name, so the names stay short (a legal 255-byte checkpoint name still fits)
//! and each checkpoint's leftovers are found by one prefix:
//!
//! * `.ortckpt-<h>.journal`          the journal (in the checkpoint's directory)
//! * `.ortckpt-<h>.<r>.tmp`          a new file being written (`<r>`: 32 random hex digits)
//! * `.ortckpt-<h>.<r>.jtmp`         a journal being written
//! * `.ortckpt-<h>.<r>.old`          the previous checkpoint, hard-linked before the renames
//! * `.ortckpt-<h>.<r>.old-data`     the previous data file (in the data file's directory)
//!
//! Only the journal's name is predictable; every other helper is created with `O_EXCL` under a
//! random name, and none is ever followed if it is a symlink.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::crash::{crash_point, Step};
use crate::digest::hash_hex;
use crate::dir::{Dir, Entry, FileId};
use crate::target::{resolve_for, split, Purpose};
use crate::{Error, Result};

/// ORT's `ExternalCheckpointDataPath`: the checkpoint path with `.data` appended.
pub fn external_data_path(checkpoint: &Path) -> PathBuf {
    let mut s = checkpoint.as_os_str().to_owned();
    s.push(".data");
    PathBuf::from(s)
}

/// Where the external data of the checkpoint named `given` lives: `<given>.data` when that name
/// exists (ORT's rule; also how a store of links, such as a model cache, pairs two files with
/// different targets), else, when `given` is a symlink, `<target>.data` beside the file the link
/// leads to, so a link to a checkpoint finds its data where the target does. The name found is
/// never followed by a save (a symlink there is replaced, not written through).
pub fn external_data_location(given: &Path) -> PathBuf {
    data_location(given, &resolve_all(given))
}

/// `<given>.data` when that name exists or `given` is not a symlink; else `<checkpoint>.data`
/// (`checkpoint`: where the link at `given` leads).
fn data_location(given: &Path, checkpoint: &Path) -> PathBuf {
    let beside = external_data_path(given);
    let is_link = std::fs::symlink_metadata(given).is_ok_and(|m| m.file_type().is_symlink());
    if !is_link || std::fs::symlink_metadata(&beside).is_ok() {
        beside
    } else {
        external_data_path(checkpoint)
    }
}

/// `path` with every symlink followed (as a reader opens it); `path` itself when it cannot be
/// resolved (missing).
fn resolve_all(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// The resolved names of one checkpoint pair and of its helper files.
#[derive(Clone, Debug)]
pub struct PairPaths {
    /// The checkpoint as the caller named it (messages, and ORT's `.data` rule).
    pub given: PathBuf,
    /// The checkpoint file (own symlinks followed): the name a save replaces.
    pub checkpoint: PathBuf,
    /// The external data file (`given + ".data"`, never followed).
    pub external: PathBuf,
    /// The checkpoint's directory: home of the journal and the lock.
    pub dir: PathBuf,
    /// The external data file's directory (usually `dir`).
    pub ext_dir: PathBuf,
    /// `.ortckpt-<h>.`
    pub prefix: String,
    /// The checkpoint's directory, open.
    pub ckpt_dir: Dir,
    /// The checkpoint's file name in `ckpt_dir`.
    pub ckpt_name: OsString,
    /// The external data file's directory, open.
    pub data_dir: Dir,
    /// The external data file's name in `data_dir`.
    pub data_name: OsString,
}

impl PairPaths {
    /// The pair at `given` as a reader finds it (every symlink at the checkpoint name followed).
    pub fn new(given: &Path) -> Result<PairPaths> {
        PairPaths::resolve(given, Purpose::Read)
    }

    /// The pair at `given` for a save or recovery: fails when the checkpoint name is a symlink
    /// someone else planted, or names something other than a regular file.
    pub fn for_write(given: &Path) -> Result<PairPaths> {
        PairPaths::resolve(given, Purpose::Write)
    }

    fn resolve(given: &Path, purpose: Purpose) -> Result<PairPaths> {
        if given.as_os_str().is_empty() {
            return Err(Error::io(given, "use", io::Error::from_raw_os_error(libc::ENOENT)));
        }
        let target = resolve_for(given, "save to", purpose)?;
        let external = data_location(given, &target.path());
        let (ext_dir, data_name) = split(&external)?;
        let data_dir = if ext_dir == split(given)?.0 && target.dir.path() == ext_dir {
            target.dir.clone()
        } else {
            Dir::open(&ext_dir)?
        };
        let digest = hash_hex(target.name.as_bytes());
        Ok(PairPaths {
            given: given.to_path_buf(),
            checkpoint: target.path(),
            external,
            dir: target.dir.path().to_path_buf(),
            ext_dir,
            prefix: format!(".ortckpt-{}.", &digest[..16]),
            ckpt_dir: target.dir,
            ckpt_name: target.name,
            data_dir,
            data_name,
        })
    }

    /// The journal's name (in `ckpt_dir`).
    pub fn journal_name(&self) -> OsString {
        OsString::from(format!("{}journal", self.prefix))
    }

    /// The journal's path (messages).
    pub fn journal(&self) -> PathBuf {
        self.ckpt_dir.show(&self.journal_name())
    }

    /// The checkpoint's file name, as recorded in the journal.
    pub fn checkpoint_name(&self) -> &OsStr {
        &self.ckpt_name
    }

    /// What the checkpoint name holds now (never a symlink after `new`, but checked again).
    pub fn checkpoint_entry(&self) -> Result<Option<Entry>> {
        self.ckpt_dir.stat(&self.ckpt_name).map_err(|e| Error::io(&self.checkpoint, "read metadata of", e))
    }

    /// What the data file's name holds now (a symlink is described, not followed; a name too
    /// long for the file system holds nothing).
    pub fn data_entry(&self) -> Result<Option<Entry>> {
        match self.data_dir.stat(&self.data_name) {
            Err(e) if e.raw_os_error() == Some(libc::ENAMETOOLONG) => Ok(None),
            other => other.map_err(|e| Error::io(&self.external, "read metadata of", e)),
        }
    }

    /// Both directories (once when they are the same).
    pub fn dirs(&self) -> Vec<&Dir> {
        if self.ext_dir == self.dir {
            vec![&self.ckpt_dir]
        } else {
            vec![&self.ckpt_dir, &self.data_dir]
        }
    }

    /// Makes renames and unlinks in both directories durable.
    pub fn sync_dirs(&self) -> Result<()> {
        for dir in self.dirs() {
            dir.sync()?;
        }
        Ok(())
    }

    /// Whether `name` is a helper name of this pair with a random part and `suffix`
    /// (`<prefix><32 hex digits><suffix>`): the only names a journal may point recovery at.
    pub fn is_helper(&self, name: &OsStr, suffix: &str) -> bool {
        let bytes = name.as_bytes();
        let Some(rest) = bytes.strip_prefix(self.prefix.as_bytes()) else { return false };
        let Some(random) = rest.strip_suffix(suffix.as_bytes()) else { return false };
        random.len() == 32 && random.iter().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    }
}

/// Renames the file `id`, named `from`, over `to` in `dir` (neither followed). The names are
/// checked to hold exactly that file before and after (`Dir::expect_file`): a name swapped for a
/// link meanwhile makes the rename fail (and the protocol undo) instead of putting the link at a
/// checkpoint's name.
pub fn rename(dir: &Dir, from: &OsStr, to: &OsStr, id: FileId) -> Result<()> {
    dir.expect_file(from, id)?;
    dir.rename_to(from, dir, to).map_err(|e| Error::io(dir.show(to), "replace", e))?;
    dir.expect_file(to, id)
}

/// [`rename`], then reports `step` to the crash hook.
pub fn place(dir: &Dir, from: &OsStr, to: &OsStr, id: FileId, step: Step) -> Result<()> {
    rename(dir, from, to, id)?;
    crash_point(step);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helper_names_are_short_for_long_file_names() {
        let dir = tempfile::tempdir().unwrap();
        let long = dir.path().join("x".repeat(255));
        let paths = PairPaths::new(&long).unwrap();
        assert!(paths.journal_name().len() < 40);
        assert!(paths.prefix.len() + 32 + ".old-data".len() < 80);
        assert!(PairPaths::new(Path::new("")).is_err());
        let helper = OsString::from(format!("{}{}.tmp", paths.prefix, "a".repeat(32)));
        assert!(paths.is_helper(&helper, ".tmp"));
        assert!(!paths.is_helper(&helper, ".old"));
        assert!(!paths.is_helper(OsStr::new("../../etc/passwd"), ".tmp"));
    }
}
