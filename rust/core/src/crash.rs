//! The steps of the save and recovery protocols, and a test-only crash hook: with
//! `ORTCKPT_TEST_KILL_AT=<step name>` in the environment, the process kills itself with SIGKILL
//! right after that step, so tests can stop a save deterministically between any two file system
//! operations. The variable is read at every step (a getenv, nothing next to the fsyncs around
//! it), so a forked test child can set it after its parent already saved. The steps, in order,
//! are [`Step::ALL`]; docs/format.md ("Crash consistency") describes them.

/// Declares the steps once: the enum, its names and the ordered list.
macro_rules! steps {
    ($($(#[$doc:meta])* $step:ident = $name:literal,)*) => {
        /// One step of a save or recovery, after which a crash may happen.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum Step {
            $($(#[$doc])* $step,)*
        }

        impl Step {
            /// Every step, in the order a save with external data over an existing external-data
            /// checkpoint (then an inline one over it, then a recovery) passes them.
            pub const ALL: &'static [Step] = &[$(Step::$step,)*];

            /// The step's name (the value `ORTCKPT_TEST_KILL_AT` takes).
            pub fn name(self) -> &'static str {
                match self {
                    $(Step::$step => $name,)*
                }
            }
        }

        /// The names of [`Step::ALL`], in order.
        pub const STEPS: &[&str] = &[$($name,)*];
    };
}

steps! {
    /// The new data file exists (empty) under its temporary name.
    DataCreated = "data_created",
    /// The new data file's bytes are written.
    DataWritten = "data_written",
    /// The new data file is synced.
    DataSynced = "data_synced",
    /// The new checkpoint file exists (empty) under its temporary name.
    CkptCreated = "ckpt_created",
    /// The new checkpoint's bytes are written.
    CkptWritten = "ckpt_written",
    /// The new checkpoint is synced.
    CkptSynced = "ckpt_synced",
    /// The directory's commit lock is held.
    Locked = "locked",
    /// Earlier interrupted saves are settled and their leftovers removed.
    CleanupDone = "cleanup_done",
    /// The journal is complete and synced under its temporary name.
    JournalWritten = "journal_written",
    /// The journal has its name and the directory is synced: the save is decided.
    JournalCommitted = "journal_committed",
    /// The old checkpoint has its backup hard link.
    BackupCkptLinked = "backup_ckpt_linked",
    /// The old data file has its backup hard link.
    BackupDataLinked = "backup_data_linked",
    /// The backups are durable.
    BackupsSynced = "backups_synced",
    /// The new data file has its final name.
    DataRenamed = "data_renamed",
    /// The new checkpoint has its final name.
    CkptRenamed = "ckpt_renamed",
    /// The renames are durable.
    RenamesSynced = "renames_synced",
    /// An inline save over an external-data checkpoint removed the stale data file.
    StaleDataRemoved = "stale_data_removed",
    /// The journal is gone: the save is committed.
    JournalRemoved = "journal_removed",
    /// The backups are gone.
    BackupsRemoved = "backups_removed",
    /// Recovery put a data file in place (new, or old from its backup).
    RecoverDataPlaced = "recover_data_placed",
    /// Recovery put a checkpoint file in place (new, or old from its backup).
    RecoverCkptPlaced = "recover_ckpt_placed",
    /// Recovery removed the journal.
    RecoverJournalRemoved = "recover_journal_removed",
}

/// Reports that `step` just completed; kills the process when it is the configured step.
pub fn crash_point(step: Step) {
    if std::env::var_os("ORTCKPT_TEST_KILL_AT").is_some_and(|target| target == step.name()) {
        // SAFETY: plain libc calls without pointers; SIGKILL cannot be caught, so nothing after
        // this line runs (exactly like a power cut for everything but the page cache).
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
    }
}
