//! Content digests (SHA-256) of the files a save creates: computed while the bytes are written,
//! recorded in the journal, and checked again before recovery renames a file into place, so only
//! the very bytes the save wrote can ever replace a checkpoint — whatever file identities, names
//! or journal text a copy, a restore or another user produced.

use std::fs::File;
use std::io::{self, IoSlice, Write};
use std::os::unix::fs::FileExt;

use sha2::{Digest as _, Sha256};

/// A file's length and SHA-256.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Digest {
    /// Length in bytes.
    pub len: u64,
    /// SHA-256 of the bytes.
    pub sha256: [u8; 32],
}

impl Digest {
    /// The SHA-256 as 64 lowercase hex digits.
    pub fn hex(&self) -> String {
        self.sha256.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Parses 64 hex digits (the journal's form); `None` for anything else.
    pub fn from_hex(len: u64, text: &str) -> Option<Digest> {
        if text.len() != 64 {
            return None;
        }
        let mut sha256 = [0u8; 32];
        for (i, byte) in sha256.iter_mut().enumerate() {
            *byte = u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        Some(Digest { len, sha256 })
    }
}

/// SHA-256 of `bytes` (the journal's own checksum).
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// A writer that hashes exactly the bytes its inner writer accepted.
pub struct HashingWriter<'a, W: Write> {
    inner: &'a mut W,
    hasher: Sha256,
    len: u64,
}

impl<'a, W: Write> HashingWriter<'a, W> {
    /// Hashes what is written to `inner` from now on.
    pub fn new(inner: &'a mut W) -> Self {
        HashingWriter { inner, hasher: Sha256::new(), len: 0 }
    }

    /// The digest of everything written.
    pub fn finish(self) -> Digest {
        Digest { len: self.len, sha256: self.hasher.finalize().into() }
    }
}

impl<W: Write> Write for HashingWriter<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        let done = buf.get(..n).ok_or_else(|| io::Error::other("writer reported more bytes than given"))?;
        self.hasher.update(done);
        self.len += n as u64;
        Ok(n)
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let n = self.inner.write_vectored(bufs)?;
        let mut left = n;
        for buf in bufs {
            let take = left.min(buf.len());
            self.hasher.update(&buf[..take]);
            left -= take;
            if left == 0 {
                break;
            }
        }
        if left != 0 {
            return Err(io::Error::other("writer reported more bytes than given"));
        }
        self.len += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Reads `file` from its start (by offset: its position is not used) and returns its digest;
/// `keep_going` is asked between 8 MiB chunks, and returning false stops with
/// `ErrorKind::Interrupted`.
pub fn digest_file(file: &File, keep_going: &mut dyn FnMut() -> bool) -> io::Result<Digest> {
    const CHUNK: usize = 1 << 20;
    let mut buf = vec![0u8; CHUNK];
    let mut hasher = Sha256::new();
    let mut offset = 0u64;
    loop {
        if offset % (8 * CHUNK as u64) == 0 && !keep_going() {
            return Err(io::ErrorKind::Interrupted.into());
        }
        let n = match file.read_at(&mut buf, offset) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        hasher.update(&buf[..n]);
        offset += n as u64;
    }
    Ok(Digest { len: offset, sha256: hasher.finalize().into() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashing_writer_and_file_digest_agree() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("f");
        let mut file = File::create(&path).unwrap();
        let mut w = HashingWriter::new(&mut file);
        w.write_all(b"hello ").unwrap();
        w.write_all_vectored_compat(&[b"wor", b"ld"]);
        let written = w.finish();
        let file = File::open(&path).unwrap();
        assert_eq!(digest_file(&file, &mut || true).unwrap(), written);
        assert_eq!(written.len, 11);
        assert_eq!(sha256_hex(b"hello world"), written.hex());
        assert_eq!(Digest::from_hex(11, &written.hex()), Some(written));
        assert_eq!(Digest::from_hex(11, "zz"), None);
    }

    impl<W: Write> HashingWriter<'_, W> {
        fn write_all_vectored_compat(&mut self, parts: &[&[u8]]) {
            let slices: Vec<IoSlice<'_>> = parts.iter().map(|p| IoSlice::new(p)).collect();
            let n = self.write_vectored(&slices).unwrap();
            assert_eq!(n, parts.iter().map(|p| p.len()).sum::<usize>());
        }
    }
}
