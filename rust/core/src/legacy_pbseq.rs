//! ORT 1.15's checkpoint folders: which file holds what, and the framing of its `.pbseq` files.
//!
//! A folder holds `paramtrain*` (trainable parameters), `paramfrozen*` (frozen parameters),
//! `optim_<group>_<momentum>_tensors.pbseq` (one momentum of every parameter of a group),
//! `optim_<group>_properties.pbseq` (the group's step and learning rate) and `custom*` (user
//! properties) files; [`classify_legacy_file`] applies these rules.
//!
//! A `.pbseq` file is a count followed by that many length-prefixed protobuf messages (ORT's
//! `WriteProtoMessageSequence`): `varint(count)`, then for each message `varint(size)` and `size`
//! bytes. ORT reads both numbers with protobuf's `ReadVarintSizeAsInt`, so each is at most
//! `i32::MAX`. This module only finds the messages; decoding them (`onnx.TensorProto`) is left to
//! the caller. See docs/format.md, "The ORT 1.15 checkpoint folder".

use std::ops::Range;

use crate::{Error, Result};

/// The largest message count or message size ORT's reader accepts (`ReadVarintSizeAsInt`).
pub const MAX_PBSEQ_MESSAGE_BYTES: u64 = i32::MAX as u64;

/// The group property holding the optimizer's initial learning rate (a float).
pub const LEGACY_LR_PROPERTY: &str = "builtin.initial_learning_rate";
/// The group property holding the optimizer's step count (an int64).
pub const LEGACY_STEP_PROPERTY: &str = "builtin.step";

/// What a file of an ORT 1.15 checkpoint folder holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LegacyFile {
    /// Trainable parameters (a name starting with `paramtrain`).
    Trainable,
    /// Frozen parameters (`paramfrozen...`).
    Frozen,
    /// Momentum `momentum` of every parameter of optimizer group `group`, each tensor named after
    /// its parameter (`optim_<group>_<momentum>_tensors.pbseq`).
    Momentum {
        /// The optimizer group's name.
        group: String,
        /// The momentum's name (e.g. `momentum0`).
        momentum: String,
    },
    /// The step and initial learning rate of optimizer group `group`
    /// (`optim_<group>_properties.pbseq`).
    GroupProperties {
        /// The optimizer group's name.
        group: String,
    },
    /// User properties (`custom...`).
    CustomProperties,
}

/// Classifies a directory entry of an ORT 1.15 checkpoint folder by its name, as ORT 1.15 does:
/// hidden entries and names with none of the prefixes are not part of the checkpoint (`None`).
/// ORT matches `paramtrain`, `paramfrozen` and `custom` as prefixes. It splits `optim` names on
/// `_`, so group and momentum names cannot contain `_`; any other `optim` name is an error
/// ([`Error::BadLegacyFileName`]), as in ORT ("Unexpected file extension"). Subdirectories are
/// skipped by the caller.
pub fn classify_legacy_file(name: &str) -> Result<Option<LegacyFile>> {
    if name.starts_with('.') {
        return Ok(None);
    }
    if name.starts_with("paramtrain") {
        return Ok(Some(LegacyFile::Trainable));
    }
    if name.starts_with("paramfrozen") {
        return Ok(Some(LegacyFile::Frozen));
    }
    if name.starts_with("custom") {
        return Ok(Some(LegacyFile::CustomProperties));
    }
    if !name.starts_with("optim") {
        return Ok(None);
    }
    let part = |s: &str| !s.is_empty() && !s.contains('_');
    let middle = name.strip_prefix("optim_");
    if let Some(m) = middle.and_then(|m| m.strip_suffix("_tensors.pbseq")) {
        if let Some((group, momentum)) = m.split_once('_') {
            if part(group) && part(momentum) {
                return Ok(Some(LegacyFile::Momentum {
                    group: group.to_owned(),
                    momentum: momentum.to_owned(),
                }));
            }
        }
    } else if let Some(group) = middle.and_then(|m| m.strip_suffix("_properties.pbseq")) {
        if part(group) {
            return Ok(Some(LegacyFile::GroupProperties { group: group.to_owned() }));
        }
    }
    Err(Error::BadLegacyFileName { name: name.to_owned() })
}

