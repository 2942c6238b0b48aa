//! `read_safetensors` on arbitrary bytes: it must not panic, and every file it accepts must keep
//! the reader's promises: distinct names, ranks within the cap, and ranges of exactly shape x
//! itemsize bytes that tile the data buffer in order, up to the file's end.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ortckpt_core::{read_safetensors, SAFETENSORS_MAX_RANK};

fuzz_target!(|data: &[u8]| {
    let Ok(file) = read_safetensors(data) else { return };
    assert!(file.data_start >= 8 && file.data_start <= data.len() as u64, "data start out of range");
    let mut at = file.data_start;
    let mut names = std::collections::HashSet::new();
    for tensor in &file.tensors {
        assert!(names.insert(tensor.name.as_str()), "tensor {:?} returned twice", tensor.name);
        assert!(tensor.shape.len() <= SAFETENSORS_MAX_RANK, "tensor {:?} has too many dims", tensor.name);
        let size = tensor
            .shape
            .iter()
            .try_fold(u64::from(tensor.dtype.itemsize), |n, &d| n.checked_mul(d))
            .expect("an accepted shape overflows");
        assert_eq!(size, tensor.len, "tensor {:?}: length is not shape x itemsize", tensor.name);
        assert_eq!(tensor.offset, at, "tensor {:?} does not start where the previous ended", tensor.name);
        at += tensor.len;
    }
    assert_eq!(at, data.len() as u64, "the tensors do not end at the end of the file");
});
