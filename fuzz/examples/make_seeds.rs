//! Writes `seeds/index_bytes/*.ckpt`: checkpoints the writer never makes (external data,
//! version 1, doc strings, ...), so the fuzzer starts with those paths covered.
//!
//! cargo run --manifest-path fuzz/Cargo.toml --example make_seeds

use std::path::Path;

fn main() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds/index_bytes");
    std::fs::create_dir_all(&dir).unwrap();
    let names = ["external", "v1_doc_properties", "nominal_with_dims", "no_module_state"];
    let examples = ortckpt_fuzz::craft::examples();
    assert_eq!(examples.len(), names.len());
    for (name, raw) in names.iter().zip(examples) {
        let path = dir.join(format!("crafted_{name}.ckpt"));
        std::fs::write(&path, raw.build()).unwrap();
        println!("{}", path.display());
    }
}