/// A protobuf varint is at most 10 bytes long.
const MAX_VARINT_BYTES: usize = 10;

/// The byte range of every message of a `.pbseq` file, in file order.
///
/// Every number is checked as it is read: a count or size above `i32::MAX`, a varint that runs
/// past the end or is longer than 10 bytes, a message that runs past the end, a count larger
/// than the bytes that follow could hold, and bytes after the last message are all errors
/// ([`Error::BadMessageSequence`]). Nothing is allocated beyond one range per message present.
pub fn pbseq_messages(data: &[u8]) -> Result<Vec<Range<usize>>> {
    let mut pos = 0usize;
    let count = read_size(data, &mut pos, "message count")?;
    // Each message needs at least one byte (its size), so the count cannot exceed what is left.
    let remaining = data.len() - pos;
    if count > remaining as u64 {
        return Err(bad(0, format!("declares {count} messages but only {remaining} bytes follow the count")));
    }
    // `count <= remaining`, so this capacity is bounded by the input's size.
    let mut out = Vec::with_capacity(count as usize);
    for i in 0..count {
        let start = pos;
        let size = read_size(data, &mut pos, "message size")?;
        let left = data.len() - pos;
        if size > left as u64 {
            return Err(bad(
                start as u64,
                format!(
                    "message {i} of {count} needs {size} bytes but only {left} are left (truncated file?)"
                ),
            ));
        }
        // `size <= left`, so it fits in usize and `pos + size <= data.len()`.
        let end = pos + size as usize;
        out.push(pos..end);
        pos = end;
    }
    if pos != data.len() {
        return Err(bad(
            pos as u64,
            format!("{} bytes follow the last of the {count} messages", data.len() - pos),
        ));
    }
    Ok(out)
}

/// Reads one varint at `*pos` that must be a size ORT accepts (0..=i32::MAX).
fn read_size(data: &[u8], pos: &mut usize, what: &str) -> Result<u64> {
    let start = *pos;
    let mut value: u64 = 0;
    for i in 0..MAX_VARINT_BYTES {
        let Some(&byte) = data.get(start + i) else {
            return Err(bad(start as u64, format!("the file ends inside the {what}")));
        };
        let bits = u64::from(byte & 0x7f);
        let shift = 7 * i as u32;
        // Bits that would land above bit 63 make the value too large anyway.
        if shift >= 64 || (shift > 0 && bits > (u64::MAX >> shift)) {
            return Err(bad(start as u64, format!("the {what} does not fit in 64 bits")));
        }
        value |= bits << shift;
        if byte & 0x80 == 0 {
            *pos = start + i + 1;
            if value > MAX_PBSEQ_MESSAGE_BYTES {
                return Err(bad(
                    start as u64,
                    format!("the {what} {value} is larger than ORT allows ({MAX_PBSEQ_MESSAGE_BYTES})"),
                ));
            }
            return Ok(value);
        }
    }
    Err(bad(start as u64, format!("the {what} is a varint longer than {MAX_VARINT_BYTES} bytes")))
}

