//! The framing of a `.pbseq` file, checked while it is read: `varint(count)`, then for each message
//! `varint(size)` and `size` bytes (ORT's `WriteProtoMessageSequence`). ORT reads both numbers with
//! protobuf's `ReadVarintSizeAsInt`, so each is at most `i32::MAX`.
//!
//! The file is never read whole. Every number is checked against what is left of the file (its
//! size when it was opened) before anything is sized by it: a count needs one byte per message, a
//! size needs its bytes, a length-delimited field inside a message needs its bytes in the message.
//! A file that shrinks while it is read ends early (an error), one that grows has bytes after the
//! last message (an error).

use std::io::{self, Read};
use std::path::Path;

use crate::{Error, Result};

/// The largest message count or message size ORT's reader accepts (`ReadVarintSizeAsInt`).
pub const MAX_PBSEQ_MESSAGE_BYTES: u64 = i32::MAX as u64;

/// A protobuf varint is at most 10 bytes long.
const MAX_VARINT_BYTES: u32 = 10;

/// Long reads are split so that an interruption (Ctrl-C) is noticed between chunks.
const CHUNK: usize = 8 << 20;

/// A `.pbseq` file being read front to back.
pub(crate) struct Stream<'a> {
    reader: &'a mut dyn Read,
    path: &'a Path,
    /// Bytes consumed so far.
    pos: u64,
    /// The file's size when it was opened: what every length is checked against.
    len: u64,
    keep_going: &'a mut dyn FnMut() -> bool,
}

/// Where a read stops: the whole file, or the current message (`end` is a file offset).
#[derive(Clone, Copy)]
pub(crate) struct Bound {
    pub(crate) end: u64,
    /// What runs past `end` when a length is too large, e.g. "message 3".
    pub(crate) what: Within,
}

#[derive(Clone, Copy)]
pub(crate) enum Within {
    File,
    Message(u64),
}

impl std::fmt::Display for Within {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Within::File => f.write_str("the file"),
            Within::Message(i) => write!(f, "message {i}"),
        }
    }
}

pub(crate) fn bad(offset: u64, detail: String) -> Error {
    Error::BadMessageSequence { offset, detail }
}

