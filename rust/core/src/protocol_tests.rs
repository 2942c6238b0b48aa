//! Tests of the save / journal / recovery protocol as loads see it (moved here from `open.rs`,
//! which holds only the reader), and of the attacks on it: links and FIFOs at helper names, forged
//! journals, copied directories, names too long.

use std::ffi::OsString;
use std::io::Write;
use std::os::unix::fs::{symlink, FileTypeExt};
use std::path::Path;

use crate::atomic::Temp;
use crate::commit::{lock_new_temp, save_pair};
use crate::digest::HashingWriter;
use crate::journal::{read_journal, write_journal, Found, Journal, NewFile, OldFile};
use crate::lock::DirLock;
use crate::open::{interrupted_or_retry, open_checkpoint, Attempt, OpenMode};
use crate::pair::PairPaths;
use crate::recover::{helper_files, recover, Recovery};
use crate::Error;

fn try_save(path: &Path, ckpt: &[u8], data: Option<&[u8]>) -> crate::Result<()> {
    let mut write_c = |f: &mut dyn Write| f.write_all(ckpt);
    match data {
        Some(d) => {
            let mut write_d = |f: &mut dyn Write| f.write_all(d);
            save_pair(path, &mut write_c, Some(&mut write_d), &mut || true)
        }
        None => save_pair(path, &mut write_c, None, &mut || true),
    }
}

fn save(path: &Path, ckpt: &[u8], data: Option<&[u8]>) {
    try_save(path, ckpt, data).unwrap()
}

fn contents(path: &Path, mode: OpenMode) -> (Vec<u8>, Option<Vec<u8>>) {
    let o = open_checkpoint(path, mode, None, &mut || true).unwrap();
    (o.checkpoint.bytes().to_vec(), o.external.map(|e| e.bytes().to_vec()))
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Held for writing while a test starts a process, for reading by a test whose failed save must
/// leave nothing behind. A temporary file of a save holds its own `flock`, which a cleanup
/// respects (another save may own it), and a process being started holds a copy of every
/// descriptor of this test process until it executes its program: a failed save's undo running
/// in that window finds its own temporary file still locked, leaves it, and the test's `recover`
/// then reports leftovers (seen once in a full parallel run). The library is right to leave a
/// locked file; the tests must not start processes meanwhile.
static STARTING_PROCESSES: std::sync::RwLock<()> = std::sync::RwLock::new(());

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

#[test]
fn saves_replace_pairs_and_remove_stale_data() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.ckpt");
    save(&path, b"one", Some(b"data1"));
    assert_eq!(contents(&path, OpenMode::Map), (b"one".to_vec(), Some(b"data1".to_vec())));
    save(&path, b"two", None);
    assert_eq!(contents(&path, OpenMode::Read), (b"two".to_vec(), None));
    assert_eq!(names(dir.path()), ["a.ckpt"], "leftover files");
    assert!(helper_files(&path).unwrap().is_empty());
    assert_eq!(recover(&path).unwrap(), Recovery::Clean);
}

/// A new file of an interrupted save, written and synced under its temporary name.
fn new_temp(paths: &PairPaths, data: bool, bytes: &[u8]) -> NewFile {
    let dir = if data { &paths.data_dir } else { &paths.ckpt_dir };
    let mut t = Temp::create(dir, &paths.prefix, ".tmp", None).unwrap();
    let mut w = HashingWriter::new(t.file_mut());
    w.write_all(bytes).unwrap();
    let digest = w.finish();
    t.keep();
    NewFile { temp_name: t.name().clone(), digest, id: t.id() }
}

fn old(paths: &PairPaths, data: bool) -> Option<OldFile> {
    let (dir, name) =
        if data { (&paths.data_dir, &paths.data_name) } else { (&paths.ckpt_dir, &paths.ckpt_name) };
    dir.stat(name).unwrap().map(|e| OldFile {
        backup_name: OsString::from(format!(
            "{}{}{}",
            paths.prefix,
            "b".repeat(32),
            if data { ".old-data" } else { ".old" }
        )),
        len: e.size,
        id: e.id,
    })
}

