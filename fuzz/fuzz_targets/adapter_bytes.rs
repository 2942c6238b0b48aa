//! `index_adapter` on arbitrary bytes: it must not panic, whatever it accepts the flatbuffers
//! verifier must accept with the same contents, and it must write back and read back the same.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ortckpt_core::check_adapter_bytes(data));
