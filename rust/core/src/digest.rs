//! Content digests (BLAKE3, 256 bits) of the files a save creates: computed while the bytes are written,
//! recorded in the journal, and checked again before recovery renames a file into place, so only
//! the very bytes the save wrote can ever replace a checkpoint — whatever file identities, names
//! or journal text a copy, a restore or another user produced.

use std::fs::File;
use std::io::{self, IoSlice, Write};
use std::os::unix::fs::FileExt;

/// A file's length and BLAKE3 hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Digest {
    /// Length in bytes.
    pub len: u64,
    /// BLAKE3 (256-bit) hash of the bytes.
    pub hash: [u8; 32],
}

impl Digest {
    /// The hash as 64 lowercase hex digits.
    pub fn hex(&self) -> String {
        self.hash.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Parses 64 hex digits (the journal's form); `None` for anything else.
    pub fn from_hex(len: u64, text: &str) -> Option<Digest> {
        if text.len() != 64 {
            return None;
        }
        let mut hash = [0u8; 32];
        for (i, byte) in hash.iter_mut().enumerate() {
            *byte = u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        Some(Digest { len, hash })
    }
}

/// The hash of `bytes` as 64 hex digits (the journal's own checksum, helper-name prefixes).
pub fn hash_hex(bytes: &[u8]) -> String {
    blake3::hash(bytes).as_bytes().iter().map(|b| format!("{b:02x}")).collect()
}

/// A writer that hashes exactly the bytes its inner writer accepted.
pub struct HashingWriter<'a, W: Write> {
    inner: &'a mut W,
    hasher: blake3::Hasher,
    len: u64,
}

impl<'a, W: Write> HashingWriter<'a, W> {
    /// Hashes what is written to `inner` from now on.
    pub fn new(inner: &'a mut W) -> Self {
        HashingWriter { inner, hasher: blake3::Hasher::new(), len: 0 }
    }

    /// The digest of everything written.
    pub fn finish(self) -> Digest {
        Digest { len: self.len, hash: *self.hasher.finalize().as_bytes() }
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
    let mut hasher = blake3::Hasher::new();
    let mut offset = 0u64;
    loop {
        if offset.is_multiple_of(8 * CHUNK as u64) && !keep_going() {
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
    Ok(Digest { len: offset, hash: *hasher.finalize().as_bytes() })
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
        assert_eq!(hash_hex(b"hello world"), written.hex());
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
