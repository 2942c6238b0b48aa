//! Saving a checkpoint with its external data file: both files are written under temporary
//! names, synced, and renamed only once both are complete (external file first, so a checkpoint
//! never names data that is not there yet).

use std::path::{Path, PathBuf};

use crate::atomic::PendingFile;
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
/// for it. External tensor bytes are streamed from the caller's buffers; inline ones are copied
/// into the flatbuffer, which is built in memory.
pub fn save_checkpoint(path: &Path, spec: &CheckpointSpec<'_>, options: &SaveOptions) -> Result<SaveSummary> {
    validate(spec)?;
    let (placement, chunks) = Placement::plan(spec, options.external_data_threshold);
    let flatbuffer = build(spec, &placement)?;

    let mut external = None;
    let mut external_bytes = None;
    if !chunks.is_empty() {
        let ext_path = external_data_path(path);
        let mut file = PendingFile::create(&ext_path)?;
        let mut written: u64 = 0;
        for chunk in &chunks {
            let pad = chunk.offset.checked_sub(written).ok_or_else(|| Error::InvalidSpec {
                detail: "internal error: external chunks out of order".into(),
            })?;
            write_zeros(&mut file, pad)?;
            file.write_all(chunk.bytes)?;
            written = chunk.offset + chunk.bytes.len() as u64;
        }
        external_bytes = Some(written);
        external = Some(file);
    }

    let mut checkpoint = PendingFile::create(path)?;
    checkpoint.write_all(&flatbuffer)?;
    if let Some(file) = external.as_mut() {
        file.sync()?;
    }
    checkpoint.sync()?;
    if let Some(file) = external {
        file.commit()?;
    }
    checkpoint.commit()?;
    Ok(SaveSummary { checkpoint_bytes: flatbuffer.len() as u64, external_data_bytes: external_bytes })
}

fn write_zeros(file: &mut PendingFile, count: u64) -> Result<()> {
    const ZEROS: [u8; 64] = [0; 64];
    let mut left = count;
    while left > 0 {
        let n = left.min(ZEROS.len() as u64) as usize;
        file.write_all(&ZEROS[..n])?;
        left -= n as u64;
    }
    Ok(())
}
