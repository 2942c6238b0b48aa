//! `.npz` archives (numpy's zip of `.npy` members) decoded under a budget: every member is read
//! one at a time from one buffer (no file descriptor per member), stored members are located in
//! place (no copy), and deflated members are inflated into memory only up to the size their
//! central-directory entry declares, after the sum of declared sizes was checked against a
//! budget. Only the stored and deflate methods are read; encrypted members are refused.
//!
//! The zip structure is parsed by the `zip` crate through copies of the input (the buffer may
//! be a shared mapping another process rewrites); each `.npy` header is parsed here (`npy`).

mod cursor;
pub(crate) mod error;
mod npy;

use std::collections::HashSet;
use std::io::Read;

use zip::read::{ArchiveOffset, Config};
use zip::{CompressionMethod, ZipArchive};

use crate::input::Input;
use crate::{wrong_kind_message, FileKind};
use cursor::InputCursor;
pub use error::NpzError;
pub use npy::{parse_npy_buffer, NpyHeader, MAX_HEADER_LEN as MAX_NPY_HEADER_LEN};

/// The decompressed bytes an archive may expand to unless the caller says otherwise: this many
/// times the archive's size ...
pub const NPZ_BUDGET_RATIO: u64 = 8;
/// ... but never less than this (small archives of zeros compress very well).
pub const NPZ_MIN_BUDGET: u64 = 64 << 20;

/// The default decompression budget for an archive of `archive_len` bytes.
pub fn default_npz_budget(archive_len: u64) -> u64 {
    archive_len.saturating_mul(NPZ_BUDGET_RATIO).max(NPZ_MIN_BUDGET)
}

fn archive_error(detail: impl Into<String>) -> NpzError {
    NpzError { member: None, detail: detail.into() }
}

/// Where a member's array bytes are.
#[derive(Debug)]
pub enum NpzData {
    /// Stored uncompressed: the data (after the `.npy` header) starts at this offset of the
    /// archive's buffer.
    InPlace {
        /// Offset of the first data byte in the archive.
        offset: u64,
    },
    /// Deflated: the whole decompressed member (`.npy` header first; data at `header.header_len`).
    Inflated(Vec<u8>),
}

/// One `.npy` member of an archive.
#[derive(Debug)]
pub struct NpzMember {
    /// The member's name without `.npy` (valid UTF-8, as stored).
    pub key: String,
    /// Its parsed `.npy` header.
    pub header: NpyHeader,
    /// Its data.
    pub data: NpzData,
}

/// Reads every member of the archive in `bytes`; decompressed members may total at most
/// `budget` bytes.
pub fn read_npz(bytes: &[u8], budget: u64) -> crate::Result<Vec<NpzMember>> {
    Ok(read_input(Input::from_slice(bytes), budget)?)
}

/// [`read_npz`] for memory that may change while it is read (a shared mapping).
///
/// # Safety
/// `base..base + len` must stay allocated and readable until this returns.
pub unsafe fn read_npz_raw(base: *const u8, len: usize, budget: u64) -> crate::Result<Vec<NpzMember>> {
    // SAFETY: forwarded from the caller.
    Ok(read_input(unsafe { Input::from_raw(base, len) }, budget)?)
}

/// Bytes the zip crate holds at its peak per central-directory entry, for the probe below: its
/// `ZipFileData` list and the name-keyed map it builds from it (a copy of each entry, the name
/// cloned) exist at once. A record takes at least 46 bytes of the archive.
const ZIP_ENTRY_BYTES: usize = 640;

/// The central directory's length as the end-of-central-directory record states it (its last
/// occurrence within the 64 KiB comment's reach), or the whole input's length when there is no
/// such record or the archive is zip64 (the zip crate then finds what is wrong).
fn directory_len(input: Input<'_>) -> usize {
    const EOCD: u32 = 0x0605_4b50;
    let len = input.len();
    let first = len.saturating_sub(22 + 0xFFFF);
    (first..=len.saturating_sub(22))
        .rev()
        .find(|&at| input.u32(at) == Some(EOCD))
        .and_then(|at| input.u32(at + 12))
        .filter(|&size| size != u32::MAX)
        .map_or(len, |size| (size as usize).min(len))
}

/// [`read_members`], whose error, for a file of another kind (an ONNX model, a checkpoint, a
/// PyTorch zip, ...), says what the file is and what reads it (`sniff.rs`).
fn read_input(input: Input<'_>, budget: u64) -> Result<Vec<NpzMember>, NpzError> {
    read_members(input, budget).map_err(|e| match input.kind() {
        Some(found) if !matches!(found, FileKind::Npz | FileKind::Zip) => {
            archive_error(wrong_kind_message(FileKind::Npz, found))
        }
        _ => e,
    })
}

