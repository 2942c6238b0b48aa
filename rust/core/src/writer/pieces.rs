//! A file being written as a list of runs: owned bytes (metadata, length prefixes, padding) and
//! borrowed slices of the caller's tensors, which are never copied.

use super::limits::DATA_ALIGNMENT;

/// One run of bytes of a file being written.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Piece<'a> {
    /// `owned[start..end]` of the [`Pieces`] that holds it.
    Owned { start: usize, end: usize },
    /// Bytes of a caller's tensor, written as they are.
    Borrowed(&'a [u8]),
}

/// A file as a sequence of pieces: what the writer produces and `save` streams out.
#[derive(Debug, Default)]
pub(crate) struct Pieces<'a> {
    owned: Vec<u8>,
    list: Vec<Piece<'a>>,
    len: u64,
}

impl<'a> Pieces<'a> {
    /// Total length of the file in bytes.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    #[cfg_attr(not(feature = "fs"), allow(dead_code))] // used by the file layer only
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The pieces in file order, as byte slices.
    pub(crate) fn slices(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.list.iter().map(|p| match *p {
            Piece::Owned { start, end } => &self.owned[start..end],
            Piece::Borrowed(b) => b,
        })
    }

    pub(super) fn push_owned(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        let start = self.owned.len();
        self.owned.extend_from_slice(bytes);
        let end = self.owned.len();
        self.len += bytes.len() as u64;
        // Consecutive owned runs become one piece (metadata + first prefix, padding + prefix).
        if let Some(Piece::Owned { end: last_end, .. }) = self.list.last_mut() {
            if *last_end == start {
                *last_end = end;
                return;
            }
        }
        self.list.push(Piece::Owned { start, end });
    }

    pub(super) fn push_zeros(&mut self, count: usize) {
        const ZEROS: [u8; DATA_ALIGNMENT] = [0; DATA_ALIGNMENT];
        debug_assert!(count < DATA_ALIGNMENT);
        self.push_owned(&ZEROS[..count.min(DATA_ALIGNMENT)]);
    }

    pub(super) fn push_borrowed(&mut self, bytes: &'a [u8]) {
        if !bytes.is_empty() {
            self.len += bytes.len() as u64;
            self.list.push(Piece::Borrowed(bytes));
        }
    }

    /// The whole file in one buffer (copies every tensor).
    pub(crate) fn concat(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(usize::try_from(self.len).unwrap_or(0));
        for s in self.slices() {
            out.extend_from_slice(s);
        }
        out
    }
}
