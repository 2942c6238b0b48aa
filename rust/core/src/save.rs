//! Saving a checkpoint with its external data file: the writer's pieces of each file are streamed
//! here, from the caller's buffers, into the crash-consistent pair protocol (`commit.rs`), one
//! "write this file" call each. Only the metadata and a bounded staging buffer are held in
//! memory, whatever the checkpoint's size.

use std::io::{IoSlice, Write};
use std::path::Path;

use crate::commit::{save_pair, WriteFile};
pub use crate::pair::{external_data_location, external_data_path};
use crate::placement::SaveOptions;
use crate::spec::CheckpointSpec;
use crate::writer::{plan_and_layout, Pieces};
use crate::Result;

/// What a save wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SaveSummary {
    /// Bytes written to the checkpoint file.
    pub checkpoint_bytes: u64,
    /// Bytes written to the external data file, when one was written.
    pub external_data_bytes: Option<u64>,
}

/// Writes `spec` to `path`, and tensor data to `external_data_path(path)` when the options call
/// for it, crash-consistently (see `commit.rs`). Every tensor's bytes are streamed from the
/// caller's buffers.
pub fn save_checkpoint(path: &Path, spec: &CheckpointSpec<'_>, options: &SaveOptions) -> Result<SaveSummary> {
    save_checkpoint_interruptible(path, spec, options, &mut || true)
}

/// [`save_checkpoint`], asking `keep_going` while it waits for the directory's commit lock
/// (returning false stops with [`crate::Error::Interrupted`], nothing committed).
pub fn save_checkpoint_interruptible(
    path: &Path,
    spec: &CheckpointSpec<'_>,
    options: &SaveOptions,
    keep_going: &mut dyn FnMut() -> bool,
) -> Result<SaveSummary> {
    let layout = plan_and_layout(spec, options)?;
    let mut write_checkpoint = |out: &mut dyn Write| write_pieces(out, &layout.checkpoint);
    let mut write_external = |out: &mut dyn Write| write_pieces(out, &layout.external);
    let external: Option<WriteFile<'_>> =
        if layout.external.is_empty() { None } else { Some(&mut write_external) };
    save_pair(path, &mut write_checkpoint, external, keep_going)?;
    Ok(SaveSummary {
        checkpoint_bytes: layout.checkpoint.len(),
        external_data_bytes: (!layout.external.is_empty()).then(|| layout.external.len()),
    })
}

/// Pieces shorter than this are gathered in a staging buffer (one write for many small tensors);
/// longer ones go from the caller's memory straight to the kernel.
const DIRECT_BYTES: usize = 256 * 1024;
/// The staging buffer's size: the only memory a write needs beyond the metadata.
const STAGING_BYTES: usize = 1 << 20;

/// Writes `pieces` to `out` in order: small pieces through a 1 MiB staging buffer, large ones
/// directly, each direct write vectored with the staged bytes before it.
pub(crate) fn write_pieces(out: &mut (impl Write + ?Sized), pieces: &Pieces<'_>) -> std::io::Result<()> {
    let mut staged: Vec<u8> =
        Vec::with_capacity(STAGING_BYTES.min(usize::try_from(pieces.len()).unwrap_or(0)));
    for piece in pieces.slices() {
        if piece.len() >= DIRECT_BYTES {
            write_all_vectored(out, &mut [IoSlice::new(&staged), IoSlice::new(piece)])?;
            staged.clear();
        } else {
            if staged.len() + piece.len() > STAGING_BYTES {
                out.write_all(&staged)?;
                staged.clear();
            }
            staged.extend_from_slice(piece);
        }
    }
    out.write_all(&staged)?;
    out.flush()
}

/// `write_all` for several buffers (std's `write_all_vectored` is unstable).
fn write_all_vectored(out: &mut (impl Write + ?Sized), mut bufs: &mut [IoSlice<'_>]) -> std::io::Result<()> {
    IoSlice::advance_slices(&mut bufs, 0);
    while !bufs.is_empty() {
        match out.write_vectored(bufs) {
            Ok(0) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::WriteZero,
                    "failed to write whole buffer",
                ))
            }
            Ok(n) => IoSlice::advance_slices(&mut bufs, n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{TensorPayload, TensorSpec};
    use crate::writer::plan_and_layout;
    use crate::DataType;

    /// A sink that takes at most `max` bytes per call, vectored or not, and sometimes reports an
    /// interruption: `write_pieces` must still write exactly the file.
    struct Trickle {
        out: Vec<u8>,
        max: usize,
        calls: usize,
    }

    impl Write for Trickle {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.calls += 1;
            if self.calls.is_multiple_of(5) {
                return Err(std::io::ErrorKind::Interrupted.into());
            }
            let n = buf.len().min(self.max);
            self.out.extend_from_slice(&buf[..n]);
            Ok(n)
        }

        fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> std::io::Result<usize> {
            let mut left = self.max;
            let mut written = 0;
            for b in bufs {
                let n = b.len().min(left);
                self.out.extend_from_slice(&b[..n]);
                written += n;
                left -= n;
            }
            Ok(written)
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn pieces_are_written_exactly_through_partial_writes() {
        let big: Vec<u8> = (0..DIRECT_BYTES as u32 * 3).map(|i| (i % 251) as u8).collect();
        let small: Vec<u8> = (0..100u8).collect();
        let tensor = |name: &str, bytes: &'static [u8]| TensorSpec {
            name: name.into(),
            data_type: DataType::Uint8,
            dims: vec![bytes.len() as i64],
            data: TensorPayload::Bytes(bytes),
            doc_string: None,
        };
        let (big, small): (&'static [u8], &'static [u8]) = (big.leak(), small.leak());
        let spec = CheckpointSpec {
            trainable: (0..40).map(|i| tensor(&format!("s{i}"), small)).chain([tensor("big", big)]).collect(),
            ..Default::default()
        };
        let layout =
            plan_and_layout(&spec, &SaveOptions { external_data_threshold: None, external_momentums: false })
                .unwrap();
        let expected = layout.checkpoint.concat();
        for max in [1, 7, 4096, usize::MAX] {
            let mut sink = Trickle { out: Vec::new(), max, calls: 0 };
            write_pieces(&mut sink, &layout.checkpoint).unwrap();
            assert!(sink.out == expected, "max {max}");
        }
    }
}