/// Sets up the state a save leaves when killed right after its journal became durable (new
/// files complete under temporary names, old pair in place).
fn interrupted(path: &Path) -> (PairPaths, Journal) {
    save(path, b"old", Some(b"old-data"));
    let paths = PairPaths::for_write(path).unwrap();
    let journal = Journal {
        checkpoint_name: paths.ckpt_name.clone(),
        new_checkpoint: new_temp(&paths, false, b"new"),
        new_external: Some(new_temp(&paths, true, b"new-data")),
        old_checkpoint: old(&paths, false),
        old_external: old(&paths, true),
    };
    write_journal(&paths, &journal).unwrap();
    (paths, journal)
}

fn link_backups(paths: &PairPaths, j: &Journal) {
    let (c, d) = (j.old_checkpoint.as_ref().unwrap(), j.old_external.as_ref().unwrap());
    std::fs::hard_link(&paths.checkpoint, paths.ckpt_dir.show(&c.backup_name)).unwrap();
    std::fs::hard_link(&paths.external, paths.data_dir.show(&d.backup_name)).unwrap();
}

#[test]
fn dead_journal_loads_complete_pairs_refuses_mixes_and_recovers_forward() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.ckpt");
    let (paths, j) = interrupted(&path);
    // Old pair in place, journal of a dead save: the old pair is a complete pair it knows.
    assert_eq!(contents(&path, OpenMode::Map).0, b"old");
    // Mixed: new data renamed, old checkpoint still in place.
    link_backups(&paths, &j);
    std::fs::rename(paths.data_dir.show(&j.new_external.as_ref().unwrap().temp_name), &paths.external)
        .unwrap();
    let err = open_checkpoint(&path, OpenMode::Map, None, &mut || true).err().unwrap();
    assert!(matches!(err, Error::InterruptedSave { .. }), "{err}");
    assert_eq!(recover(&path).unwrap(), Recovery::CompletedNew);
    assert_eq!(contents(&path, OpenMode::Map), (b"new".to_vec(), Some(b"new-data".to_vec())));
    assert!(helper_files(&path).unwrap().is_empty());
}

/// A save's new temporary file whose lock a cleanup of leftovers took first (the cleanup saw a
/// file nobody held: an orphan, to remove) is given up for a new one, never written unlocked.
/// (CI once saw a save go on with such a file and find it gone at the rename.)
#[test]
fn a_temp_file_a_cleanup_locked_first_is_given_up() {
    let dir = tempfile::tempdir().unwrap();
    let paths = PairPaths::new(&dir.path().join("a.ckpt")).unwrap();
    let temp = Temp::create(&paths.ckpt_dir, &paths.prefix, ".tmp", None).unwrap();
    let cleanup = std::fs::File::open(temp.path()).unwrap();
    assert!(crate::dir::try_flock(&cleanup, libc::LOCK_EX).unwrap());
    assert!(lock_new_temp(&paths.ckpt_dir, temp).unwrap().is_none());
    drop(cleanup);
    let temp = Temp::create(&paths.ckpt_dir, &paths.prefix, ".tmp", None).unwrap();
    let locked = lock_new_temp(&paths.ckpt_dir, temp).unwrap().expect("nobody else holds it");
    let other = std::fs::File::open(locked.path()).unwrap();
    assert!(!crate::dir::try_flock(&other, libc::LOCK_EX).unwrap(), "the save holds its lock");
}

