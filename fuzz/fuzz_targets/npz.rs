//! `read_npz` on arbitrary bytes: it must not panic, never inflate past its budget, and every
//! member it returns must keep the decoder's promises (data in range, sizes = shape x itemsize).
#![no_main]

use libfuzzer_sys::fuzz_target;
use ortckpt_core::{read_npz, NpzData};

/// Small, so the fuzzer finds the over-budget paths as well as the accepted ones.
const BUDGET: u64 = 1 << 20;

fuzz_target!(|data: &[u8]| {
    let Ok(members) = read_npz(data, BUDGET) else { return };
    let mut inflated = 0u64;
    for member in &members {
        let header = &member.header;
        let end = (header.header_len as u64).checked_add(header.data_len).expect("member size overflows");
        match &member.data {
            NpzData::InPlace { offset } => {
                let stop = offset.checked_add(header.data_len).expect("data range overflows");
                assert!(stop <= data.len() as u64, "stored member {:?} runs past the input", member.key);
            }
            NpzData::Inflated(bytes) => {
                assert_eq!(bytes.len() as u64, end, "inflated member {:?} has the wrong size", member.key);
                inflated += end;
            }
        }
    }
    assert!(inflated <= BUDGET, "inflated {inflated} bytes with a budget of {BUDGET}");
    let mut keys: Vec<&str> = members.iter().map(|m| m.key.as_str()).collect();
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(keys.len(), members.len(), "a member name was returned twice");
});
