//! Why a safetensors file cannot be read.

use std::fmt;

/// What kind of problem a [`SafetensorsError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SafetensorsErrorKind {
    /// The file breaks the format.
    Malformed,
    /// A valid file holding a dtype ONNX Runtime checkpoints cannot hold.
    UnsupportedDtype,
    /// A file of another kind (an ONNX model, a checkpoint, ...): `detail` says what it is and
    /// what reads it.
    OtherFormat,
}

/// Why a safetensors file cannot be read; `tensor` names the entry at fault, if one is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SafetensorsError {
    /// What kind of problem it is.
    pub kind: SafetensorsErrorKind,
    /// The tensor whose entry is at fault, if one is.
    pub tensor: Option<String>,
    /// What is wrong, as a sentence fragment.
    pub detail: String,
}

impl SafetensorsError {
    pub(super) fn malformed(tensor: Option<String>, detail: impl Into<String>) -> SafetensorsError {
        SafetensorsError { kind: SafetensorsErrorKind::Malformed, tensor, detail: detail.into() }
    }
}

impl fmt::Display for SafetensorsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.kind == SafetensorsErrorKind::Malformed {
            f.write_str("not a valid safetensors file: ")?;
        }
        match &self.tensor {
            Some(t) => write!(f, "tensor {t:?}: {}", self.detail),
            None => f.write_str(&self.detail),
        }
    }
}

impl std::error::Error for SafetensorsError {}