/// The verdict a load reaches after it saw a journal and found the commit lock free. A save that
/// finished in between (journal removed, lock released) is no dead save: the load retries. Only a
/// journal still there while the load holds the lock shared is a dead save's. (CI once saw a load
/// raise `InterruptedSave` beside live saves: the lock was probed after the journal was read.)
#[test]
fn a_dead_save_is_told_by_the_journal_read_under_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.ckpt");
    save(&path, b"done", None);
    let paths = PairPaths::new(&path).unwrap();
    // the journal the caller saw is gone: the save finished
    let verdict = interrupted_or_retry(&paths, "a save is replacing the files").unwrap();
    assert!(matches!(verdict, Attempt::Retry(_)));
    let (paths, _) = interrupted(&path);
    // a live save holds the lock: wait for it
    let held = DirLock::exclusive(&paths.dir, &mut || true).unwrap();
    assert!(matches!(interrupted_or_retry(&paths, "x").unwrap(), Attempt::Retry(_)));
    drop(held);
    // the journal is still there and nobody holds the lock: a dead save, only `recover` settles it
    let err = interrupted_or_retry(&paths, "x").err().unwrap();
    assert!(matches!(err, Error::InterruptedSave { .. }), "{err}");
}

#[test]
fn recovery_restores_the_old_pair_when_new_files_are_gone_or_changed() {
    for damage in ["removed", "changed"] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.ckpt");
        let (paths, j) = interrupted(&path);
        link_backups(&paths, &j);
        std::fs::rename(paths.data_dir.show(&j.new_external.as_ref().unwrap().temp_name), &paths.external)
            .unwrap();
        let temp = paths.ckpt_dir.show(&j.new_checkpoint.temp_name);
        match damage {
            "removed" => std::fs::remove_file(&temp).unwrap(),
            _ => std::fs::write(&temp, b"NEW").unwrap(), // same length, other bytes
        }
        assert_eq!(recover(&path).unwrap(), Recovery::RestoredOld, "{damage}");
        assert_eq!(contents(&path, OpenMode::Read), (b"old".to_vec(), Some(b"old-data".to_vec())));
        assert_eq!(names(dir.path()), ["a.ckpt", "a.ckpt.data"], "{damage}");
    }
}

#[test]
fn next_save_cleans_up_after_an_interrupted_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.ckpt");
    interrupted(&path);
    save(&path, b"third", None);
    assert_eq!(contents(&path, OpenMode::Map), (b"third".to_vec(), None));
    assert_eq!(names(dir.path()), ["a.ckpt"]);
}

#[test]
fn special_targets_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    mkfifo(&fifo);
    assert!(try_save(&fifo, b"x", None).is_err());
    assert!(std::fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());
    assert!(open_checkpoint(&fifo, OpenMode::Map, None, &mut || true).is_err());
    assert_eq!(names(dir.path()), ["fifo"]);
}

/// A link planted at `<ckpt>.data` is replaced (external save) or removed (inline save) as a
/// name: its target is never written, truncated or removed.
#[test]
fn a_link_at_the_data_name_is_never_followed() {
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim");
    for external in [false, true] {
        std::fs::write(&victim, b"private").unwrap();
        let path = dir.path().join("a.ckpt");
        save(&path, b"one", Some(b"data1"));
        std::fs::remove_file(dir.path().join("a.ckpt.data")).unwrap();
        symlink(&victim, dir.path().join("a.ckpt.data")).unwrap();
        save(&path, b"two", external.then_some(&b"data2"[..]));
        assert_eq!(std::fs::read(&victim).unwrap(), b"private", "external {external}");
        let data = std::fs::symlink_metadata(dir.path().join("a.ckpt.data"));
        assert_eq!(data.is_ok(), external);
        if external {
            assert!(data.unwrap().is_file());
            assert_eq!(contents(&path, OpenMode::Read).1.unwrap(), b"data2");
        }
        std::fs::remove_file(&path).unwrap();
        let _ = std::fs::remove_file(dir.path().join("a.ckpt.data"));
    }
}

