//! What a file is, told from its first bytes, so that a reader handed a file of another kind says
//! what the file is and what reads it ("it is an ONNX model; make a checkpoint of its initializers
//! with ortckpt.save_from_onnx ..."), instead of reporting bytes.
//!
//! The one place these rules live: the checkpoint, adapter, npz and safetensors readers consult
//! [`sniff`] only after their own format check has failed (so a rule here can never refuse a file
//! a reader accepts), and the Python binding uses [`expect_kind`] before handing a file to onnx.
//! A file no rule recognizes keeps the reader's own message.

use std::fmt;

/// How many leading bytes [`sniff`] looks at: a zip local file header (30 bytes) and the start
/// of its first member's name.
pub const SNIFF_LEN: usize = 30 + 226;

/// A kind of file [`sniff`] recognizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FileKind {
    /// An ORT training checkpoint (flatbuffer identifier `ODTC`).
    Checkpoint,
    /// An ORT Multi-LoRA adapter file (flatbuffer identifier `TORT`).
    Adapter,
    /// An ORT format inference model (`.ort`, flatbuffer identifier `ORTM`).
    OrtModel,
    /// An ONNX model (a protobuf `ModelProto`).
    Onnx,
    /// A safetensors file.
    Safetensors,
    /// A numpy `.npz` archive (a zip of `.npy` members).
    Npz,
    /// A single numpy `.npy` array.
    Npy,
    /// A PyTorch file in `torch.save`'s zip format (`.pt`, `.pth`, `.bin`).
    Torch,
    /// A Python pickle (PyTorch files from before torch 1.6 are pickles).
    Pickle,
    /// A zip archive of another kind.
    Zip,
    /// A gzip-compressed file.
    Gzip,
}

impl FileKind {
    /// A stable lowercase name (`"onnx"`, `"checkpoint"`), for bindings and JSON output.
    pub fn name(self) -> &'static str {
        match self {
            FileKind::Checkpoint => "checkpoint",
            FileKind::Adapter => "adapter",
            FileKind::OrtModel => "ort-model",
            FileKind::Onnx => "onnx",
            FileKind::Safetensors => "safetensors",
            FileKind::Npz => "npz",
            FileKind::Npy => "npy",
            FileKind::Torch => "torch",
            FileKind::Pickle => "pickle",
            FileKind::Zip => "zip",
            FileKind::Gzip => "gzip",
        }
    }

    /// The kind named `name` ([`FileKind::name`]).
    pub fn from_name(name: &str) -> Option<FileKind> {
        ALL.iter().copied().find(|k| k.name() == name)
    }

    /// What the file is, for a sentence ("an ONNX model").
    pub fn description(self) -> &'static str {
        match self {
            FileKind::Checkpoint => "an ORT training checkpoint",
            FileKind::Adapter => "an ORT adapter file (.onnx_adapter)",
            FileKind::OrtModel => "an ORT format model (.ort)",
            FileKind::Onnx => "an ONNX model",
            FileKind::Safetensors => "a safetensors file",
            FileKind::Npz => "a numpy .npz archive",
            FileKind::Npy => "a numpy .npy array",
            FileKind::Torch => "a PyTorch file (torch.save's zip format)",
            FileKind::Pickle => "a Python pickle (such as a PyTorch file saved before torch 1.6)",
            FileKind::Zip => "a zip archive that is not an .npz (its first member is not a .npy array)",
            FileKind::Gzip => "a gzip-compressed file",
        }
    }

    /// Which function or command reads a file of this kind (or what to do with it).
    pub fn remedy(self) -> &'static str {
        match self {
            FileKind::Checkpoint => {
                "read it with ortckpt.load or `ortckpt inspect` (ortckpt.load_into_model or \
                 `ortckpt to-onnx` put its values into an ONNX model; ortckpt.to_adapter or \
                 `ortckpt export-adapter` make an adapter of it)"
            }
            FileKind::Adapter => "read it with ortckpt.from_adapter or `ortckpt inspect`",
            FileKind::OrtModel => {
                "ortckpt does not read ORT format models: convert the ONNX model it was made from \
                 with ortckpt.save_from_onnx or `ortckpt from-onnx MODEL OUT`"
            }
            FileKind::Onnx => {
                "make a checkpoint of its initializers with ortckpt.save_from_onnx or \
                 `ortckpt from-onnx MODEL OUT`"
            }
            FileKind::Safetensors => {
                "read it with ortckpt.from_safetensors or `ortckpt convert IN.safetensors OUT.ckpt`"
            }
            FileKind::Npz => "read it with ortckpt.from_npz or `ortckpt convert IN.npz OUT.ckpt`",
            FileKind::Npy => "load it with numpy.load and build a state with ortckpt.from_state_dict",
            FileKind::Torch => {
                "ortckpt does not read it: load it with torch.load(path, weights_only=True) and \
                 build a state with ortckpt.from_state_dict"
            }
            FileKind::Pickle => {
                "ortckpt never unpickles (loading a pickle runs code from the file): load it where \
                 you trust it and build a state with ortckpt.from_state_dict"
            }
            FileKind::Zip => "ortckpt reads zip archives only as .npz files (ortckpt.from_npz)",
            FileKind::Gzip => "decompress it first (gunzip)",
        }
    }
}

