//! `index_checkpoint` on arbitrary bytes: it must not panic, the index must keep its promises,
//! and whatever it accepts must write back and read back with the same contents.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ortckpt_fuzz::check_bytes(data));
