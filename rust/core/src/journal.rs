//! The save journal: a small intent file that exists, complete and synced, for exactly the time a
//! save (or a recovery) changes which files the checkpoint's two names lead to. See
//! docs/format.md, "Crash consistency", and `pair.rs` for the names.
//!
//! What it records cannot be turned into a redirection: every file it names is a helper name of
//! this checkpoint with a random part (`PairPaths::is_helper`), every new file is identified by its
//! length and BLAKE3 hash (checked before recovery renames it), and old files by their backup name and
//! length. Device and inode numbers are kept only as hints (they change when a directory is copied
//! or restored; loads use them to recognise a pair without reading it).

use std::ffi::OsString;
use std::io::{self, Read, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

use crate::crash::{crash_point, Step};
use crate::digest::{hash_hex, Digest};
use crate::dir::{fstat, FileId};
// Re-exported: readers (`open.rs`) find the journal and the pair's names through this module.
use crate::pair::rename;
pub use crate::pair::PairPaths;
use crate::{Error, Result};

/// A new file of a save: its temporary name (in its destination's directory), its content
/// digest, and its identity when it was written (a hint).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewFile {
    /// `<prefix><random>.tmp`
    pub temp_name: OsString,
    /// Length and BLAKE3 hash of its bytes.
    pub digest: Digest,
    /// Device and inode when written.
    pub id: FileId,
}

/// A file a save replaces: the backup name it gets before the renames, its length and identity
/// (a hint).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OldFile {
    /// `<prefix><random>.old` / `.old-data`
    pub backup_name: OsString,
    /// Length in bytes.
    pub len: u64,
    /// Device and inode when the save began.
    pub id: FileId,
}

/// What a save is about to do: which files the two names lead to before (`old_*`, `None` for an
/// absent file) and which complete, synced files they will lead to after (`new_*`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Journal {
    /// The checkpoint's file name.
    pub checkpoint_name: OsString,
    /// The new checkpoint file.
    pub new_checkpoint: NewFile,
    /// The new external data file, when the new checkpoint has one.
    pub new_external: Option<NewFile>,
    /// The checkpoint file the save replaces.
    pub old_checkpoint: Option<OldFile>,
    /// The external data file the save replaces.
    pub old_external: Option<OldFile>,
}

const MAGIC: &str = "ortckpt-journal 2";

/// A journal file that exists but cannot be parsed (never written by a save, which makes it
/// visible only complete; something else changed it).
#[derive(Debug)]
pub struct CorruptJournal;

