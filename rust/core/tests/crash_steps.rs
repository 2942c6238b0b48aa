//! Kill at every step of the save protocol, where the protocol lives: for each step of
//! `CrashStep::ALL` and each combination of old/new external data, a child process (this test
//! binary, re-run as `crash_child`) saves over an existing checkpoint with the crash hook armed at
//! that step and is SIGKILLed there. The parent then checks that a load gives exactly the old or
//! the new pair (or `InterruptedSave`), that `recover` restores exactly one of them — the new one
//! whenever the journal was committed — and that no helper file is left.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use ortckpt_core::test_support::bytes_tensor;
use ortckpt_core::{
    helper_files, open_checkpoint, recover, save_checkpoint, CheckpointSpec, CrashStep, DataType, Error,
    OpenMode, Recovery, SaveOptions,
};

const CHILD_PATH: &str = "ORTCKPT_CRASH_CHILD_PATH";
const CHILD_EXTERNAL: &str = "ORTCKPT_CRASH_CHILD_EXTERNAL";
const CHILD_RECOVER: &str = "ORTCKPT_CRASH_CHILD_RECOVER";

fn bytes(tag: u8) -> (Vec<u8>, Vec<u8>) {
    ((0..8192u32).map(|i| (i % 251) as u8 ^ tag).collect(), vec![tag; 16])
}

fn save_state(path: &Path, tag: u8, external: bool) -> ortckpt_core::Result<()> {
    let (big, small) = bytes(tag);
    let spec = CheckpointSpec {
        trainable: vec![bytes_tensor("w", DataType::Uint8, &[big.len() as i64], &big)],
        frozen: vec![bytes_tensor("s", DataType::Uint8, &[small.len() as i64], &small)],
        ..Default::default()
    };
    let options = SaveOptions { external_data_threshold: external.then_some(0), ..Default::default() };
    save_checkpoint(path, &spec, &options).map(|_| ())
}

/// The child's part (a no-op in a normal test run).
#[test]
fn crash_child() {
    let Some(path) = std::env::var_os(CHILD_PATH) else { return };
    let path = PathBuf::from(path);
    if std::env::var_os(CHILD_RECOVER).is_some() {
        recover(&path).unwrap();
    } else {
        save_state(&path, 2, std::env::var_os(CHILD_EXTERNAL).is_some()).unwrap();
    }
}

/// Runs the child on `path` with the crash hook at `step`; true when it was killed there.
fn run_child(path: &Path, external: bool, recover: bool, step: CrashStep) -> bool {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "crash_child", "--test-threads=1", "--quiet"])
        .env(CHILD_PATH, path)
        .env("ORTCKPT_TEST_KILL_AT", step.name())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    if external {
        cmd.env(CHILD_EXTERNAL, "1");
    }
    if recover {
        cmd.env(CHILD_RECOVER, "1");
    }
    let status = cmd.status().unwrap();
    match status.signal() {
        Some(libc::SIGKILL) => true,
        Some(other) => panic!("child died of signal {other} at {}", step.name()),
        None => {
            assert!(status.success(), "child failed at {}", step.name());
            false
        }
    }
}

/// The files a complete save of state `tag` leaves (checkpoint, data file).
fn reference(root: &Path, tag: u8, external: bool) -> (Vec<u8>, Option<Vec<u8>>) {
    let path = root.join(format!("ref-{tag}-{external}")).join("m.ckpt");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    save_state(&path, tag, external).unwrap();
    let data = std::fs::read(path.with_extension("ckpt.data")).ok();
    (std::fs::read(&path).unwrap(), data)
}

fn loaded(path: &Path) -> Result<(Vec<u8>, Option<Vec<u8>>), Error> {
    let o = open_checkpoint(path, OpenMode::Read, None, &mut || true)?;
    Ok((o.checkpoint.bytes().to_vec(), o.external.map(|e| e.bytes().to_vec())))
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn is_save_step(step: CrashStep) -> bool {
    !step.name().starts_with("recover_")
}

fn past_journal(step: CrashStep) -> bool {
    let all = CrashStep::ALL;
    let at = |s: CrashStep| all.iter().position(|x| *x == s).unwrap();
    at(step) >= at(CrashStep::JournalCommitted) && is_save_step(step)
}

#[test]
fn kill_at_every_save_step_leaves_old_or_new() {
    let root = tempfile::tempdir().unwrap();
    let mut kills = 0;
    for (old_ext, new_ext) in [(true, true), (false, true), (true, false), (false, false)] {
        let refs = [reference(root.path(), 1, old_ext), reference(root.path(), 2, new_ext)];
        for &step in CrashStep::ALL.iter().filter(|s| is_save_step(**s)) {
            let dir = root.path().join(format!("{old_ext}-{new_ext}-{}", step.name()));
            std::fs::create_dir(&dir).unwrap();
            let path = dir.join("m.ckpt");
            save_state(&path, 1, old_ext).unwrap();
            let killed = run_child(&path, new_ext, false, step);
            kills += usize::from(killed);
            let which = |pair: &(Vec<u8>, Option<Vec<u8>>)| refs.iter().position(|r| r == pair);
            match loaded(&path) {
                Ok(pair) => assert!(which(&pair).is_some(), "mixed pair after {}", step.name()),
                Err(Error::InterruptedSave { .. }) => {}
                Err(e) => panic!("load after {}: {e}", step.name()),
            }
            let outcome = recover(&path).unwrap();
            let pair = loaded(&path).unwrap();
            let tag = which(&pair).unwrap_or_else(|| panic!("mixed pair after recovering {}", step.name()));
            if killed && past_journal(step) {
                assert_eq!(tag, 1, "the committed save was lost at {} ({outcome:?})", step.name());
            }
            if !killed {
                assert_eq!((tag, outcome), (1, Recovery::Clean), "{}", step.name());
            }
            assert!(helper_files(&path).unwrap().is_empty(), "{}", step.name());
            let mut want = vec!["m.ckpt".to_owned()];
            if pair.1.is_some() {
                want.push("m.ckpt.data".to_owned());
            }
            assert_eq!(names(&dir), want, "{}", step.name());
        }
    }
    // every step of an external-over-external save, and the inline-only ones, were reached
    assert!(kills >= 4 * 12, "{kills}");
}

#[test]
fn kill_at_every_recovery_step_is_recovered_by_running_it_again() {
    let root = tempfile::tempdir().unwrap();
    let new = reference(root.path(), 2, true);
    for &step in CrashStep::ALL.iter().filter(|s| !is_save_step(**s)) {
        let dir = root.path().join(step.name());
        std::fs::create_dir(&dir).unwrap();
        let path = dir.join("m.ckpt");
        save_state(&path, 1, true).unwrap();
        assert!(run_child(&path, true, false, CrashStep::BackupsSynced));
        assert!(run_child(&path, true, true, step), "recovery never reached {}", step.name());
        let outcome = recover(&path).unwrap();
        // Killed after removing the journal, the first recovery had finished its work already.
        let want = match step {
            CrashStep::RecoverJournalRemoved => [Recovery::Clean, Recovery::RemovedLeftovers],
            _ => [Recovery::CompletedNew; 2],
        };
        assert!(want.contains(&outcome), "{}: {outcome:?}", step.name());
        assert_eq!(loaded(&path).unwrap(), new, "{}", step.name());
        assert_eq!(names(&dir), ["m.ckpt", "m.ckpt.data"]);
    }
}
