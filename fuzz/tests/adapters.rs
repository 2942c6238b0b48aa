//! The `adapter_bytes` oracle on its seeds: an adapter ONNX Runtime 1.32 wrote
//! (`AdapterFormat.export_adapter`), one ortckpt wrote, and the fuzzer's first finding (an
//! oracle bug: `[int64]` dims on a 4-byte boundary, which ORT's C++ verifier and ortckpt accept
//! and the Rust verifier refuses); all must be accepted.
//!
//! Run with `cargo test --manifest-path fuzz/Cargo.toml` (no sanitizer or nightly flags needed).

use std::path::Path;

use ortckpt_core::{check_adapter_bytes, index_adapter};

#[test]
fn adapter_seeds_pass_the_oracle() {
    let seeds = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds/adapter_bytes");
    let mut files: Vec<_> = std::fs::read_dir(&seeds).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert!(files.len() >= 2, "expected the adapter seeds in {}", seeds.display());
    for path in files {
        let bytes = std::fs::read(&path).unwrap();
        let index = index_adapter(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(!index.parameters.is_empty());
        check_adapter_bytes(&bytes);
        // Every truncation of a real file is refused or read consistently.
        for len in 0..bytes.len() {
            check_adapter_bytes(&bytes[..len]);
        }
    }
}