fn read_members(input: Input<'_>, budget: u64) -> Result<Vec<NpzMember>, NpzError> {
    // The zip crate allocates its directory itself (an abort if that fails): make sure the room
    // it can need for an archive this long exists first.
    let directory = directory_len(input);
    crate::alloc::probe(directory / 46 * ZIP_ENTRY_BYTES).map_err(|e| archive_error(e.to_string()))?;
    let config = Config { archive_offset: ArchiveOffset::Known(0) };
    let mut zip = ZipArchive::with_config(config, InputCursor::new(input))
        .map_err(|e| archive_error(format!("it is not a valid zip archive ({e})")))?;
    let entries = central_entries(input, zip.central_directory_start(), zip.len());
    if entries != zip.len() {
        return Err(archive_error(format!(
            "its central directory lists {entries} entries but only {} distinct names: a member \
             name appears twice",
            zip.len()
        )));
    }
    check_budget(&mut zip, budget)?;
    let no_room = |_| archive_error(format!("out of memory for the index of its {} members", zip.len()));
    let mut seen = HashSet::new();
    seen.try_reserve(zip.len()).map_err(no_room)?;
    let mut members = Vec::new();
    members.try_reserve(zip.len()).map_err(no_room)?;
    for i in 0..zip.len() {
        let member = read_member(&mut zip, i, input)?;
        if !seen.insert(member.key.clone()) {
            return Err(archive_error(format!("member {:?} appears twice", member.key)));
        }
        members.push(member);
    }
    Ok(members)
}

/// How many central-directory records start at `start` (counted up to `limit + 1`): the zip
/// crate keeps one entry per distinct name, so a count above its own reveals a repeated name.
fn central_entries(input: Input<'_>, start: u64, limit: usize) -> usize {
    let mut at = usize::try_from(start).unwrap_or(usize::MAX);
    let mut count = 0;
    while count <= limit && input.u32(at) == Some(0x0201_4b50) {
        let field = |off: usize| at.checked_add(off).and_then(|p| input.u16(p)).map(usize::from);
        let (Some(n), Some(m), Some(k)) = (field(28), field(30), field(32)) else { break };
        count += 1;
        at = at.saturating_add(46 + n + m + k);
    }
    count
}

/// Refuses an archive whose deflated members declare more than `budget` bytes in total, before
/// anything is inflated.
fn check_budget(zip: &mut ZipArchive<InputCursor<'_>>, budget: u64) -> Result<(), NpzError> {
    let mut total: u64 = 0;
    for i in 0..zip.len() {
        let file =
            zip.by_index_raw(i).map_err(|e| archive_error(format!("entry {i} is unreadable ({e})")))?;
        if file.compression() != CompressionMethod::Stored {
            total = total.saturating_add(file.size());
        }
    }
    if total > budget {
        return Err(archive_error(format!(
            "its compressed members would decompress to {total} bytes, over the budget of {budget} \
             bytes (pass a larger max_decompressed_bytes if the archive is trusted)"
        )));
    }
    Ok(())
}

/// Why an `.npz` member may not be named `name` (a phrase completing "its name ..."), or `None`:
/// a zip tool extracting the archive would place it outside the folder it extracts into (an
/// absolute path, a `..` component, a backslash that Windows tools take for a separator, a drive
/// letter), or the name cannot be a file name at all (NUL). ortckpt writes no
/// such member and reads none: the archive stays safe to unzip, whatever the tensor names.
pub fn npz_member_problem(name: &str) -> Option<&'static str> {
    let bytes = name.as_bytes();
    if name.contains('\0') {
        Some("holds NUL characters")
    } else if name.starts_with('/') {
        Some("is an absolute path")
    } else if name.contains('\\') {
        Some("holds a backslash, which Windows zip tools take for a directory separator")
    } else if bytes.len() >= 2 && bytes[0].is_ascii_alphabetic() && bytes[1] == b':' {
        Some("starts with a drive letter")
    } else if name.split('/').any(|part| part == "..") {
        Some("has a '..' component, which leads out of the extraction folder")
    } else {
        None
    }
}

