//! Reading one chunk of a tensor from every upload at once (the robust methods' sweeps): an
//! `N × count` float64 block, one row per upload, rows read on every core. Reads go through
//! [`HeldFiles::read_lanes`] (`pread` from the files held open since the check; the caller asks
//! [`HeldFiles::confirm_unchanged`] when its reads are done) or from an upload's bytes: never a
//! mapping.

use super::block::Statistic;
use super::columns::{reduce_few_rows, reduce_stored_block, NETWORK_UP_TO};
use super::structure::Located;
use super::upload::HeldFiles;
use crate::parallel::{in_parallel, threads};
use crate::values::{decode_into, Lanes};
use crate::Error;

/// Where one upload's values are read from.
pub enum RowSource<'a> {
    /// Its files, held open since its check.
    Files(&'a HeldFiles),
    /// Its bytes: the checkpoint, and the external data file when there is one.
    Bytes(&'a [u8], Option<&'a [u8]>),
}

impl RowSource<'_> {
    /// Lanes `first..` of the tensor at `loc` as stored, into `dst` (`dst.len()` bytes).
    fn read_stored(&self, loc: &Located, first: usize, dst: &mut [u8]) -> Result<(), Error> {
        match self {
            RowSource::Files(files) => files.read_stored(loc, first, dst),
            RowSource::Bytes(checkpoint, external) => {
                let owner = if loc.external { external.unwrap_or(checkpoint) } else { checkpoint };
                let start = usize::try_from(loc.bytes.start)
                    .unwrap_or(usize::MAX)
                    .saturating_add(first.saturating_mul(loc.lanes.width()));
                let end = start.saturating_add(dst.len());
                let part = owner
                    .get(start..end)
                    .filter(|_| end as u64 <= loc.bytes.end)
                    .ok_or_else(|| Error::Internal { detail: "a lane range outside the upload".into() })?;
                dst.copy_from_slice(part);
                Ok(())
            }
        }
    }

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

/// Lanes per upload per chunk at least, whatever the chunk size: fewer would make the cost of
/// each read dominate.
pub const MIN_CHUNK_LANES: usize = 1024;

