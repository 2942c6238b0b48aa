//! The names around a checkpoint pair (`<path>` + `<path>.data`) and the save journal: a small
//! intent file that exists, complete and synced, for exactly the time a save (or a recovery)
//! changes which files those two names lead to. See docs/format.md, "Crash consistency".
//!
//! Every helper file is named `.ortckpt-<h>.<suffix>` where `<h>` is 16 hex digits of a hash of
//! the checkpoint's file name, so the names stay short (a legal 255-byte checkpoint name still
//! fits) and each checkpoint's leftovers are found by one prefix:
//!
//! * `.ortckpt-<h>.journal`  the journal (in the checkpoint's directory)
//! * `.ortckpt-<h>.old`      the previous checkpoint, hard-linked before the renames
//! * `.ortckpt-<h>.old-data` the previous external data file (in the data file's directory)
//! * `.ortckpt-<h>.<pid>-<n>.tmp` / `.jtmp`  new files being written / a journal being written

use std::ffi::{OsStr, OsString};
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::crash::crash_point;
use crate::files::{parent_dir, resolve_symlinks, sync_dir, FileId};
use crate::save::external_data_location;
use crate::{Error, Result};

/// The resolved names of one checkpoint pair and of its helper files.
#[derive(Clone, Debug)]
pub struct PairPaths {
    /// The checkpoint as the caller named it (messages, and ORT's `.data` rule).
    pub given: PathBuf,
    /// The checkpoint file, symlinks resolved: the name a save replaces.
    pub checkpoint: PathBuf,
    /// The external data file (`given + ".data"`, symlinks resolved).
    pub external: PathBuf,
    /// The checkpoint's directory: home of the journal and the lock.
    pub dir: PathBuf,
    /// The external data file's directory (usually `dir`).
    pub ext_dir: PathBuf,
    /// `.ortckpt-<h>.`
    pub prefix: String,
}

impl PairPaths {
    pub fn new(given: &Path) -> Result<PairPaths> {
        if given.as_os_str().is_empty() {
            return Err(Error::io(given, "use", io::Error::from_raw_os_error(libc::ENOENT)));
        }
        let checkpoint = resolve_symlinks(given);
        let name = match checkpoint.file_name() {
            Some(name) => name.to_owned(),
            None => {
                let e = io::Error::new(io::ErrorKind::InvalidInput, "the path does not name a file");
                return Err(Error::io(given, "use", e));
            }
        };
        let external = resolve_symlinks(&external_data_location(given));
        Ok(PairPaths {
            given: given.to_path_buf(),
            dir: parent_dir(&checkpoint),
            ext_dir: parent_dir(&external),
            external,
            checkpoint,
            prefix: format!(".ortckpt-{:016x}.", fnv1a(name.as_bytes())),
        })
    }

    fn helper(&self, dir: &Path, suffix: &str) -> PathBuf {
        dir.join(format!("{}{suffix}", self.prefix))
    }

    pub fn journal(&self) -> PathBuf {
        self.helper(&self.dir, "journal")
    }

    pub fn backup_checkpoint(&self) -> PathBuf {
        self.helper(&self.dir, "old")
    }

    pub fn backup_external(&self) -> PathBuf {
        self.helper(&self.ext_dir, "old-data")
    }

    /// The checkpoint's file name, as recorded in the journal.
    fn checkpoint_name(&self) -> &OsStr {
        self.checkpoint.file_name().unwrap_or_default()
    }

    /// Both directories (once when they are the same).
    pub fn dirs(&self) -> Vec<&Path> {
        if self.ext_dir == self.dir {
            vec![&self.dir]
        } else {
            vec![&self.dir, &self.ext_dir]
        }
    }
}

/// 64-bit FNV-1a: a stable, dependency-free hash for helper file names (not for security).
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// A new file of a save: its temporary name (in its destination's directory) and identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewFile {
    pub temp_name: OsString,
    pub id: FileId,
}

/// What a save is about to do: which files the two names lead to before (`old_*`, `None` for an
/// absent file) and which complete, synced files they will lead to after (`new_*`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Journal {
    pub checkpoint_name: OsString,
    pub new_checkpoint: NewFile,
    pub new_external: Option<NewFile>,
    pub old_checkpoint: Option<FileId>,
    pub old_external: Option<FileId>,
}

const MAGIC: &str = "ortckpt-journal 1";

/// A journal file that exists but cannot be parsed (never written by a save, which makes it
/// visible only complete; something else changed it).
#[derive(Debug)]
pub struct CorruptJournal;

impl Journal {
    pub fn new_checkpoint_path(&self, paths: &PairPaths) -> PathBuf {
        paths.dir.join(&self.new_checkpoint.temp_name)
    }

