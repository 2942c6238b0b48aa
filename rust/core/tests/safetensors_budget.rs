//! A safetensors header costs memory in proportion to its length: the entries are built straight
//! from the JSON (no generic tree), with shapes capped at 32 dims. The worst shapes for the
//! ratio are measured here: many minimal entries, and entries of 32 one-digit dims each.

use ortckpt_core::read_safetensors;
use ortckpt_core::test_support::alloc::CountingAllocator;

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// Heap bytes the parse may take per header byte.
const RATIO: usize = 6;

fn file(json: &str) -> Vec<u8> {
    let mut out = (json.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(json.as_bytes());
    out
}

/// Peak heap (above what was live before) while reading `bytes`, and the number of tensors read.
fn peak_of(bytes: &[u8]) -> (usize, usize) {
    let before = CountingAllocator::live();
    CountingAllocator::reset_peak();
    let read = read_safetensors(bytes).map(|f| f.tensors.len()).unwrap_or(0);
    (CountingAllocator::peak() - before, read)
}

#[test]
fn header_memory_is_proportional_to_its_length() {
    let minimal: Vec<String> =
        (0..100_000).map(|i| format!(r#""{i}":{{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}"#)).collect();
    let dims = ["1"; 32].join(",");
    let ranked: Vec<String> = (0..20_000)
        .map(|i| format!(r#""{i}":{{"dtype":"U8","shape":[{dims}],"data_offsets":[0,0]}}"#))
        .collect();
    // The same count of entries with one bad one at the end: everything is parsed, then refused.
    let mut bad = minimal.clone();
    bad.push(r#""x":{"dtype":"U8","shape":[],"data_offsets":[0,1]}"#.into());
    for (what, entries, accepted) in
        [("minimal", &minimal, 100_000), ("rank 32", &ranked, 0), ("bad", &bad, 0)]
    {
        let bytes = file(&format!("{{{}}}", entries.join(",")));
        let (peak, read) = peak_of(&bytes);
        println!(
            "{what}: {} header bytes, peak heap {peak} ({:.2}x)",
            bytes.len(),
            peak as f64 / bytes.len() as f64
        );
        assert_eq!(read, accepted, "{what}");
        assert!(
            peak <= RATIO * bytes.len(),
            "{what}: {peak} bytes of heap for a {}-byte header",
            bytes.len()
        );
    }
}