fn read_member(
    zip: &mut ZipArchive<InputCursor<'_>>,
    i: usize,
    input: Input<'_>,
) -> Result<NpzMember, NpzError> {
    let unreadable = |e: zip::result::ZipError| archive_error(format!("entry {i} is unreadable ({e})"));
    let file = zip.by_index_raw(i).map_err(unreadable)?;
    let shown = String::from_utf8_lossy(file.name_raw()).into_owned();
    let fail = |detail: String| NpzError { member: Some(shown.clone()), detail };
    // The name must be exactly its stored bytes decoded as UTF-8: a lossy or legacy (CP437)
    // decoding would silently rename the tensor.
    let name = match std::str::from_utf8(file.name_raw()) {
        Ok(name) if name == file.name() => name.to_owned(),
        _ => return Err(fail("its name is not valid UTF-8 (or is not marked as UTF-8)".into())),
    };
    if let Some(problem) = npz_member_problem(&name) {
        return Err(fail(format!(
            "its name {problem}: a zip tool would not extract it inside its folder, so ortckpt refuses it"
        )));
    }
    let Some(key) = name.strip_suffix(".npy") else {
        return Err(fail("it is not a .npy array (an .npz archive holds only .npy members)".into()));
    };
    let key = key.to_owned();
    if file.encrypted() {
        return Err(fail("it is encrypted".into()));
    }
    let (method, size, compressed, header_start) =
        (file.compression(), file.size(), file.compressed_size(), file.header_start());
    drop(file);
    match method {
        CompressionMethod::Stored => {
            let start = local_data_start(input, header_start).map_err(&fail)?;
            let header = stored_header(input, start, size, compressed).map_err(&fail)?;
            let offset = start + header.header_len as u64;
            Ok(NpzMember { key, header, data: NpzData::InPlace { offset } })
        }
        CompressionMethod::Deflated => {
            let bytes = inflate(zip, i, size).map_err(&fail)?;
            let header = npy::parse(&bytes).map_err(&fail)?;
            check_size(&header, size).map_err(&fail)?;
            Ok(NpzMember { key, header, data: NpzData::Inflated(bytes) })
        }
        other => {
            Err(fail(format!("it is compressed with {other} (only stored and deflated members are read)")))
        }
    }
}

fn check_size(header: &NpyHeader, size: u64) -> Result<(), String> {
    if (header.header_len as u64).checked_add(header.data_len) != Some(size) {
        return Err(format!(
            "its .npy header calls for {} data bytes but the member holds {}: it is truncated or has \
             trailing bytes",
            header.data_len,
            size.saturating_sub(header.header_len as u64)
        ));
    }
    Ok(())
}

/// Where a member's data starts: after its local file header (30 bytes, then the name and the
/// extra field, whose lengths the local header gives) at `header_start`.
fn local_data_start(input: Input<'_>, header_start: u64) -> Result<u64, String> {
    let at = usize::try_from(header_start).map_err(|_| "its local header is out of range".to_string())?;
    let field = |off: usize| at.checked_add(off).and_then(|p| input.u16(p)).map(u64::from);
    match (input.u32(at), field(26), field(28)) {
        (Some(0x0403_4b50), Some(name), Some(extra)) => Ok(header_start + 30 + name + extra),
        _ => Err("its local header is missing or truncated".into()),
    }
}

/// The header of a stored member whose data is `size` bytes at `start` of the archive.
fn stored_header(input: Input<'_>, start: u64, size: u64, compressed: u64) -> Result<NpyHeader, String> {
    let in_range = start.checked_add(size).is_some_and(|end| end <= input.len() as u64);
    if size != compressed || !in_range {
        return Err("it runs past the end of the archive (truncated?)".into());
    }
    let at = usize::try_from(start).map_err(|_| "its offset is out of range".to_string())?;
    let mut head = Vec::new();
    let first = usize::try_from(size.min(12)).unwrap_or(12);
    input.copy_to(at, first, &mut head).ok_or("it is truncated")?;
    let len = npy::header_len(&head)?;
    if len as u64 > size {
        return Err("its .npy header runs past the member's end".into());
    }
    head.clear();
    input.copy_to(at, len, &mut head).ok_or("it is truncated")?;
    let header = npy::parse(&head)?;
    check_size(&header, size)?;
    Ok(header)
}

/// Inflates member `i`, which declares `size` decompressed bytes (already within the budget):
/// more bytes than declared, or a checksum mismatch, is an error.
fn inflate(zip: &mut ZipArchive<InputCursor<'_>>, i: usize, size: u64) -> Result<Vec<u8>, String> {
    let file = zip.by_index(i).map_err(|e| format!("it cannot be decompressed ({e})"))?;
    let len = usize::try_from(size).map_err(|_| "it is too large for this machine".to_string())?;
    let mut out = Vec::new();
    out.try_reserve_exact(len).map_err(|_| format!("{len} bytes of memory are not available"))?;
    let corrupt =
        |e: std::io::Error| format!("it is corrupt: its deflate stream cannot be decompressed ({e})");
    let mut file = file;
    (&mut file).take(size).read_to_end(&mut out).map_err(corrupt)?;
    if (out.len() as u64) < size {
        return Err(format!("it decompresses to {} bytes but declares {size}", out.len()));
    }
    // One more byte must be the end (this read also checks the CRC-32).
    if file.read(&mut [0u8; 1]).map_err(corrupt)? != 0 {
        return Err(format!("it decompresses to more than the {size} bytes it declares"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
