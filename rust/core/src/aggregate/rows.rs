//! Reading one chunk of a tensor from every upload at once (the robust methods' sweeps): an
//! `N × count` float64 block, one row per upload, rows read on every core. Reads go through
//! [`HeldFiles::read_lanes`] (`pread` from the files held open, each read confirming the file is
//! the version that was checked) or from an upload's bytes: never a mapping.

use super::kernel::{in_parallel, threads};
use super::structure::Located;
use super::upload::HeldFiles;
use super::values::decode_into;
use crate::Error;

/// Where one upload's values are read from.
pub enum RowSource<'a> {
    /// Its files, held open since its check.
    Files(&'a HeldFiles),
    /// Its bytes: the checkpoint, and the external data file when there is one.
    Bytes(&'a [u8], Option<&'a [u8]>),
}

impl RowSource<'_> {
    fn read(&self, loc: &Located, first: usize, out: &mut [f64], buf: &mut Vec<u8>) -> Result<(), Error> {
        match self {
            RowSource::Files(files) => files.read_lanes(loc, first, out, buf),
            RowSource::Bytes(checkpoint, external) => {
                let owner = if loc.external { external.unwrap_or(checkpoint) } else { checkpoint };
                let width = loc.lanes.width();
                let start =
                    usize::try_from(loc.bytes.start).unwrap_or(usize::MAX).saturating_add(first * width);
                let end = start.saturating_add(out.len() * width);
                let part = owner
                    .get(start..end)
                    .filter(|_| end as u64 <= loc.bytes.end)
                    .ok_or_else(|| Error::Internal { detail: "a lane range outside the upload".into() })?;
                decode_into(loc.lanes, part, out);
                Ok(())
            }
        }
    }
}

/// Fills row `r` of the row-major block `out` (`sources.len()` rows of `count` lanes) with lanes
/// `first..first + count` of the tensor at `locations[r]` of `sources[r]`. On failure, the row
/// that failed and why.
pub fn read_rows(
    sources: &[RowSource<'_>],
    locations: &[Located],
    first: usize,
    count: usize,
    out: &mut [f64],
) -> Result<(), (usize, Error)> {
    if count == 0 {
        return Ok(());
    }
    if out.len() != sources.len() * count || locations.len() != sources.len() {
        return Err((0, Error::Internal { detail: "the block does not match its sources".into() }));
    }
    let rows: Vec<(usize, &mut [f64])> = out.chunks_mut(count).enumerate().collect();
    // one group of consecutive rows per thread, each with one read buffer for all its rows
    let share = rows.len().div_ceil(threads()).max(1);
    let mut groups: Vec<Vec<(usize, &mut [f64])>> = Vec::new();
    let mut rows = rows.into_iter();
    loop {
        let group: Vec<_> = rows.by_ref().take(share).collect();
        if group.is_empty() {
            break;
        }
        groups.push(group);
    }
    let bytes = out_bytes(sources.len(), count);
    let results = in_parallel(groups, bytes, |group| {
        let mut buf = Vec::new();
        for (r, row) in group {
            let (Some(source), Some(loc)) = (sources.get(r), locations.get(r)) else { continue };
            source.read(loc, first, row, &mut buf).map_err(|e| (r, e))?;
        }
        Ok(())
    });
    results.into_iter().collect()
}

fn out_bytes(rows: usize, count: usize) -> usize {
    rows.saturating_mul(count).saturating_mul(8)
}
