//! The ORT 1.15 checkpoint-folder decoder on arbitrary bytes ([`check_legacy`]): one fuzzed
//! `.pbseq` file read in every role a folder gives files (parameters, momentums with their
//! group's properties, user properties). It must not panic, must stay within its memory budget
//! (the fuzzer's RSS limit), and whatever it accepts must keep the index's promises and convert
//! to a flatbuffer checkpoint that reads back with the same contents (what `ortckpt convert
//! folder/ out.ckpt` does).

use std::io::Read;
use std::path::Path;

use ortckpt_core::test_support::spec_from_index;
use ortckpt_core::{
    read_legacy_files, serialize_checkpoint, LegacyCheckpoint, LegacyInput, OpenLegacyFile, WRITTEN_VERSION,
};

use crate::{check_index_invariants, check_written};

/// A group property file ORT 1.15 wrote (tests/data/ort115/adamw_trained): step and learning rate.
const GROUP_PROPERTIES: &[u8] =
    include_bytes!("../../tests/data/ort115/adamw_trained/optim_group0_properties.pbseq");

/// The folders `data` is read in: (file name, bytes) lists.
fn arrangements(data: &[u8]) -> Vec<Vec<(&'static str, &[u8])>> {
    vec![
        vec![("paramtrain_tensors.pbseq", data)],
        vec![("paramtrain_tensors.pbseq", data), ("paramfrozen_tensors.pbseq", data)],
        vec![
            ("optim_group0_momentum0_tensors.pbseq", data),
            ("optim_group0_properties.pbseq", GROUP_PROPERTIES),
        ],
        vec![("optim_group0_momentum0_tensors.pbseq", data), ("optim_group0_properties.pbseq", data)],
        vec![("custom_properties.pbseq", data)],
    ]
}

/// Reads the files `files` as a folder.
pub fn read(files: &[(&str, &[u8])]) -> ortckpt_core::Result<Option<LegacyCheckpoint>> {
    let inputs = files
        .iter()
        .map(|&(name, bytes)| {
            let len = bytes.len() as u64;
            let open: OpenLegacyFile<'_> = Box::new(move || Ok((Box::new(bytes) as Box<dyn Read>, len)));
            LegacyInput { name: name.to_owned(), len, open: Some(open) }
        })
        .collect();
    read_legacy_files(inputs, Path::new("fuzz"), &mut || true)
}

/// Panics unless the folder `files` reads without panicking and what it accepts round-trips.
pub fn check_folder(files: &[(&str, &[u8])]) {
    let read = match read(files) {
        Ok(Some(read)) => read,
        Ok(None) => panic!("a folder with checkpoint files read as no checkpoint"),
        Err(e) => {
            // Messages and kinds of errors from untrusted input must not panic either.
            let _ = (e.to_string(), e.kind(), e.tensor());
            return;
        }
    };
    assert_eq!(read.index.version, 0, "a folder's index has version 0");
    assert!(!read.index.is_nominal && !read.index.has_external_data);
    // The promises of a flatbuffer checkpoint's index hold too (they are checked for versions 1
    // and 2; the folder's 0 says where it came from).
    let mut index = read.index.clone();
    index.version = WRITTEN_VERSION;
    check_index_invariants(&index, &read.values);
    let mut spec =
        spec_from_index(&index, &read.values, &|_, _| unreachable!("a folder has no external data"));
    spec.version = WRITTEN_VERSION;
    let written = match serialize_checkpoint(&spec) {
        Ok(bytes) => bytes,
        Err(e) => panic!("a folder read but cannot be written as a checkpoint: {e}"),
    };
    check_written(&spec, &written);
}

/// The fuzz target: `data` as every file of a folder.
pub fn check_legacy(data: &[u8]) {
    for files in arrangements(data) {
        check_folder(&files);
    }
}