impl Journal {
    /// Whether the files `checkpoint` / `external` (identities of open files) are one complete
    /// pair this journal knows — the pair before the save or the pair after it. `Some(true)`: yes,
    /// with `external` as its data file; `Some(false)`: yes, and that pair has no data file (so
    /// whatever `.data` holds now is not part of it); `None`: a mix, or files the identities do
    /// not match (after a copy: then `recover` decides by content).
    pub fn complete_pair(&self, checkpoint: FileId, external: Option<FileId>) -> Option<bool> {
        let new = (Some(self.new_checkpoint.id), self.new_external.as_ref().map(|f| f.id));
        let old = (self.old_checkpoint.as_ref().map(|f| f.id), self.old_external.as_ref().map(|f| f.id));
        for (c, e) in [new, old] {
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
        fn new(v: Option<&NewFile>) -> String {
            v.map_or("-".into(), |f| {
                format!(
                    "{} {} {} {} {}",
                    hex(f.temp_name.as_bytes()),
                    f.digest.len,
                    f.digest.hex(),
                    f.id.dev,
                    f.id.ino
                )
            })
        }
        fn old(v: Option<&OldFile>) -> String {
            v.map_or("-".into(), |f| {
                format!("{} {} {} {}", hex(f.backup_name.as_bytes()), f.len, f.id.dev, f.id.ino)
            })
        }
        let body = format!(
            "{MAGIC}\ncheckpoint {}\nnew_checkpoint {}\nnew_external {}\nold_checkpoint {}\nold_external {}\n",
            hex(self.checkpoint_name.as_bytes()),
            new(Some(&self.new_checkpoint)),
            new(self.new_external.as_ref()),
            old(self.old_checkpoint.as_ref()),
            old(self.old_external.as_ref()),
        );
        format!("{body}end {}\n", hash_hex(body.as_bytes()))
    }

    fn decode(text: &[u8]) -> std::result::Result<Journal, CorruptJournal> {
        let text = std::str::from_utf8(text).map_err(|_| CorruptJournal)?;
        let (body, end) = text.rsplit_once("end ").ok_or(CorruptJournal)?;
        if end != format!("{}\n", hash_hex(body.as_bytes())) || !body.ends_with('\n') {
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
        let old_checkpoint = parse_old(&field("old_checkpoint")?)?;
        let old_external = parse_old(&field("old_external")?)?;
        Ok(Journal { checkpoint_name, new_checkpoint, new_external, old_checkpoint, old_external })
    }
}

fn number(word: &str) -> std::result::Result<u64, CorruptJournal> {
    word.parse().map_err(|_| CorruptJournal)
}

/// A helper file name: a plain name in its directory, never a path.
fn plain_name(word: &str) -> std::result::Result<OsString, CorruptJournal> {
    let name = OsString::from_vec(unhex(word)?);
    if name.is_empty() || name.as_bytes().contains(&b'/') {
        return Err(CorruptJournal);
    }
    Ok(name)
}

fn parse_new(words: &[&str]) -> std::result::Result<Option<NewFile>, CorruptJournal> {
    match words {
        ["-"] => Ok(None),
        [name, len, sha, dev, ino] => Ok(Some(NewFile {
            temp_name: plain_name(name)?,
            digest: Digest::from_hex(number(len)?, sha).ok_or(CorruptJournal)?,
            id: FileId { dev: number(dev)?, ino: number(ino)? },
        })),
        _ => Err(CorruptJournal),
    }
}

fn parse_old(words: &[&str]) -> std::result::Result<Option<OldFile>, CorruptJournal> {
    match words {
        ["-"] => Ok(None),
        [name, len, dev, ino] => Ok(Some(OldFile {
            backup_name: plain_name(name)?,
            len: number(len)?,
            id: FileId { dev: number(dev)?, ino: number(ino)? },
        })),
        _ => Err(CorruptJournal),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> std::result::Result<Vec<u8>, CorruptJournal> {
    if !text.len().is_multiple_of(2) || text.len() > 2 * 4096 {
        return Err(CorruptJournal);
    }
    (0..text.len())
        .step_by(2)
        .map(|i| text.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()).ok_or(CorruptJournal))
        .collect()
}

/// The journal found beside a checkpoint, as a reader sees it.
pub enum Found {
    /// No journal.
    None,
    /// A journal of this checkpoint.
    Journal(Box<Journal>),
    /// Not this checkpoint's to act on: a journal of another file name with the same name hash,
    /// or a file at the journal name that someone else owns in a sticky directory.
    Foreign,
    /// A journal that cannot be parsed.
    Corrupt,
}

/// The journal found beside a checkpoint, as a save or recovery sees it.
pub enum Inspected {
    /// What a reader sees too.
    Found(Found),
    /// Something at the journal name that a save must not act on: `what` says why.
    Untrusted {
        /// e.g. "a FIFO (named pipe) owned by uid 1000"
        what: String,
    },
}

/// Journals are a few hundred bytes; anything much larger is not one of ours.
const MAX_JOURNAL_BYTES: u64 = 64 * 1024;

/// The journal beside `paths`, for readers: whatever a save could not act on is not theirs
/// either (a planted file at the journal name never blocks or misleads a load).
pub fn read_journal(paths: &PairPaths) -> Result<Found> {
    Ok(match inspect_journal(paths)? {
        Inspected::Found(found) => found,
        Inspected::Untrusted { .. } => Found::Foreign,
    })
}

/// The journal beside `paths`. Never follows a link or blocks on a FIFO at the journal name;
/// in a sticky directory a journal someone else owns is not trusted (see `Dir::trusts`).
pub fn inspect_journal(paths: &PairPaths) -> Result<Inspected> {
    let name = paths.journal_name();
    let dir = &paths.ckpt_dir;
    let entry = match dir.stat(&name).map_err(|e| Error::io(paths.journal(), "read metadata of", e))? {
        None => return Ok(Inspected::Found(Found::None)),
        Some(entry) => entry,
    };
    if !entry.is_file() || !dir.trusts(&entry) {
        return Ok(Inspected::Untrusted { what: entry.describe() });
    }
    let (file, opened) = match dir.open_regular(&name) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Inspected::Found(Found::None)),
        Err(e) => return Err(Error::io(paths.journal(), "open", e)),
    };
    if opened.id != entry.id && !dir.trusts(&opened) {
        return Ok(Inspected::Untrusted { what: opened.describe() });
    }
    let mut text = Vec::new();
    file.take(MAX_JOURNAL_BYTES).read_to_end(&mut text).map_err(|e| Error::io(paths.journal(), "read", e))?;
    Ok(Inspected::Found(match Journal::decode(&text) {
        Ok(j) if j.checkpoint_name.as_os_str() == paths.checkpoint_name() => Found::Journal(Box::new(j)),
        Ok(_) => Found::Foreign,
        Err(CorruptJournal) => Found::Corrupt,
    }))
}

/// Makes `journal` visible under the journal name, complete and durable: written to a fresh
/// temporary name (`O_EXCL`, random), synced, renamed, directory synced. The caller holds the
/// directory lock.
pub fn write_journal(paths: &PairPaths, journal: &Journal) -> Result<()> {
    let dir = &paths.ckpt_dir;
    let (temp, mut file) = dir
        .create_unique(&paths.prefix, ".jtmp")
        .map_err(|e| Error::io(paths.journal(), "create journal", e))?;
    let id = fstat(&file).map_err(|e| Error::io(dir.show(&temp), "read metadata of", e))?.id;
    let written = file
        .write_all(journal.encode().as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|e| Error::io(dir.show(&temp), "write", e));
    drop(file);
    if let Err(e) = written {
        let _ = dir.unlink(&temp);
        return Err(e);
    }
    crash_point(Step::JournalWritten);
    if let Err(e) = rename(dir, &temp, &paths.journal_name(), id) {
        if dir.stat(&temp).ok().flatten().is_some_and(|e| e.id == id) {
            let _ = dir.unlink(&temp);
        }
        return Err(e);
    }
    dir.sync()?;
    crash_point(Step::JournalCommitted);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn sample() -> Journal {
        Journal {
            checkpoint_name: OsString::from_vec(b"a\xff b.ckpt".to_vec()),
            new_checkpoint: NewFile {
                temp_name: ".ortckpt-1.2-3.tmp".into(),
                digest: Digest { len: 5, hash: [7; 32] },
                id: FileId { dev: 1, ino: 2 },
            },
            new_external: None,
            old_checkpoint: Some(OldFile {
                backup_name: "b".into(),
                len: 3,
                id: FileId { dev: 1, ino: u64::MAX },
            }),
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
        let file = |ino| OldFile { backup_name: "x".into(), len: 1, id: FileId { dev: 1, ino } };
        j.new_external = Some(NewFile {
            temp_name: "t".into(),
            digest: Digest { len: 0, hash: [0; 32] },
            id: FileId { dev: 1, ino: 9 },
        });
        j.old_external = Some(file(8));
        let (nc, ne) = (j.new_checkpoint.id, FileId { dev: 1, ino: 9 });
        let (oc, oe) = (j.old_checkpoint.as_ref().unwrap().id, FileId { dev: 1, ino: 8 });
        assert_eq!(j.complete_pair(nc, Some(ne)), Some(true));
        assert_eq!(j.complete_pair(oc, Some(oe)), Some(true));
        assert_eq!(j.complete_pair(nc, Some(oe)), None);
        assert_eq!(j.complete_pair(oc, Some(ne)), None);
        assert_eq!(j.complete_pair(oc, None), None);
        // an inline old checkpoint is complete whatever `.data` holds (the new save's data file)
        j.old_external = None;
        assert_eq!(j.complete_pair(oc, Some(ne)), Some(false));
    }
}