/// A journal that names files by content cannot make recovery rename anything else over the
/// checkpoint: forged journals (wrong digests, names that are not helper names, garbage) leave the
/// checkpoint as it was.
#[test]
fn forged_journals_never_rename_other_files_over_the_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.ckpt");
    let other = dir.path().join("other.ckpt");
    save(&path, b"mine", None);
    std::fs::write(&other, b"precious").unwrap();
    let paths = PairPaths::for_write(&path).unwrap();
    let other_id = paths.ckpt_dir.stat(std::ffi::OsStr::new("other.ckpt")).unwrap().unwrap();
    let forged = |temp_name: &str, digest_of: &[u8]| {
        let mut sink = std::io::sink();
        let mut w = HashingWriter::new(&mut sink);
        w.write_all(digest_of).unwrap();
        Journal {
            checkpoint_name: paths.ckpt_name.clone(),
            new_checkpoint: NewFile { temp_name: temp_name.into(), digest: w.finish(), id: other_id.id },
            new_external: None,
            old_checkpoint: old(&paths, false),
            old_external: None,
        }
    };
    // 1. points at another file by name, with its identity and true digest
    // 2. a helper-shaped name that holds other bytes than the digest says
    let helper = format!("{}{}.tmp", paths.prefix, "c".repeat(32));
    std::fs::write(dir.path().join(&helper), b"attacker").unwrap();
    for journal in [forged("other.ckpt", b"precious"), forged(&helper, b"something else")] {
        write_journal(&paths, &journal).unwrap();
        let outcome = recover(&path);
        assert!(
            matches!(outcome, Ok(Recovery::RestoredOld) | Err(Error::Unrecoverable { .. })),
            "{outcome:?}"
        );
        assert_eq!(std::fs::read(&path).unwrap(), b"mine");
        assert_eq!(std::fs::read(&other).unwrap(), b"precious");
        let _ = std::fs::remove_file(paths.journal());
    }
    // 3. garbage: refused with a clear error, nothing renamed
    std::fs::write(paths.journal(), b"ortckpt-journal 2\nnonsense\n").unwrap();
    let err = recover(&path).unwrap_err();
    assert!(err.to_string().contains("unreadable"), "{err}");
    assert!(try_save(&path, b"x", None).is_err());
    assert_eq!(std::fs::read(&path).unwrap(), b"mine");
    assert_eq!(std::fs::read(&other).unwrap(), b"precious");
}

/// FIFOs at every helper name a save or recovery may open: both return promptly.
#[test]
fn fifos_at_helper_names_never_block() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.ckpt");
    save(&path, b"one", None);
    let paths = PairPaths::for_write(&path).unwrap();
    for name in [
        format!("{}{}.tmp", paths.prefix, "d".repeat(32)),
        format!("{}{}.old", paths.prefix, "d".repeat(32)),
        format!("{}{}.jtmp", paths.prefix, "d".repeat(32)),
    ] {
        mkfifo(&dir.path().join(name));
    }
    save(&path, b"two", Some(b"data")); // helper FIFOs are not ours: ignored, never opened
    assert_eq!(recover(&path).unwrap(), Recovery::Clean);
    mkfifo(&paths.journal());
    let err = recover(&path).unwrap_err();
    assert!(err.to_string().contains("FIFO"), "{err}");
    assert!(try_save(&path, b"three", None).is_err());
    assert_eq!(contents(&path, OpenMode::Read).0, b"two", "loads ignore a FIFO at the journal name");
    std::fs::remove_file(paths.journal()).unwrap();
    std::fs::remove_file(&paths.external).unwrap();
    mkfifo(&paths.external);
    let err = try_save(&path, b"three", Some(b"d")).unwrap_err();
    assert!(err.to_string().contains("FIFO"), "{err}");
}