    pub fn new_external_path(&self, paths: &PairPaths) -> Option<PathBuf> {
        self.new_external.as_ref().map(|f| paths.ext_dir.join(&f.temp_name))
    }

    /// Whether the files `checkpoint` / `external` (identities of open files) are one complete
    /// pair this journal knows — the pair before the save or the pair after it. `Some(true)`: yes,
    /// with `external` as its data file; `Some(false)`: yes, and that pair has no data file (so
    /// whatever `.data` holds now is not part of it); `None`: a mix.
    pub fn complete_pair(&self, checkpoint: FileId, external: Option<FileId>) -> Option<bool> {
        let new = (Some(self.new_checkpoint.id), self.new_external.as_ref().map(|f| f.id));
        for (c, e) in [new, (self.old_checkpoint, self.old_external)] {
            if c == Some(checkpoint) {
                match e {
                    None => return Some(false),
                    Some(e) if external == Some(e) => return Some(true),
                    Some(_) => {}
                }
            }
        }
        None
    }

    fn encode(&self) -> String {
        fn id(v: Option<FileId>) -> String {
            v.map_or("-".into(), |i| format!("{} {}", i.dev, i.ino))
        }
        fn new(v: Option<&NewFile>) -> String {
            v.map_or("-".into(), |f| format!("{} {} {}", hex(f.temp_name.as_bytes()), f.id.dev, f.id.ino))
        }
        let body = format!(
            "{MAGIC}\ncheckpoint {}\nnew_checkpoint {}\nnew_external {}\nold_checkpoint {}\nold_external {}\n",
            hex(self.checkpoint_name.as_bytes()),
            new(Some(&self.new_checkpoint)),
            new(self.new_external.as_ref()),
            id(self.old_checkpoint),
            id(self.old_external),
        );
        format!("{body}end {:016x}\n", fnv1a(body.as_bytes()))
    }

    fn decode(text: &[u8]) -> std::result::Result<Journal, CorruptJournal> {
        let text = std::str::from_utf8(text).map_err(|_| CorruptJournal)?;
        let (body, end) = text.rsplit_once("end ").ok_or(CorruptJournal)?;
        if end != format!("{:016x}\n", fnv1a(body.as_bytes())) || !body.ends_with('\n') {
            return Err(CorruptJournal);
        }
        let mut lines = body.lines();
        if lines.next() != Some(MAGIC) {
            return Err(CorruptJournal);
        }
        let mut field = |key: &str| -> std::result::Result<Vec<&str>, CorruptJournal> {
            let line = lines.next().ok_or(CorruptJournal)?;
            let mut words = line.split(' ');
            if words.next() != Some(key) {
                return Err(CorruptJournal);
            }
            Ok(words.collect())
        };
        let checkpoint_name = match field("checkpoint")?.as_slice() {
            [name] => OsString::from_vec(unhex(name)?),
            _ => return Err(CorruptJournal),
        };
        let new_checkpoint = parse_new(&field("new_checkpoint")?)?.ok_or(CorruptJournal)?;
        let new_external = parse_new(&field("new_external")?)?;
        let old_checkpoint = parse_id(&field("old_checkpoint")?)?;
        let old_external = parse_id(&field("old_external")?)?;
        Ok(Journal { checkpoint_name, new_checkpoint, new_external, old_checkpoint, old_external })
    }
}

fn parse_id(words: &[&str]) -> std::result::Result<Option<FileId>, CorruptJournal> {
    match words {
        ["-"] => Ok(None),
        [dev, ino] => Ok(Some(FileId {
            dev: dev.parse().map_err(|_| CorruptJournal)?,
            ino: ino.parse().map_err(|_| CorruptJournal)?,
        })),
        _ => Err(CorruptJournal),
    }
}