impl fmt::Display for FileKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.description())
    }
}

const ALL: [FileKind; 11] = [
    FileKind::Checkpoint,
    FileKind::Adapter,
    FileKind::OrtModel,
    FileKind::Onnx,
    FileKind::Safetensors,
    FileKind::Npz,
    FileKind::Npy,
    FileKind::Torch,
    FileKind::Pickle,
    FileKind::Zip,
    FileKind::Gzip,
];

/// The sentence a reader expecting `expected` gives for a file that is `found`.
pub fn wrong_kind_message(expected: FileKind, found: FileKind) -> String {
    format!("not {}: it is {}; {}", expected.description(), found.description(), found.remedy())
}

/// What the file whose first bytes are `head` (at most [`SNIFF_LEN`] are looked at) and whose
/// length is `len` is, when a rule recognizes it.
pub fn sniff(head: &[u8], len: u64) -> Option<FileKind> {
    let head = &head[..head.len().min(SNIFF_LEN)];
    flatbuffer(head)
        .or_else(|| zip(head))
        .or_else(|| magic(head))
        .or_else(|| safetensors(head, len))
        .or_else(|| onnx(head))
}

/// ORT's flatbuffer files, told apart by the identifier at bytes 4..8.
fn flatbuffer(head: &[u8]) -> Option<FileKind> {
    match head.get(4..8)? {
        b"ODTC" => Some(FileKind::Checkpoint),
        b"TORT" => Some(FileKind::Adapter),
        b"ORTM" => Some(FileKind::OrtModel),
        _ => None,
    }
}

/// A zip archive, told apart by its first member's name (in the first local file header): numpy
/// names every member `<key>.npy`; `torch.save` writes `<archive>/data.pkl` first.
fn zip(head: &[u8]) -> Option<FileKind> {
    if head.starts_with(b"PK\x05\x06") {
        return Some(FileKind::Zip); // an empty archive: its end record only
    }
    if !head.starts_with(b"PK\x03\x04") {
        return None;
    }
    let name_len = usize::from(u16::from_le_bytes([*head.get(26)?, *head.get(27)?]));
    let Some(name) = head.get(30..30 + name_len) else {
        return Some(FileKind::Zip); // a name longer than the bytes looked at
    };
    Some(if name.ends_with(b".npy") {
        FileKind::Npz
    } else if name == b"data.pkl" || name.ends_with(b"/data.pkl") {
        FileKind::Torch
    } else {
        FileKind::Zip
    })
}

/// Formats with a fixed leading signature.
fn magic(head: &[u8]) -> Option<FileKind> {
    if head.starts_with(b"\x93NUMPY") {
        Some(FileKind::Npy)
    } else if head.starts_with(b"\x1f\x8b\x08") {
        Some(FileKind::Gzip)
    } else if head.len() >= 2 && head[0] == 0x80 && (2..=5).contains(&head[1]) {
        Some(FileKind::Pickle) // the PROTO opcode of pickle protocols 2 to 5
    } else {
        None
    }
}

/// A header length (8 bytes, little-endian) that fits the file, then a JSON object.
fn safetensors(head: &[u8], len: u64) -> Option<FileKind> {
    let size = u64::from_le_bytes(head.get(..8)?.try_into().ok()?);
    let fits = size >= 2 && size <= len.saturating_sub(8);
    (fits && head.get(8) == Some(&b'{')).then_some(FileKind::Safetensors)
}

