//! `Read + Seek` over [`Input`]: the zip crate reads the archive through copies, never through a
//! `&[u8]` of memory another process may be rewriting (see `input.rs`).

use std::io::{self, Read, Seek, SeekFrom};

use crate::input::Input;

pub(super) struct InputCursor<'a> {
    input: Input<'a>,
    pos: u64,
}

impl<'a> InputCursor<'a> {
    pub(super) fn new(input: Input<'a>) -> Self {
        InputCursor { input, pos: 0 }
    }
}

impl Read for InputCursor<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let len = self.input.len() as u64;
        let n = usize::try_from(len.saturating_sub(self.pos)).unwrap_or(usize::MAX).min(buf.len());
        let Ok(at) = usize::try_from(self.pos) else { return Ok(0) };
        let mut copied = Vec::with_capacity(n);
        if n == 0 || self.input.copy_to(at, n, &mut copied).is_none() {
            return Ok(0);
        }
        if let Some(dest) = buf.get_mut(..n) {
            dest.copy_from_slice(&copied);
        }
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for InputCursor<'_> {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let len = self.input.len() as u64;
        let target = match to {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::End(d) => len.checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        let target =
            target.ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "seek before the start"))?;
        self.pos = target;
        Ok(target)
    }
}
