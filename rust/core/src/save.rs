//! Saving a checkpoint with its external data file: the bytes of each file are produced here and
//! handed to the crash-consistent pair protocol (`commit.rs`) as one "write this file" call each.

use std::path::{Path, PathBuf};

use crate::commit::{save_pair, WriteFile};
use crate::files::TempFile;
use crate::placement::Placement;
use crate::writer::{build, validate, CheckpointSpec};
use crate::{Error, Result};

/// ORT's default `external_data_threshold`: 1800 MiB.
pub const DEFAULT_EXTERNAL_DATA_THRESHOLD: u64 = 1800 * 1024 * 1024;

#[derive(Clone, Copy, Debug)]
pub struct SaveOptions {
    /// Tensor data beyond this many bytes in total go to the external data file; `None` keeps
    /// everything inline (and fails beyond the 2 GiB a flatbuffer can hold).
    pub external_data_threshold: Option<u64>,
}

impl Default for SaveOptions {
    fn default() -> Self {
        SaveOptions { external_data_threshold: Some(DEFAULT_EXTERNAL_DATA_THRESHOLD) }
    }
}

/// What a save wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SaveSummary {
    pub checkpoint_bytes: u64,
    /// Bytes written to the external data file, when one was written.
    pub external_data_bytes: Option<u64>,
}

/// ORT's `ExternalCheckpointDataPath`: the checkpoint path with `.data` appended.
pub fn external_data_path(checkpoint: &Path) -> PathBuf {
    let mut s = checkpoint.as_os_str().to_owned();
    s.push(".data");
    PathBuf::from(s)
}

/// Writes `spec` to `path`, and tensor data to `external_data_path(path)` when the options call
/// for it, crash-consistently (see `commit.rs`). External tensor bytes are streamed from the
/// caller's buffers; inline ones are copied into the flatbuffer, which is built in memory.
pub fn save_checkpoint(path: &Path, spec: &CheckpointSpec<'_>, options: &SaveOptions) -> Result<SaveSummary> {
    validate(spec)?;
    let (placement, chunks) = Placement::plan(spec, options.external_data_threshold);
    let flatbuffer = build(spec, &placement)?;

    let mut external_bytes = None;
    let mut write_external = |file: &mut TempFile| -> Result<()> {
        let mut written: u64 = 0;
        for chunk in &chunks {
            let pad = chunk.offset.checked_sub(written).ok_or_else(|| Error::InvalidSpec {
                detail: "internal error: external chunks out of order".into(),
            })?;
            file.write_zeros(pad)?;
            file.write_all(chunk.bytes)?;
            written = chunk.offset + chunk.bytes.len() as u64;
        }
        external_bytes = Some(written);
        Ok(())
    };
    let mut write_checkpoint = |file: &mut TempFile| file.write_all(&flatbuffer);
    let external: Option<WriteFile<'_>> = if chunks.is_empty() { None } else { Some(&mut write_external) };
    save_pair(path, &mut write_checkpoint, external)?;
    Ok(SaveSummary { checkpoint_bytes: flatbuffer.len() as u64, external_data_bytes: external_bytes })
}
