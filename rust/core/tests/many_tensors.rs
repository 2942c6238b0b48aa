//! The index is compact: a 10.7 MiB nominal checkpoint of 400,000 tensors (the shape of issue 7)
//! indexes with a small constant of heap per tensor. Prints the time and memory figures (run with
//! `cargo test --release -p ortckpt-core --test many_tensors -- --nocapture`); asserts memory only.
//! `ORTCKPT_MANY_TENSORS` sets the tensor count (default 400,000).

use std::time::Instant;

use ortckpt_core::test_support::alloc::CountingAllocator;
use ortckpt_core::test_support::raw::{RawCheckpoint, RawTensor};
use ortckpt_core::{index_checkpoint, Storage};

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

#[test]
fn many_nominal_tensors_index_compactly() {
    let count: usize =
        std::env::var("ORTCKPT_MANY_TENSORS").ok().and_then(|v| v.parse().ok()).unwrap_or(400_000);
    let bytes = RawCheckpoint {
        nominal: true,
        trainable: (0..count).map(|i| RawTensor::nominal(&format!("p{i:06}"))).collect(),
        ..RawCheckpoint::default()
    }
    .build();

    let before = CountingAllocator::live();
    CountingAllocator::reset_peak();
    let start = Instant::now();
    let index = index_checkpoint(&bytes).unwrap();
    let elapsed = start.elapsed();
    let retained = CountingAllocator::live() - before;
    let peak = CountingAllocator::peak() - before;

    assert_eq!(index.tensor_count(), count);
    let last = index.tensor(count - 1).unwrap();
    assert_eq!((last.name, last.storage), (format!("p{:06}", count - 1).as_str(), Storage::Nominal));
    assert_eq!(index.find_parameter("p000123"), Some(123));
    let per_tensor = retained as f64 / count as f64;
    eprintln!(
        "{count} nominal tensors, {:.1} MiB file: indexed in {elapsed:?}; index {:.1} MiB \
         ({per_tensor:.1} bytes per tensor, {:.2}x the file), peak heap {:.1} MiB",
        bytes.len() as f64 / 1048576.0,
        retained as f64 / 1048576.0,
        retained as f64 / bytes.len() as f64,
        peak as f64 / 1048576.0,
    );
    // A 32-byte entry, a 7-byte name and a 4-byte sorted position per tensor.
    assert!(per_tensor <= 48.0, "{per_tensor} bytes of index per tensor");
    assert!(peak <= 2 * bytes.len(), "peak heap {peak} bytes for a {}-byte file", bytes.len());
}
