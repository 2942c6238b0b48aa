//! Bytes that change while they are read: another thread rewrites a shared file mapping of a
//! valid checkpoint (as another process rewriting the file in place would) while this one indexes
//! it thousands of times. Every read gives `Ok` or `Err`: never a panic or an abort, and never an
//! allocation beyond a small multiple of the checkpoint's size.
//!
//! The writer uses its own mapping of the file, so the bytes change under the reader's mapping
//! exactly as they would when another process writes: outside this process's Rust memory model.
//! `ORTCKPT_RACE_ROUNDS` sets the number of reads (default 3000).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use ortckpt_core::test_support::alloc::CountingAllocator;
use ortckpt_core::test_support::raw::{RawCheckpoint, RawGroup, RawTensor};
use ortckpt_core::test_support::Rng;
use ortckpt_core::{index_checkpoint, index_checkpoint_raw, LengthCheck};

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

fn checkpoint() -> Vec<u8> {
    let params: Vec<RawTensor> =
        (0..300).map(|i| RawTensor::floats(&format!("layer{i}.weight"), &[2, 3])).collect();
    let states = (0..100)
        .map(|i| {
            let m = |k: usize| RawTensor {
                doc_string: Some("m".into()),
                ..RawTensor::floats(&format!("momentum{k}"), &[2, 3])
            };
            (Some(format!("layer{i}.weight")), vec![m(0), m(1)])
        })
        .collect();
    RawCheckpoint {
        trainable: params,
        frozen: vec![RawTensor::strings("labels", &["a", "bé", "", "✓✓✓"])],
        groups: vec![RawGroup { name: Some("group0".into()), step: 3, initial_learning_rate: 0.1, states }],
        ints: vec![(Some("epoch".into()), 3)],
        floats: vec![(Some("loss".into()), 0.25)],
        strings: vec![(Some("note".into()), Some("héllo".into()))],
        ..RawCheckpoint::default()
    }
    .build()
}

#[test]
fn indexing_a_mapping_that_changes_underneath() {
    let rounds: usize =
        std::env::var("ORTCKPT_RACE_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(3000);
    let original = checkpoint();
    let expected = index_checkpoint(&original).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("race.ckpt");
    std::fs::write(&path, &original).unwrap();
    let file = std::fs::OpenOptions::new().read(true).write(true).open(&path).unwrap();
    // SAFETY: the file is private to this test; both mappings live until the end of it, and the
    // reader only ever reads its mapping through `index_checkpoint_raw`, which allows changes.
    let mut writer_map = unsafe { memmap2::MmapMut::map_mut(&file) }.unwrap();
    // SAFETY: as above.
    let reader_map = unsafe { memmap2::Mmap::map(&file) }.unwrap();
    let (base, len) = (reader_map.as_ptr(), reader_map.len());

    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let stop = Arc::clone(&stop);
        let original = original.clone();
        std::thread::spawn(move || {
            let mut rng = Rng(0x2545_f491_4f6c_dd1d);
            let mut flips = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // A few changes at a time, spaced out, then the valid bytes again: reads see the
                // valid checkpoint, changed ones, and changes landing in the middle of a read.
                writer_map.copy_from_slice(&original);
                for _ in 0..rng.next_u64() % 4 {
                    for _ in 0..rng.next_u64() % 20_000 {
                        std::hint::spin_loop();
                    }
                    let i = (rng.next_u64() as usize) % writer_map.len();
                    writer_map[i] = match rng.next_u64() % 4 {
                        0 => 0xff,
                        1 => 0,
                        _ => rng.next_u64() as u8,
                    };
                    flips += 1;
                }
            }
            flips
        })
    };

    let before = CountingAllocator::live();
    CountingAllocator::reset_peak();
    let (mut ok, mut err, mut changed) = (0usize, 0usize, 0usize);
    for round in 0..rounds {
        // Both modes: lengths compared while indexing, and on first use (then compared below,
        // while the bytes keep changing, as a mapped checkpoint's first use would).
        let lengths = if round % 2 == 0 { LengthCheck::WhenIndexing } else { LengthCheck::OnFirstUse };
        // SAFETY: the mapping stays alive and readable for the whole call; its bytes may change.
        match unsafe { index_checkpoint_raw(base, len, lengths) } {
            Ok(index) => {
                ok += 1;
                if lengths == LengthCheck::WhenIndexing {
                    changed += usize::from(index != expected);
                }
                for position in 0..index.tensor_count() {
                    // SAFETY: as above.
                    if let Err(e) = unsafe { index.check_inline_length_raw(position, base, len) } {
                        let _ = (e.to_string(), e.kind());
                    }
                }
            }
            Err(e) => {
                err += 1;
                let _ = (e.to_string(), e.kind());
            }
        }
    }
    let peak = CountingAllocator::peak() - before;
    stop.store(true, Ordering::Relaxed);
    let flips = writer.join().unwrap();
    eprintln!(
        "{rounds} reads of {len} bytes during {flips} byte writes: {ok} ok ({changed} with changed values), \
         {err} errors; peak heap {peak} bytes"
    );
    assert_eq!(ok + err, rounds);
    assert!(flips > 0, "the writer never ran");
    // The index of this checkpoint takes a few times its size; garbage must not take more.
    assert!(peak < 16 * len + (1 << 20), "peak heap {peak} bytes for a {len}-byte checkpoint");
}
