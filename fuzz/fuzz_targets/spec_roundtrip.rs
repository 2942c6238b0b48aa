//! `serialize_checkpoint` on arbitrary specs: it must not panic, must accept exactly the valid
//! specs, and what it writes must read back with the same contents.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ortckpt_fuzz::gen::FuzzSpec;

fuzz_target!(|input: FuzzSpec| {
    let owned = input.build();
    ortckpt_fuzz::check_spec(&owned.spec());
});