/// The median or trimmed mean of every slot (tensor) across all uploads, into `outs` (one per
/// slot): `slots[s]` holds where slot `s` is in each upload (one [`Located`] per source), per
/// row the sum of its squared values is added into `squares` and of its squared distances to
/// the result into `gaps`. Up to [`NETWORK_UP_TO`] uploads each tensor is read and reduced in
/// one pass ([`reduce_rows`]); beyond, chunk by chunk: a chunk of every upload read as stored
/// (at most `chunk_bytes` bytes in all, at least [`MIN_CHUNK_LANES`] lanes per upload, one
/// buffer for the whole call), then reduced. On failure, the row that failed and why.
pub fn reduce_slots(
    sources: &[RowSource<'_>],
    slots: &[Vec<Located>],
    stat: Statistic,
    outs: &mut [&mut [f64]],
    squares: &mut [f64],
    gaps: &mut [f64],
    chunk_bytes: usize,
) -> Result<(), (usize, Error)> {
    let n = sources.len();
    let mismatch = |what: &str| (0, Error::Internal { detail: format!("reduce_slots: {what}") });
    if slots.len() != outs.len() || squares.len() != n || gaps.len() != n {
        return Err(mismatch("the slots do not match their outputs"));
    }
    let mut block: Vec<u8> = Vec::new();
    for (locations, out) in slots.iter().zip(outs.iter_mut()) {
        reduce_tensor(sources, locations, 0, stat, out, squares, gaps, chunk_bytes, &mut block)?;
    }
    Ok(())
}

/// The statistic of lanes `first..first + out.len()` of the uploads' tensor at `locations` into
/// `out` (one row per upload, as [`reduce_slots`] counts its squares and gaps): up to
/// [`NETWORK_UP_TO`] uploads read and reduced in one pass ([`reduce_rows`]), beyond that chunk by
/// chunk, each chunk read as stored into `block` (kept between calls: at most `chunk_bytes`
/// bytes, at least [`MIN_CHUNK_LANES`] lanes per upload). On failure, the row that failed and why.
#[allow(clippy::too_many_arguments)]
pub(crate) fn reduce_tensor(
    sources: &[RowSource<'_>],
    locations: &[Located],
    first: usize,
    stat: Statistic,
    out: &mut [f64],
    squares: &mut [f64],
    gaps: &mut [f64],
    chunk_bytes: usize,
    block: &mut Vec<u8>,
) -> Result<(), (usize, Error)> {
    let n = sources.len();
    if n <= NETWORK_UP_TO {
        return reduce_rows(sources, locations, first, stat, out, squares, gaps);
    }
    let Some(lanes) = locations.first().map(|l| l.lanes) else { return Ok(()) };
    if locations.len() != n || locations.iter().any(|l| l.lanes != lanes) {
        let detail = "reduce_tensor: a tensor's locations do not match the uploads".into();
        return Err((0, Error::Internal { detail }));
    }
    let width = lanes.width();
    let per = (chunk_bytes / width.saturating_mul(n).max(1)).max(MIN_CHUNK_LANES);
    for (k, part) in out.chunks_mut(per).enumerate() {
        let count = part.len();
        let bytes = n * count * width;
        if block.len() < bytes {
            block.resize(bytes, 0);
        }
        let chunk = block.get_mut(..bytes).unwrap_or_default();
        read_stored_rows(sources, locations, first + k * per, count, chunk)?;
        reduce_stored_block(chunk, lanes, n, stat, part, squares, gaps);
    }
    Ok(())
}

/// [`read_rows`] of stored values: row `r` of `out` (`count` lanes of `locations[r]`'s width)
/// gets lanes `first..first + count` as the file stores them (checked finite).
pub(crate) fn read_stored_rows(
    sources: &[RowSource<'_>],
    locations: &[Located],
    first: usize,
    count: usize,
    out: &mut [u8],
) -> Result<(), (usize, Error)> {
    let Some(width) = locations.first().map(|l| l.lanes.width()).filter(|_| count > 0) else { return Ok(()) };
    let bytes = out.len();
    let rows: Vec<(usize, &mut [u8])> = out.chunks_mut(count * width).enumerate().collect();
    let share = rows.len().div_ceil(threads()).max(1);
    let mut groups: Vec<Vec<(usize, &mut [u8])>> = Vec::new();
    let mut rows = rows.into_iter();
    loop {
        let group: Vec<_> = rows.by_ref().take(share).collect();
        if group.is_empty() {
            break;
        }
        groups.push(group);
    }
    let results = in_parallel(groups, bytes, |group| {
        for (r, row) in group {
            let (Some(source), Some(loc)) = (sources.get(r), locations.get(r)) else { continue };
            source.read_stored(loc, first, row).map_err(|e| (r, e))?;
        }
        Ok(())
    });
    results.into_iter().collect()
}

fn out_bytes(rows: usize, count: usize) -> usize {
    rows.saturating_mul(count).saturating_mul(8)
}

/// The statistic of lanes `first..first + out.len()` of every upload's tensor into `out`, for few
/// uploads (at most [`NETWORK_UP_TO`]), read and reduced in one pass: each thread reads a band of
/// columns of every row into cache and reduces it there, so the robust methods' `N × chunk` block
/// is never written to memory. Per row, the sum of its squared values is added into `squares` and
/// of its squared distances to the result into `gaps`. On failure, the row that failed and why.
pub fn reduce_rows(
    sources: &[RowSource<'_>],
    locations: &[Located],
    first: usize,
    stat: Statistic,
    out: &mut [f64],
    squares: &mut [f64],
    gaps: &mut [f64],
) -> Result<(), (usize, Error)> {
    let n = sources.len();
    if n == 0 || n > NETWORK_UP_TO || locations.len() != n || squares.len() != n || gaps.len() != n {
        return Err((
            0,
            Error::Internal { detail: "reduce_rows: the rows do not match their sources".into() },
        ));
    }
    let at = |r: usize| match (sources.get(r), locations.get(r)) {
        (Some(source), Some(loc)) => Ok((source, loc)),
        _ => Err((r, Error::Internal { detail: "a row without a source".into() })),
    };
    if locations.iter().all(|l| l.lanes == Lanes::F32) {
        // float32 uploads are read as stored and sorted as float32 (the same statistic)
        let fill = |r: usize, c0: usize, dst: &mut [f32], _: &mut Vec<u8>| {
            let (source, loc) = at(r)?;
            source.read_stored(loc, first.saturating_add(c0), f32_bytes(dst)).map_err(|e| (r, e))?;
            dst.iter_mut().for_each(|v| *v = f32::from_bits(u32::from_le(v.to_bits())));
            Ok(())
        };
        return reduce_few_rows(&fill, n, stat, out, squares, gaps);
    }
    let fill = |r: usize, c0: usize, dst: &mut [f64], buf: &mut Vec<u8>| {
        let (source, loc) = at(r)?;
        source.read(loc, first.saturating_add(c0), dst, buf).map_err(|e| (r, e))
    };
    reduce_few_rows(&fill, n, stat, out, squares, gaps)
}

/// The bytes of float32 values, to read stored (little-endian) float32 straight into them.
fn f32_bytes(x: &mut [f32]) -> &mut [u8] {
    // SAFETY: any 4 bytes are a valid f32, u8 has no alignment, and the length covers the same
    // memory; the slice borrows `x` mutably for as long, so nothing else reads it meanwhile.
    unsafe { std::slice::from_raw_parts_mut(x.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(x)) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::{reduce_block, Lanes};

    #[test]
    fn reduce_rows_equals_reading_the_block_then_reducing_it() {
        // 7 float32 uploads of 20,000 lanes, each at a different offset of its own bytes
        let (n, lanes) = (7usize, 20_000usize);
        let uploads: Vec<(Vec<u8>, Located)> = (0..n)
            .map(|u| {
                let pad = 8 * (u + 1);
                let mut bytes = vec![0u8; pad];
                for i in 0..lanes {
                    let v = ((i * 31 + u * 977) % 401) as f32 - 200.0 + u as f32 / 8.0;
                    bytes.extend_from_slice(&v.to_le_bytes());
                }
                let loc =
                    Located { lanes: Lanes::F32, bytes: pad as u64..bytes.len() as u64, external: false };
                (bytes, loc)
            })
            .collect();
        let sources: Vec<RowSource<'_>> = uploads.iter().map(|(b, _)| RowSource::Bytes(b, None)).collect();
        let locations: Vec<Located> = uploads.iter().map(|(_, l)| l.clone()).collect();
        let (first, count) = (1_000usize, 15_000usize);
        let mut block = vec![0.0f64; n * count];
        read_rows(&sources, &locations, first, count, &mut block).map_err(|(_, e)| e.to_string()).unwrap();
        for stat in [Statistic::Median, Statistic::TrimmedMean(2)] {
            let (mut want, mut got) = (vec![0.0; count], vec![0.0; count]);
            let (mut sq_want, mut gaps_want) = (vec![0.0; n], vec![0.0; n]);
            reduce_block(&block, n, stat, &mut want, &mut sq_want, &mut gaps_want);
            let (mut sq, mut gaps) = (vec![0.0; n], vec![0.0; n]);
            reduce_rows(&sources, &locations, first, stat, &mut got, &mut sq, &mut gaps)
                .map_err(|(_, e)| e.to_string())
                .unwrap();
            assert_eq!(got, want, "{stat:?}");
            for r in 0..n {
                assert!((sq[r] - sq_want[r]).abs() <= 1e-12 * sq_want[r]);
                assert!((gaps[r] - gaps_want[r]).abs() <= 1e-12 * gaps_want[r].max(1.0));
            }
        }
        // a lane range past a tensor's end is an error naming its row, never a panic
        let mut out = vec![0.0; 20];
        let (mut sq, mut gaps) = (vec![0.0; n], vec![0.0; n]);
        let err =
            reduce_rows(&sources, &locations, lanes - 10, Statistic::Median, &mut out, &mut sq, &mut gaps);
        assert!(err.is_err());
    }

    #[test]
    fn reduce_slots_equals_reading_float64_blocks_then_reducing() {
        // 40 uploads (past the networks) and 7 (within them), two slots of other element types,
        // chunks smaller than a slot (several reads per slot) and larger
        for n in [40usize, 7] {
            let lanes_of = [(Lanes::F32, 5_000usize), (Lanes::F64, 3_001)];
            let uploads: Vec<(Vec<u8>, Vec<Located>)> = (0..n)
                .map(|u| {
                    let mut bytes = vec![0u8; 16];
                    let mut where_ = Vec::new();
                    for (k, &(lanes, count)) in lanes_of.iter().enumerate() {
                        let start = bytes.len() as u64;
                        for i in 0..count {
                            let v = ((i * 31 + u * 977 + k) % 401) as f64 / 4.0 - 50.0;
                            match lanes {
                                Lanes::F32 => bytes.extend_from_slice(&(v as f32).to_le_bytes()),
                                _ => bytes.extend_from_slice(&v.to_le_bytes()),
                            }
                        }
                        where_.push(Located { lanes, bytes: start..bytes.len() as u64, external: false });
                    }
                    (bytes, where_)
                })
                .collect();
            let sources: Vec<RowSource<'_>> =
                uploads.iter().map(|(b, _)| RowSource::Bytes(b, None)).collect();
            let slots: Vec<Vec<Located>> =
                (0..lanes_of.len()).map(|k| uploads.iter().map(|(_, w)| w[k].clone()).collect()).collect();
            for stat in [Statistic::Median, Statistic::TrimmedMean(n / 10)] {
                for chunk_bytes in [1usize << 10, 64 << 20] {
                    let mut outs: Vec<Vec<f64>> = lanes_of.iter().map(|&(_, c)| vec![f64::NAN; c]).collect();
                    let (mut sq, mut gaps) = (vec![0.0; n], vec![0.0; n]);
                    let mut views: Vec<&mut [f64]> = outs.iter_mut().map(|o| o.as_mut_slice()).collect();
                    reduce_slots(&sources, &slots, stat, &mut views, &mut sq, &mut gaps, chunk_bytes)
                        .map_err(|(_, e)| e.to_string())
                        .unwrap();
                    let (mut sq_want, mut gaps_want) = (vec![0.0; n], vec![0.0; n]);
                    for (k, &(_, count)) in lanes_of.iter().enumerate() {
                        let mut block = vec![0.0f64; n * count];
                        read_rows(&sources, &slots[k], 0, count, &mut block)
                            .map_err(|(_, e)| e.to_string())
                            .unwrap();
                        let mut want = vec![0.0; count];
                        reduce_block(&block, n, stat, &mut want, &mut sq_want, &mut gaps_want);
                        assert_eq!(outs[k], want, "n = {n}, {stat:?}, slot {k}, chunk {chunk_bytes}");
                    }
                    for r in 0..n {
                        assert!((sq[r] - sq_want[r]).abs() <= 1e-12 * sq_want[r], "squares of row {r}");
                        assert!(
                            (gaps[r] - gaps_want[r]).abs() <= 1e-9 * gaps_want[r].max(1.0),
                            "gaps of row {r}"
                        );
                    }
                }
            }
            // a location past its tensor: an error naming the row, never a panic
            let mut bad = slots.clone();
            bad[0][3].bytes.end -= 4;
            let mut outs: Vec<Vec<f64>> = lanes_of.iter().map(|&(_, c)| vec![0.0; c]).collect();
            let mut views: Vec<&mut [f64]> = outs.iter_mut().map(|o| o.as_mut_slice()).collect();
            let (mut sq, mut gaps) = (vec![0.0; n], vec![0.0; n]);
            let err =
                reduce_slots(&sources, &bad, Statistic::Median, &mut views, &mut sq, &mut gaps, 1 << 10);
            assert_eq!(err.map_err(|(row, _)| row), Err(3), "n = {n}");
        }
    }
}