impl<'a> Stream<'a> {
    pub(crate) fn new(
        reader: &'a mut dyn Read,
        len: u64,
        path: &'a Path,
        keep_going: &'a mut dyn FnMut() -> bool,
    ) -> Stream<'a> {
        Stream { reader, path, pos: 0, len, keep_going }
    }

    pub(crate) fn pos(&self) -> u64 {
        self.pos
    }

    pub(crate) fn whole_file(&self) -> Bound {
        Bound { end: self.len, what: Within::File }
    }

    /// Stops when the caller asked to (checked once per message and per chunk of a long read).
    pub(crate) fn check_interrupt(&mut self) -> Result<()> {
        if (self.keep_going)() {
            Ok(())
        } else {
            Err(Error::Interrupted { path: self.path.to_path_buf() })
        }
    }

    fn fill(&mut self, out: &mut [u8], what: &dyn std::fmt::Display) -> Result<()> {
        match self.reader.read_exact(out) {
            Ok(()) => {
                self.pos += out.len() as u64;
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Err(bad(
                self.pos,
                format!("the file ends inside {what} (truncated, or shortened while being read)"),
            )),
            Err(e) => Err(Error::io(self.path, "read", e)),
        }
    }

    fn byte(&mut self, bound: Bound, what: &str) -> Result<u8> {
        if self.pos >= bound.end {
            return Err(bad(self.pos, format!("{} ends inside the {what}", bound.what)));
        }
        let mut b = [0u8; 1];
        self.fill(&mut b, &format_args!("the {what}"))?;
        Ok(b[0])
    }

    /// One protobuf varint inside `bound`.
    pub(crate) fn varint(&mut self, bound: Bound, what: &str) -> Result<u64> {
        let start = self.pos;
        let mut value: u64 = 0;
        for i in 0..MAX_VARINT_BYTES {
            let byte = self.byte(bound, what)?;
            let bits = u64::from(byte & 0x7f);
            let shift = 7 * i;
            // Bits that would land above bit 63 make the value too large anyway.
            if shift > 0 && bits > (u64::MAX >> shift) {
                return Err(bad(start, format!("the {what} does not fit in 64 bits")));
            }
            value |= bits << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(bad(start, format!("the {what} is a varint longer than {MAX_VARINT_BYTES} bytes")))
    }

    /// A count or size as ORT reads it (0..=i32::MAX).
    fn size(&mut self, what: &str) -> Result<u64> {
        let start = self.pos;
        let value = self.varint(self.whole_file(), what)?;
        if value > MAX_PBSEQ_MESSAGE_BYTES {
            return Err(bad(
                start,
                format!("the {what} {value} is larger than ORT allows ({MAX_PBSEQ_MESSAGE_BYTES})"),
            ));
        }
        Ok(value)
    }

    /// The number of messages, checked against the bytes that follow it (each message needs at
    /// least the one byte of its size).
    pub(crate) fn message_count(&mut self) -> Result<u64> {
        let count = self.size("message count")?;
        let left = self.len.saturating_sub(self.pos);
        if count > left {
            return Err(bad(0, format!("declares {count} messages but only {left} bytes follow the count")));
        }
        Ok(count)
    }

    /// The size of message `i` of `count`, checked against the rest of the file; returns the
    /// bound of the message's bytes.
    pub(crate) fn message(&mut self, i: u64, count: u64) -> Result<Bound> {
        self.check_interrupt()?;
        let start = self.pos;
        let size = self.size("message size")?;
        let left = self.len.saturating_sub(self.pos);
        if size > left {
            return Err(bad(
                start,
                format!(
                    "message {i} of {count} needs {size} bytes but only {left} are left (truncated file?)"
                ),
            ));
        }
        Ok(Bound { end: self.pos + size, what: Within::Message(i) })
    }

    /// Fails unless the file ends exactly here (also when it grew while being read).
    pub(crate) fn expect_end(&mut self, count: u64) -> Result<()> {
        let mut probe = [0u8; 1];
        let extra = loop {
            match self.reader.read(&mut probe) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::io(self.path, "read", e)),
            }
        };
        if extra != 0 || self.pos != self.len {
            let follow = self.len.saturating_sub(self.pos).max(1);
            return Err(bad(self.pos, format!("{follow} bytes follow the last of the {count} messages")));
        }
        Ok(())
    }

    /// Checks that `n` more bytes lie inside `bound` (before anything is sized by `n`).
    pub(crate) fn check_len(&self, n: u64, bound: Bound, what: &str) -> Result<()> {
        let left = bound.end.saturating_sub(self.pos);
        if n > left {
            return Err(bad(
                self.pos,
                format!("the {what} needs {n} bytes but {} has {left} left", bound.what),
            ));
        }
        Ok(())
    }

    /// Appends the next `n` bytes (checked to lie inside `bound`) to `out`.
    pub(crate) fn read_into(&mut self, n: u64, bound: Bound, what: &str, out: &mut Vec<u8>) -> Result<()> {
        self.check_len(n, bound, what)?;
        // `n` is at most the file's size, which fits in memory's address space only if the
        // allocation succeeds: a file larger than memory fails here (OutOfMemory, not an abort)
        // as an allocation the file itself justified.
        let mut left = usize::try_from(n).map_err(|_| bad(self.pos, format!("the {what} is too large")))?;
        crate::alloc::reserve(out, left)?;
        while left > 0 {
            let take = left.min(CHUNK);
            let start = out.len();
            out.resize(start + take, 0);
            if let Err(e) = self.fill(&mut out[start..], &format_args!("the {what}")) {
                out.truncate(start);
                return Err(e);
            }
            left -= take;
            if left > 0 {
                self.check_interrupt()?;
            }
        }
        Ok(())
    }

    /// Skips the next `n` bytes (checked to lie inside `bound`).
    pub(crate) fn skip(&mut self, n: u64, bound: Bound, what: &str) -> Result<()> {
        self.check_len(n, bound, what)?;
        let mut sink = [0u8; 4096];
        let mut left = n;
        while left > 0 {
            let take = left.min(sink.len() as u64) as usize;
            self.fill(&mut sink[..take], &format_args!("the {what}"))?;
            left -= take as u64;
        }
        Ok(())
    }

    /// The next `N` bytes (checked to lie inside `bound`).
    pub(crate) fn array<const N: usize>(&mut self, bound: Bound, what: &str) -> Result<[u8; N]> {
        self.check_len(N as u64, bound, what)?;
        let mut out = [0u8; N];
        self.fill(&mut out, &format_args!("the {what}"))?;
        Ok(out)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Appends `v` as a protobuf varint (the decoder's tests build messages with it too).
    pub(crate) fn varint(mut v: u64, out: &mut Vec<u8>) {
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

    /// The (offset, len) of every message, or the error's detail.
    fn frame(data: &[u8]) -> std::result::Result<Vec<(u64, u64)>, String> {
        let mut reader = data;
        let mut go = || true;
        let path = Path::new("x.pbseq");
        let mut s = Stream::new(&mut reader, data.len() as u64, path, &mut go);
        let run = |s: &mut Stream<'_>| -> Result<Vec<(u64, u64)>> {
            let count = s.message_count()?;
            let mut out = Vec::new();
            for i in 0..count {
                let bound = s.message(i, count)?;
                let start = s.pos();
                s.skip(bound.end - start, bound, "message")?;
                out.push((start, bound.end - start));
            }
            s.expect_end(count)?;
            Ok(out)
        };
        run(&mut s).map_err(|e| match e {
            Error::BadMessageSequence { detail, .. } => detail,
            other => panic!("{other:?}"),
        })
    }

    #[test]
    fn finds_every_message() {
        let mut data = vec![3, 3, b'a', b'b', b'c', 0];
        varint(300, &mut data);
        data.extend_from_slice(&[7u8; 300]);
        assert_eq!(frame(&data).unwrap(), vec![(2, 3), (6, 0), (8, 300)]);
        assert_eq!(frame(&[0]).unwrap(), vec![]);
    }

    #[test]
    fn refuses_malformed_framing() {
        let e = |d: &[u8]| frame(d).unwrap_err();
        assert!(e(&[]).contains("ends inside the message count"), "{}", e(&[]));
        assert!(e(&[0x80]).contains("ends inside the message count"));
        assert!(e(&[5, 0]).contains("declares 5 messages"));
        assert!(e(&[1, 4, b'a']).contains("needs 4 bytes"));
        assert!(e(&[1, 0x81]).contains("ends inside the message size"));
        assert!(e(&[1, 1, b'a', b'z']).contains("1 bytes follow the last"));
        assert!(e(&[0, 0]).contains("follow the last"));
        let mut huge = Vec::new();
        varint(MAX_PBSEQ_MESSAGE_BYTES + 1, &mut huge);
        assert!(e(&huge).contains("larger than ORT allows"));
        let mut huge_size = vec![1];
        varint(u64::MAX, &mut huge_size);
        assert!(e(&huge_size).contains("larger than ORT allows"));
        assert!(e(&[0x80; 11]).contains("longer than 10 bytes"));
        let mut wide = vec![0xff; 9];
        wide.push(0x02);
        assert!(e(&wide).contains("does not fit in 64 bits"));
    }

    #[test]
    fn a_file_that_shrinks_or_grows_while_read_is_refused() {
        // declared 6 bytes (fstat), but only 4 can be read: shortened
        let data = [1u8, 4, b'a', b'b'];
        let mut reader = &data[..];
        let mut go = || true;
        let mut s = Stream::new(&mut reader, 6, Path::new("x"), &mut go);
        let count = s.message_count().unwrap();
        let bound = s.message(0, count).unwrap();
        let mut out = Vec::new();
        let err = s.read_into(4, bound, "raw_data", &mut out).unwrap_err();
        assert!(err.to_string().contains("shortened while being read"), "{err}");
        assert!(out.is_empty());
        // declared 3 bytes, 4 present: grew
        let data = [1u8, 1, b'a', b'b'];
        let mut reader = &data[..];
        let mut s = Stream::new(&mut reader, 3, Path::new("x"), &mut go);
        let count = s.message_count().unwrap();
        let bound = s.message(0, count).unwrap();
        s.skip(1, bound, "message").unwrap();
        assert!(s.expect_end(count).unwrap_err().to_string().contains("follow the last"));
    }

    #[test]
    fn an_interruption_stops_the_read() {
        let data = [1u8, 1, b'a'];
        let mut reader = &data[..];
        let mut stop = || false;
        let mut s = Stream::new(&mut reader, 3, Path::new("x"), &mut stop);
        let count = s.message_count().unwrap();
        assert!(matches!(s.message(0, count), Err(Error::Interrupted { .. })));
    }
}