fn parse_new(words: &[&str]) -> std::result::Result<Option<NewFile>, CorruptJournal> {
    match words {
        ["-"] => Ok(None),
        [name, rest @ ..] => {
            let temp_name = OsString::from_vec(unhex(name)?);
            // A temp name is a plain file name in its directory, never a path.
            if temp_name.is_empty() || temp_name.as_bytes().contains(&b'/') {
                return Err(CorruptJournal);
            }
            let id = parse_id(rest)?.ok_or(CorruptJournal)?;
            Ok(Some(NewFile { temp_name, id }))
        }
        [] => Err(CorruptJournal),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> std::result::Result<Vec<u8>, CorruptJournal> {
    if text.len() % 2 != 0 || text.len() > 2 * 4096 {
        return Err(CorruptJournal);
    }
    (0..text.len())
        .step_by(2)
        .map(|i| text.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()).ok_or(CorruptJournal))
        .collect()
}

/// The journal found beside a checkpoint.
pub enum Found {
    None,
    /// A journal of this checkpoint.
    Journal(Journal),
    /// A journal under this checkpoint's helper name that belongs to another file name (a hash
    /// collision): not ours to act on.
    Foreign,
    Corrupt,
}

/// Journals are a few hundred bytes; anything much larger is not one of ours.
const MAX_JOURNAL_BYTES: u64 = 64 * 1024;

pub fn read_journal(paths: &PairPaths) -> Result<Found> {
    let path = paths.journal();
    let file = match crate::files::open_regular(&path) {
        Ok(f) => f,
        Err(Error::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => return Ok(Found::None),
        Err(e) => return Err(e),
    };
    let mut text = Vec::new();
    io::Read::read_to_end(&mut io::Read::take(&file, MAX_JOURNAL_BYTES), &mut text)
        .map_err(|e| Error::io(&path, "read", e))?;
    Ok(match Journal::decode(&text) {
        Ok(j) if j.checkpoint_name.as_os_str() == paths.checkpoint_name() => Found::Journal(j),
        Ok(_) => Found::Foreign,
        Err(CorruptJournal) => Found::Corrupt,
    })
}

/// Makes `journal` visible under the journal name, complete and durable: written to a temporary
/// name, synced, renamed, directory synced. The caller holds the directory lock.
pub fn write_journal(paths: &PairPaths, journal: &Journal) -> Result<()> {
    let temp = paths.dir.join(format!("{}{}.jtmp", paths.prefix, std::process::id()));
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(&temp)
        .map_err(|e| Error::io(&temp, "create journal", e))?;
    file.write_all(journal.encode().as_bytes()).map_err(|e| Error::io(&temp, "write", e))?;
    file.sync_all().map_err(|e| Error::io(&temp, "sync", e))?;
    drop(file);
    crash_point("journal_written");
    fs::rename(&temp, paths.journal()).map_err(|e| Error::io(paths.journal(), "create journal", e))?;
    sync_dir(&paths.dir)?;
    crash_point("journal_committed");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Journal {
        Journal {
            checkpoint_name: OsString::from_vec(b"a\xff b.ckpt".to_vec()),
            new_checkpoint: NewFile { temp_name: ".ortckpt-1.2-3.tmp".into(), id: FileId { dev: 1, ino: 2 } },
            new_external: None,
            old_checkpoint: Some(FileId { dev: 1, ino: u64::MAX }),
            old_external: None,
        }
    }

    #[test]
    fn journal_round_trips_and_rejects_any_damage() {
        let j = sample();
        let text = j.encode();
        assert_eq!(Journal::decode(text.as_bytes()).unwrap(), j);
        // Every truncation and every single-byte change is detected.
        for cut in 0..text.len() {
            assert!(Journal::decode(&text.as_bytes()[..cut]).is_err(), "cut at {cut}");
        }
        for i in 0..text.len() {
            let mut bad = text.clone().into_bytes();
            bad[i] ^= 0x01;
            assert!(Journal::decode(&bad).is_err(), "flip at {i}");
        }
    }

    #[test]
    fn complete_pairs_are_old_or_new_never_mixed() {
        let mut j = sample();
        j.new_external = Some(NewFile { temp_name: "t".into(), id: FileId { dev: 1, ino: 9 } });
        j.old_external = Some(FileId { dev: 1, ino: 8 });
        let (nc, ne) = (j.new_checkpoint.id, FileId { dev: 1, ino: 9 });
        let (oc, oe) = (j.old_checkpoint.unwrap(), FileId { dev: 1, ino: 8 });
        assert_eq!(j.complete_pair(nc, Some(ne)), Some(true));
        assert_eq!(j.complete_pair(oc, Some(oe)), Some(true));
        assert_eq!(j.complete_pair(nc, Some(oe)), None);
        assert_eq!(j.complete_pair(oc, Some(ne)), None);
        assert_eq!(j.complete_pair(oc, None), None);
        // an inline old checkpoint is complete whatever `.data` holds (the new save's data file)
        j.old_external = None;
        assert_eq!(j.complete_pair(oc, Some(ne)), Some(false));
    }

    #[test]
    fn helper_names_are_short_for_long_file_names() {
        let dir = tempfile::tempdir().unwrap();
        let long = dir.path().join("x".repeat(255));
        let paths = PairPaths::new(&long).unwrap();
        for p in [paths.journal(), paths.backup_checkpoint(), paths.backup_external()] {
            assert!(p.file_name().unwrap().len() < 40, "{}", p.display());
        }
        assert!(PairPaths::new(Path::new("")).is_err());
    }
}
