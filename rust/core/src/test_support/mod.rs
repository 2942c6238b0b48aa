//! Test support shared by this crate's tests and the fuzz crate (cargo feature `test-support`):
//!
//! * [`raw`]: build checkpoint flatbuffers field by field, bypassing the writer's validation, so
//!   tests can make exactly the (malformed) file they need;
//! * [`oracle`]: what the flatbuffers crate's generated verifier and accessors make of a buffer,
//!   an independent reference for the hand-written reader;
//! * [`spec_from_index`]: the spec that writes an index back;
//! * [`alloc::CountingAllocator`]: a global allocator that measures heap use, for memory bounds.

pub mod alloc;
pub mod oracle;
pub mod raw;
mod spec;

pub use spec::{bytes_tensor, spec_from_index, u8_tensor};

use std::path::{Path, PathBuf};

/// A deterministic xorshift generator, so randomized tests need no extra dependency and repeat.
pub struct Rng(pub u64);

impl Rng {
    /// The next pseudo-random value (the seed must not be 0).
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// The repository's `tests/data`: checkpoints written by ONNX Runtime 1.19.2 (in git).
pub fn test_data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data")
}

/// The corpus of ORT-written checkpoints with their JSON manifests (`tests/data/corpus`, in git).
pub fn ort_corpus_dir() -> PathBuf {
    test_data_dir().join("corpus")
}

/// The `.ckpt` files of `dir`, sorted; none when `dir` does not exist.
pub fn checkpoint_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "ckpt"))
        .collect();
    files.sort();
    files
}
