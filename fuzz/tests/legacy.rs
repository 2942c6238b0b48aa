//! The legacy-folder fuzz oracle on the ORT 1.15 folders of tests/data/ort115, on the crafted seeds,
//! and on deterministic mutations of both (no panic; whatever is accepted round-trips).
//!
//! Run with `cargo test --manifest-path fuzz/Cargo.toml` (no sanitizer or nightly flags needed).

use std::path::{Path, PathBuf};

use ortckpt_core::test_support::{test_data_dir, Rng};
use ortckpt_core::{read_legacy_folder, Storage};
use ortckpt_fuzz::legacy::{check_folder, check_legacy};

fn ort115() -> PathBuf {
    test_data_dir().join("ort115")
}

fn folders() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> =
        std::fs::read_dir(ort115()).unwrap().map(|e| e.unwrap().path()).filter(|p| p.is_dir()).collect();
    out.sort();
    assert!(out.len() >= 4, "expected the ORT 1.15 folders, found {out:?}");
    out
}

fn files_of(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| (p.file_name().unwrap().to_str().unwrap().to_owned(), std::fs::read(&p).unwrap()))
        .collect();
    out.sort();
    out
}

fn seeds() -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = folders().iter().flat_map(|d| files_of(d)).map(|f| f.1).collect();
    let crafted = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds/legacy_folder");
    out.extend(files_of(&crafted).into_iter().map(|f| f.1));
    out
}

#[test]
fn real_folders_read_and_convert() {
    for dir in folders() {
        let read = read_legacy_folder(&dir, None, &mut || true).unwrap().unwrap();
        assert!(read.index.parameter_count() > 0, "{}", dir.display());
        let files = files_of(&dir);
        let borrowed: Vec<(&str, &[u8])> = files.iter().map(|(n, b)| (n.as_str(), b.as_slice())).collect();
        check_folder(&borrowed);
    }
    let trained = read_legacy_folder(&ort115().join("adamw_trained"), None, &mut || true).unwrap().unwrap();
    let group = &trained.index.optimizer_groups[0];
    assert_eq!(group.name, "group0");
    let state = &group.states[0];
    let names: Vec<&str> = trained.index.momentums(state).map(|m| m.name).collect();
    assert_eq!(names, ["momentum0", "momentum1"]);
    assert!(trained.index.tensors().all(|t| matches!(t.storage, Storage::Inline { .. })));
}

#[test]
fn seeds_pass_the_oracle() {
    let seeds = seeds();
    assert!(seeds.len() >= 14, "{}", seeds.len());
    for seed in &seeds {
        check_legacy(seed);
    }
}

#[test]
fn mutations_pass_the_oracle() {
    let mut rng = Rng(0x1115);
    for seed in seeds() {
        for _ in 0..300 {
            let mut data = seed.clone();
            let edits = 1 + rng.next_u64() % 4;
            for _ in 0..edits {
                if data.is_empty() {
                    break;
                }
                let at = (rng.next_u64() % data.len() as u64) as usize;
                match rng.next_u64() % 4 {
                    0 => data[at] ^= 1 << (rng.next_u64() % 8),
                    1 => data[at] = rng.next_u64() as u8,
                    2 => data.truncate(at),
                    _ => data.insert(at, rng.next_u64() as u8),
                }
            }
            check_legacy(&data);
        }
    }
}
