//! What tells one upload from another: the same upload given twice counts once.

/// What tells the same upload given twice.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Identity {
    /// A local file: (device, inode).
    File(u64, u64),
    /// Bytes: the BLAKE3 hash of the checkpoint (and of its external data, when given).
    Content([u8; 32]),
    /// A name the caller vouches for (a URL).
    Named(String),
}

impl Identity {
    /// The identity of an upload given as bytes.
    pub fn of_bytes(checkpoint: &[u8], external: Option<&[u8]>) -> Identity {
        let mut hasher = blake3::Hasher::new();
        hasher.update(&(checkpoint.len() as u64).to_le_bytes());
        hasher.update(checkpoint);
        if let Some(external) = external {
            hasher.update(external);
        }
        Identity::Content(*hasher.finalize().as_bytes())
    }
}
