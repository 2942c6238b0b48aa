//! The ORT 1.15 checkpoint-folder decoder on arbitrary `.pbseq` bytes, in every role a file can
//! have: no panic, and whatever it accepts keeps the index's promises and converts to a checkpoint.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ortckpt_fuzz::legacy::check_legacy(data));