fn bad(offset: u64, detail: String) -> Error {
    Error::BadMessageSequence { offset, detail }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn varint(mut v: u64, out: &mut Vec<u8>) {
        loop {
            let byte = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }

    fn sequence(messages: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        varint(messages.len() as u64, &mut out);
        for m in messages {
            varint(m.len() as u64, &mut out);
            out.extend_from_slice(m);
        }
        out
    }

    fn detail(data: &[u8]) -> String {
        match pbseq_messages(data) {
            Err(Error::BadMessageSequence { detail, .. }) => detail,
            other => panic!("expected BadMessageSequence, got {other:?}"),
        }
    }

    #[test]
    fn finds_every_message() {
        let long = vec![7u8; 300]; // a two-byte size varint
        let data = sequence(&[b"abc", b"", &long]);
        let ranges = pbseq_messages(&data).unwrap();
        assert_eq!(ranges.len(), 3);
        assert_eq!(&data[ranges[0].clone()], b"abc");
        assert!(ranges[1].is_empty());
        assert_eq!(&data[ranges[2].clone()], &long[..]);
        assert_eq!(pbseq_messages(&[0]).unwrap(), vec![]);
    }

    #[test]
    fn refuses_malformed_framing() {
        assert!(detail(&[]).contains("ends inside the message count"));
        assert!(detail(&[0x80]).contains("ends inside the message count"));
        assert!(detail(&[5, 0]).contains("declares 5 messages"));
        assert!(detail(&[1, 4, b'a']).contains("needs 4 bytes"));
        assert!(detail(&[1, 0x81]).contains("ends inside the message size"));
        assert!(detail(&[1, 1, b'a', b'z']).contains("1 bytes follow the last"));
        assert!(detail(&[0, 0]).contains("follow the last"));
        // i32::MAX + 1 as a count, and as a size
        let mut huge = Vec::new();
        varint(MAX_PBSEQ_MESSAGE_BYTES + 1, &mut huge);
        assert!(detail(&huge).contains("larger than ORT allows"));
        let mut huge_size = vec![1];
        varint(u64::MAX, &mut huge_size);
        assert!(detail(&huge_size).contains("larger than ORT allows"));
        // eleven continuation bytes
        assert!(detail(&[0x80; 11]).contains("longer than 10 bytes"));
        // a tenth byte carrying more than bit 63
        let mut wide = vec![0xff; 9];
        wide.push(0x02);
        assert!(detail(&wide).contains("does not fit in 64 bits"));
    }

    #[test]
    fn arbitrary_bytes_give_ranges_inside_the_input_or_an_error() {
        // a small deterministic generator: no dependency, same inputs on every run
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..20_000 {
            let len = (next() % 40) as usize;
            let data: Vec<u8> = (0..len).map(|_| (next() % 7) as u8 * 41).collect();
            if let Ok(ranges) = pbseq_messages(&data) {
                let mut pos = 0;
                for r in &ranges {
                    assert!(r.start >= pos && r.end <= data.len());
                    pos = r.end;
                }
                // no trailing bytes are accepted
                if let Some(last) = ranges.last() {
                    assert_eq!(last.end, data.len());
                }
            }
        }
    }

    #[test]
    fn classifies_file_names_as_ort_does() {
        use LegacyFile::*;
        let ok = |n: &str| classify_legacy_file(n).unwrap();
        assert_eq!(ok("paramtrain_tensors.pbseq"), Some(Trainable));
        assert_eq!(ok("paramtrain_other.bin"), Some(Trainable)); // a prefix, as in ORT
        assert_eq!(ok("paramfrozen_tensors.pbseq"), Some(Frozen));
        assert_eq!(ok("custom_properties.pbseq"), Some(CustomProperties));
        assert_eq!(
            ok("optim_group0_momentum1_tensors.pbseq"),
            Some(Momentum { group: "group0".into(), momentum: "momentum1".into() })
        );
        assert_eq!(ok("optim_group0_properties.pbseq"), Some(GroupProperties { group: "group0".into() }));
        assert_eq!(ok(".paramtrain_tensors.pbseq"), None);
        assert_eq!(ok("README.md"), None);
        for bad in [
            "optim_x.pbseq",
            "optim_a_b_c_tensors.pbseq",
            "optim__m_tensors.pbseq",
            "optim_g_x_properties.pbseq",
            "optimizer_group0_properties.pbseq",
            "optim_g_m_tensors.pbseq.bak",
        ] {
            assert!(matches!(classify_legacy_file(bad), Err(Error::BadLegacyFileName { .. })), "{bad}");
        }
    }

    #[test]
    fn errors_report_the_offset() {
        match pbseq_messages(&[2, 1, b'a', 9, b'b']) {
            Err(Error::BadMessageSequence { offset, .. }) => assert_eq!(offset, 3),
            other => panic!("{other:?}"),
        }
    }
}