/// A protobuf `ModelProto` as every ONNX writer serializes it (fields in number order): field 1
/// (`ir_version`, a varint) first, with a small value, then the tag of another `ModelProto` field.
fn onnx(head: &[u8]) -> Option<FileKind> {
    let [0x08, ir_version, next, ..] = *head else { return None };
    if !(1..=0x3f).contains(&ir_version) {
        return None;
    }
    // producer_name, producer_version, domain (2-4), model_version (5, varint), doc_string,
    // graph, opset_import (6-8), metadata_props (14); training_info (20), functions (25) and
    // configuration (26) take two-byte tags.
    let one_byte = matches!(next, 0x12 | 0x1a | 0x22 | 0x28 | 0x32 | 0x3a | 0x42 | 0x72);
    let two_bytes = matches!((next, head.get(3)), (0xa2 | 0xca | 0xd2, Some(0x01)));
    (one_byte || two_bytes).then_some(FileKind::Onnx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind_check::expect_kind;
    use crate::Error;

    fn zip_header(name: &[u8]) -> Vec<u8> {
        let mut h = b"PK\x03\x04".to_vec();
        h.resize(26, 0);
        h.extend_from_slice(&(name.len() as u16).to_le_bytes());
        h.extend_from_slice(&[0, 0]);
        h.extend_from_slice(name);
        h
    }

    #[test]
    fn recognizes_each_kind() {
        let mut st = 12u64.to_le_bytes().to_vec();
        st.extend_from_slice(b"{\"a\":1}     ");
        let cases: &[(&[u8], FileKind)] = &[
            (b"\x10\0\0\0ODTC", FileKind::Checkpoint),
            (b"\x10\0\0\0TORT", FileKind::Adapter),
            (b"\x10\0\0\0ORTM", FileKind::OrtModel),
            (b"\x08\x07\x12\x07pytorch", FileKind::Onnx),
            (b"\x08\x0a\x3a\x05", FileKind::Onnx),
            (b"\x08\x08\xa2\x01\x02", FileKind::Onnx),
            (&st, FileKind::Safetensors),
            (&zip_header(b"fc1.weight.npy"), FileKind::Npz),
            (&zip_header(b"archive/data.pkl"), FileKind::Torch),
            (&zip_header(b"notes.txt"), FileKind::Zip),
            (b"PK\x05\x06\0\0\0\0", FileKind::Zip),
            (b"\x93NUMPY\x01\x00", FileKind::Npy),
            (b"\x80\x02\x8a\x0al\xfc\x9cF", FileKind::Pickle),
            (b"\x1f\x8b\x08\x00", FileKind::Gzip),
        ];
        for (head, kind) in cases {
            assert_eq!(sniff(head, head.len() as u64), Some(*kind), "{head:02x?}");
            assert_eq!(FileKind::from_name(kind.name()), Some(*kind));
        }
    }

    #[test]
    fn leaves_other_bytes_alone() {
        for head in [&b""[..], b"\0\0\0\0\0\0\0\0", b"hello world", b"\x08\x00\x12", b"\x08\x07\x99"] {
            assert_eq!(sniff(head, head.len() as u64), None, "{head:02x?}");
        }
        // a safetensors-like length that runs past the end of the file
        let mut st = 100u64.to_le_bytes().to_vec();
        st.extend_from_slice(b"{}");
        assert_eq!(sniff(&st, st.len() as u64), None);
        // a zip whose first name is longer than the bytes looked at
        assert_eq!(sniff(&zip_header(&[b'a'; 300]), 400), Some(FileKind::Zip));
    }

    /// Each reader, handed a file of another kind, names it (and keeps its own message for bytes
    /// no rule recognizes).
    #[test]
    fn every_reader_names_a_file_of_another_kind() {
        let onnx = b"\x08\x07\x12\x07pytorch\x1a\x032.1:\x00";
        let checkpoint = b"\x10\x00\x00\x00ODTC\x00\x00\x00\x00\x00\x00\x00\x00";
        let wrong = |e: Error| match e {
            Error::WrongKind { expected, found } => (expected, found),
            other => panic!("{other}"),
        };
        assert_eq!(wrong(crate::index_checkpoint(onnx).unwrap_err()), (FileKind::Checkpoint, FileKind::Onnx));
        assert_eq!(
            wrong(crate::index_adapter(checkpoint).unwrap_err()),
            (FileKind::Adapter, FileKind::Checkpoint)
        );
        let npz = crate::read_npz(checkpoint, 1 << 20).unwrap_err();
        assert_eq!(npz.to_string(), wrong_kind_message(FileKind::Npz, FileKind::Checkpoint));
        assert_eq!(npz.kind(), crate::ErrorKind::Conversion);
        #[cfg(feature = "fs")]
        {
            let st = crate::read_safetensors(onnx).unwrap_err();
            assert!(
                matches!(&st, crate::Error::Safetensors(e) if e.kind == crate::SafetensorsErrorKind::OtherFormat),
                "{st:?}"
            );
            assert_eq!(st.to_string(), wrong_kind_message(FileKind::Safetensors, FileKind::Onnx));
        }
        let unknown = [0x55u8; 32];
        assert!(matches!(crate::index_checkpoint(&unknown), Err(Error::WrongIdentifier { .. })));
        assert!(matches!(crate::index_adapter(&unknown), Err(Error::NotAnAdapter { .. })));
    }

    #[test]
    fn every_kind_says_what_reads_it() {
        for kind in ALL {
            let message = wrong_kind_message(FileKind::Checkpoint, kind);
            assert!(message.starts_with("not an ORT training checkpoint: it is "), "{message}");
            assert!(!kind.remedy().is_empty());
        }
        let e = expect_kind(b"\x08\x07\x12\x07pytorch", 11, FileKind::Checkpoint).unwrap_err();
        assert!(e.to_string().contains("ortckpt from-onnx"), "{e}");
        assert!(expect_kind(b"\x08\x07\x12\x07pytorch", 11, FileKind::Onnx).is_ok());
        assert!(expect_kind(b"unknown", 7, FileKind::Onnx).is_ok());
    }
}
