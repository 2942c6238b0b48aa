//! A test-only crash hook: with `ORTCKPT_TEST_KILL_AT=<step>` in the environment, the process
//! kills itself with SIGKILL right after the save (or recovery) step of that name, so tests can
//! stop a save deterministically between any two file system operations. The variable is read at
//! every step (a getenv, nothing next to the fsyncs around it), so a forked test child can set it
//! after its parent already saved. The steps, in order, are listed in [`STEPS`] and in
//! docs/format.md ("Crash consistency").

/// Every step name a save or recovery reports, in the order a save with external data over an
/// existing external-data checkpoint (then an inline one over it) passes them.
pub const STEPS: &[&str] = &[
    "data_created",
    "data_written",
    "data_synced",
    "ckpt_created",
    "ckpt_written",
    "ckpt_synced",
    "locked",
    "cleanup_done",
    "journal_written",
    "journal_committed",
    "backup_ckpt_linked",
    "backup_data_linked",
    "backups_synced",
    "data_renamed",
    "ckpt_renamed",
    "renames_synced",
    "stale_data_removed",
    "journal_removed",
    "backups_removed",
    "recover_data_placed",
    "recover_ckpt_placed",
    "recover_journal_removed",
];

/// Reports that `step` just completed; kills the process when it is the configured step.
pub fn crash_point(step: &str) {
    if std::env::var_os("ORTCKPT_TEST_KILL_AT").is_some_and(|target| target == step) {
        // SAFETY: plain libc calls without pointers; SIGKILL cannot be caught, so nothing after
        // this line runs (exactly like a power cut for everything but the page cache).
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
    }
}