/// A save interrupted after its new data was renamed into place (with its new checkpoint still at
/// its temporary name when `forward`, else removed) in `root/src`, copied with `cp -a` to
/// `root/copy`: the copy's checkpoint path and the journal.
fn copied_interrupted(root: &Path, forward: bool) -> (std::path::PathBuf, Journal) {
    let src = root.join("src");
    std::fs::create_dir(&src).unwrap();
    let (paths, j) = interrupted(&src.join("a.ckpt"));
    link_backups(&paths, &j);
    std::fs::rename(paths.data_dir.show(&j.new_external.as_ref().unwrap().temp_name), &paths.external)
        .unwrap();
    if !forward {
        std::fs::remove_file(paths.ckpt_dir.show(&j.new_checkpoint.temp_name)).unwrap();
    }
    let copy = root.join("copy");
    let starting = STARTING_PROCESSES.write().unwrap_or_else(std::sync::PoisonError::into_inner);
    let status = std::process::Command::new("cp").arg("-a").arg(&src).arg(&copy).status().unwrap();
    drop(starting);
    assert!(status.success());
    (copy.join("a.ckpt"), j)
}

/// `cp -a` of a directory holding an interrupted save (inode numbers change): recovery decides by
/// content and the copy is loadable and saveable again.
#[test]
fn a_copied_directory_with_an_interrupted_save_recovers() {
    for forward in [true, false] {
        let root = tempfile::tempdir().unwrap();
        let (path, _) = copied_interrupted(root.path(), forward);
        let copy = root.path().join("copy");
        let want = if forward { Recovery::CompletedNew } else { Recovery::RestoredOld };
        assert_eq!(recover(&path).unwrap(), want);
        let (c, d) = contents(&path, OpenMode::Read);
        match forward {
            true => assert_eq!((c, d), (b"new".to_vec(), Some(b"new-data".to_vec()))),
            false => assert_eq!((c, d), (b"old".to_vec(), Some(b"old-data".to_vec()))),
        }
        save(&path, b"again", None);
        assert_eq!(names(&copy), ["a.ckpt"]);
    }
}

/// The same, with the inode reuse that made it fail now and then forced: after the copy, the old
/// checkpoint at the final name has the identity the journal recorded for the new one (its
/// temporary file was removed before the copy, and the file system gave its inode number to the
/// copy). Identities are hints: the bytes decide, and the old pair is restored.
#[test]
fn an_identity_reused_after_a_copy_decides_nothing() {
    let root = tempfile::tempdir().unwrap();
    let (path, j) = copied_interrupted(root.path(), false);
    let copied = PairPaths::for_write(&path).unwrap();
    let mut journal = j.clone();
    journal.new_checkpoint.id = copied.ckpt_dir.stat(&copied.ckpt_name).unwrap().unwrap().id;
    write_journal(&copied, &journal).unwrap();
    assert_eq!(recover(&path).unwrap(), Recovery::RestoredOld);
    assert_eq!(contents(&path, OpenMode::Read), (b"old".to_vec(), Some(b"old-data".to_vec())));
}

/// A name the file system cannot hold fails before anything is written: no journal, no temp.
#[test]
fn names_too_long_fail_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let long = dir.path().join("n".repeat(256));
    let err = try_save(&long, b"x", None).unwrap_err();
    assert!(
        matches!(&err, Error::Io { source, .. } if source.raw_os_error() == Some(libc::ENAMETOOLONG)),
        "{err}"
    );
    // 255 bytes: the checkpoint fits, `<name>.data` does not: an external save fails up front.
    let path = dir.path().join("n".repeat(255));
    let err = try_save(&path, b"x", Some(b"d")).unwrap_err();
    assert!(
        matches!(&err, Error::Io { source, .. } if source.raw_os_error() == Some(libc::ENAMETOOLONG)),
        "{err}"
    );
    assert!(names(dir.path()).is_empty(), "{:?}", names(dir.path()));
    save(&path, b"inline", None);
    save(&path, b"inline2", None);
    assert_eq!(names(dir.path()), ["n".repeat(255)]);
    assert!(matches!(read_journal(&PairPaths::new(&path).unwrap()).unwrap(), Found::None));
}

/// The file layer's modules import each other in one direction only (issue 16: `journal.rs` and
/// `save.rs` imported each other). Reads the sources, test modules excluded.
#[test]
fn file_layer_modules_have_no_import_cycle() {
    const MODULES: &[&str] = &[
        "atomic", "commit", "crash", "digest", "dir", "files", "journal", "lock", "pair", "recover", "save",
        "target",
    ];
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let deps: Vec<Vec<usize>> = MODULES
        .iter()
        .map(|m| {
            let text = std::fs::read_to_string(src.join(format!("{m}.rs"))).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap();
            (0..MODULES.len())
                .filter(|&j| MODULES[j] != *m)
                .filter(|&j| {
                    let d = MODULES[j];
                    code.contains(&format!("crate::{d}::")) || code.contains(&format!("crate::{d}::{{"))
                })
                .collect()
        })
        .collect();
    // Depth-first search for a back edge.
    fn visit(n: usize, deps: &[Vec<usize>], state: &mut [u8], path: &mut Vec<usize>) -> Option<Vec<usize>> {
        state[n] = 1;
        path.push(n);
        for &d in &deps[n] {
            if state[d] == 1 {
                return Some(path.clone());
            }
            if state[d] == 0 {
                if let Some(cycle) = visit(d, deps, state, path) {
                    return Some(cycle);
                }
            }
        }
        path.pop();
        state[n] = 2;
        None
    }
    let mut state = vec![0u8; MODULES.len()];
    for n in 0..MODULES.len() {
        if state[n] == 0 {
            let cycle = visit(n, &deps, &mut state, &mut Vec::new());
            assert!(
                cycle.is_none(),
                "import cycle: {:?}",
                cycle.unwrap().iter().map(|&i| MODULES[i]).collect::<Vec<_>>()
            );
        }
    }
}

/// Someone who may write the directory swaps a save's finished temporary file for a link to a
/// victim file before the renames: the save fails and is undone, the link never reaches the
/// checkpoint's names, the victim is untouched.
#[test]
fn a_temporary_file_swapped_for_a_link_never_reaches_the_checkpoint() {
    let _no_process_starts = STARTING_PROCESSES.read().unwrap_or_else(std::sync::PoisonError::into_inner);
    for had_old in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"private").unwrap();
        let path = dir.path().join("a.ckpt");
        if had_old {
            save(&path, b"old", Some(b"old-data"));
        }
        let prefix = PairPaths::for_write(&path).unwrap().prefix;
        // The checkpoint is written after the data file: swap the finished data temp then.
        let mut write_c = |f: &mut dyn Write| {
            for name in std::fs::read_dir(dir.path()).unwrap() {
                let name = name.unwrap().file_name().to_string_lossy().into_owned();
                if name.starts_with(&prefix) && name.ends_with(".tmp") {
                    let temp = dir.path().join(&name);
                    if std::fs::metadata(&temp).unwrap().len() > 0 {
                        std::fs::remove_file(&temp).unwrap();
                        symlink(&victim, &temp).unwrap();
                    }
                }
            }
            f.write_all(b"new")
        };
        let mut write_d = |f: &mut dyn Write| f.write_all(b"new-data");
        let err = save_pair(&path, &mut write_c, Some(&mut write_d), &mut || true).unwrap_err();
        assert!(err.to_string().contains("replaced while the save ran"), "{err}");
        assert_eq!(std::fs::read(&victim).unwrap(), b"private");
        for name in [&path, &dir.path().join("a.ckpt.data")] {
            assert!(std::fs::symlink_metadata(name).map_or(true, |m| m.is_file()), "{}", name.display());
        }
        if had_old {
            assert_eq!(contents(&path, OpenMode::Read), (b"old".to_vec(), Some(b"old-data".to_vec())));
        }
        assert_eq!(recover(&path).unwrap(), Recovery::Clean);
    }
}
