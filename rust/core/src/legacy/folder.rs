//! An ORT 1.15 checkpoint folder read into a [`CheckpointIndex`] (version 0) and one buffer of
//! tensor values, file by file, message by message, through the same rules as a flatbuffer
//! checkpoint (`assemble.rs`: data types, sizes, storage, unique names).
//!
//! Memory: the values of every tensor (one copy, in one buffer), the compact index, and for the
//! file being read one message's typed values; nothing per message beyond that, and what typed
//! fields, strings, names and dims add is charged to a [`Budget`] of twice the files' size plus
//! 64 KiB. Files are opened through the core's regular-file open: FIFOs and devices are refused
//! without blocking, symbolic links may not lead out of the folder.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs;
use std::io::{BufReader, Read};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::names::{classify_legacy_file, LegacyFile, LEGACY_LR_PROPERTY, LEGACY_STEP_PROPERTY};
use super::stream::Stream;
use super::tensor_proto::{Budget, TensorProto, Values};
use crate::assemble::{Assembler, RawData, Role, TensorFields};
use crate::files::open_regular;
use crate::{CheckpointIndex, DataType, Error, PropertyValue, Result, Storage};

/// An ORT 1.15 checkpoint folder, read: its index, whose inline tensors are ranges of `values`.
#[derive(Debug)]
pub struct LegacyCheckpoint {
    /// What the folder holds (version [`crate::LEGACY_FOLDER_VERSION`]; every tensor inline or strings).
    pub index: CheckpointIndex,
    /// The tensors' values, decoded from their TensorProtos.
    pub values: Vec<u8>,
}

/// Opens one file of a folder: its bytes, and its size as opened (what its lengths are checked
/// against).
pub type OpenLegacyFile<'a> = Box<dyn FnOnce() -> Result<(Box<dyn Read + 'a>, u64)> + 'a>;

/// One file of a folder given to [`read_legacy_files`], opened only when it is read (so a folder
/// of many files holds one descriptor and one read buffer at a time).
pub struct LegacyInput<'a> {
    /// The file's name in the folder (e.g. `paramtrain_tensors.pbseq`).
    pub name: String,
    /// Its size as listed: the folder's memory budget is computed from the sizes of its files.
    pub len: u64,
    /// Opens it; called at most once.
    pub open: Option<OpenLegacyFile<'a>>,
}

/// Reads the ORT 1.15 checkpoint folder `dir` (see docs/format.md, "The ORT 1.15 checkpoint
/// folder"). `None` when the directory holds none of the folder's files (an empty or unrelated
/// directory). `keep_going` is asked between messages and chunks of long reads; `false` stops the
/// read with [`Error::Interrupted`]. `limit` (a caller's `max_bytes`): a folder whose checkpoint
/// files hold more bytes together (their sizes as listed, which bound what the reader reads) is
/// refused ([`Error::SizeLimit`]) before any is opened.
pub fn read_legacy_folder(
    dir: &Path,
    limit: Option<u64>,
    keep_going: &mut dyn FnMut() -> bool,
) -> Result<Option<LegacyCheckpoint>> {
    let real_dir = fs::canonicalize(dir).map_err(|e| Error::io(dir, "open", e))?;
    let mut names: Vec<OsString> = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| Error::io(dir, "list", e))? {
        names.push(entry.map_err(|e| Error::io(dir, "list", e))?.file_name());
    }
    names.sort();
    let mut inputs = Vec::new();
    for name in names {
        let path = dir.join(&name);
        let Some(name) = checkpoint_file_name(&name, &path)? else { continue };
        // ORT skips subdirectories (a link to one too); metadata does not open anything.
        let listed = fs::metadata(&path);
        if listed.as_ref().is_ok_and(|m| m.is_dir()) {
            continue;
        }
        check_inside(&path, &real_dir, &name)?;
        let listed_len = listed.map_or(0, |m| m.len());
        let open: OpenLegacyFile<'static> = Box::new(move || {
            // Non-blocking and regular files only: a FIFO or device is refused unread.
            let file = open_regular(&path)?;
            let len = file.metadata().map_err(|e| Error::io(&path, "read metadata of", e))?.len();
            // the listed sizes are what the size limit measured: a file grown since is not read
            if len > listed_len {
                return Err(Error::CheckpointChanged {
                    path: path.clone(),
                    detail: format!("grew from {listed_len} to {len} bytes while the folder was read"),
                });
            }
            Ok((Box::new(BufReader::with_capacity(1 << 16, file)) as Box<dyn Read>, len))
        });
        inputs.push(LegacyInput { name, len: listed_len, open: Some(open) });
    }
    if let Some(limit) = limit {
        let size = inputs.iter().fold(0u64, |sum, input| sum.saturating_add(input.len));
        if size > limit {
            return Err(Error::SizeLimit { path: dir.to_path_buf(), size, limit });
        }
    }
    read_legacy_files(inputs, dir, keep_going)
}

/// The UTF-8 name of a directory entry that may be part of the checkpoint; `None` for names ORT
/// skips (hidden, or none of the prefixes). A name that is not UTF-8 but starts like a
/// checkpoint file is an error: ORT would read it, and its group or momentum name is text.
fn checkpoint_file_name(name: &std::ffi::OsStr, path: &Path) -> Result<Option<String>> {
    match name.to_str() {
        Some(text) => Ok(classify_legacy_file(text)?.map(|_| text.to_owned())),
        None => {
            let bytes = name.as_bytes();
            let prefixes: [&[u8]; 4] = [b"paramtrain", b"paramfrozen", b"custom", b"optim"];
            if prefixes.iter().any(|p| bytes.starts_with(p)) {
                return Err(Error::BadLegacyFolder {
                    detail: format!(
                        "the file name {:?} is not valid UTF-8; rename it ({})",
                        name.to_string_lossy(),
                        path.display()
                    ),
                });
            }
            Ok(None)
        }
    }
}

/// Refuses a symbolic link that leads out of the folder (or to the folder itself).
fn check_inside(path: &Path, real_dir: &Path, name: &str) -> Result<()> {
    let is_link = fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
    if !is_link {
        return Ok(());
    }
    let target: PathBuf = fs::canonicalize(path).map_err(|e| Error::io(path, "open", e))?;
    if target == real_dir || !target.starts_with(real_dir) {
        return Err(Error::BadLegacyFolder {
            detail: format!(
                "{name} is a symbolic link leading out of the checkpoint folder ({}); copy the file into \
                 the folder instead",
                target.display()
            ),
        });
    }
    Ok(())
}

/// An optimizer group's files.
#[derive(Default)]
struct GroupFiles {
    /// momentum name -> file position in the input list
    momentums: BTreeMap<String, usize>,
    properties: Option<usize>,
}

/// Reads the files of an ORT 1.15 checkpoint folder given as readers (the folder reader and the
/// fuzz target use it; names are classified as in a directory, `folder` names it in errors).
/// `None` when no file is part of a checkpoint.
pub fn read_legacy_files(
    mut inputs: Vec<LegacyInput<'_>>,
    folder: &Path,
    keep_going: &mut dyn FnMut() -> bool,
) -> Result<Option<LegacyCheckpoint>> {
    let total: u64 = inputs.iter().map(|i| i.len).fold(0, u64::saturating_add);
    let mut r = FolderReader {
        asm: Assembler::for_legacy_folder(),
        values: Vec::new(),
        budget: Budget::for_input(total),
        scratch: TensorProto::default(),
        folder,
        keep_going,
    };
    let (mut trainable, mut frozen, mut custom) = (Vec::new(), Vec::new(), Vec::new());
    let mut groups: BTreeMap<String, GroupFiles> = BTreeMap::new();
    for (i, input) in inputs.iter().enumerate() {
        match classify_legacy_file(&input.name)? {
            None => {}
            Some(LegacyFile::Trainable) => trainable.push(i),
            Some(LegacyFile::Frozen) => frozen.push(i),
            Some(LegacyFile::CustomProperties) => custom.push(i),
            Some(LegacyFile::Momentum { group, momentum }) => {
                groups.entry(group).or_default().momentums.insert(momentum, i);
            }
            Some(LegacyFile::GroupProperties { group }) => {
                groups.entry(group).or_default().properties = Some(i)
            }
        }
    }
    if trainable.is_empty() && frozen.is_empty() && custom.is_empty() && groups.is_empty() {
        return Ok(None);
    }
    for &i in &trainable {
        r.tensors(&mut inputs[i], Role::Parameter)?;
    }
    r.asm.end_trainable();
    for &i in &frozen {
        r.tensors(&mut inputs[i], Role::Parameter)?;
    }
    r.asm.end_parameters()?;
    for (name, files) in &groups {
        r.group(name, files, &mut inputs)?;
    }
    r.asm.end_groups()?;
    for &i in &custom {
        for (name, value) in r.properties(&mut inputs[i])? {
            r.asm.property(kind_of(&value), Some(&name), Some(value))?;
        }
    }
    let index = r.asm.finish()?;
    let mut values = r.values;
    values.shrink_to_fit();
    Ok(Some(LegacyCheckpoint { index, values }))
}

fn kind_of(value: &PropertyValue) -> &'static str {
    match value {
        PropertyValue::Int(_) => "int",
        PropertyValue::Float(_) => "float",
        PropertyValue::Str(_) => "string",
    }
}

/// What is done with each decoded tensor: given the index being built, the tensor, and the value
/// buffer its bytes are in.
type VisitTensor<'v> = dyn FnMut(&mut Assembler, &mut TensorProto, &[u8]) -> Result<()> + 'v;

struct FolderReader<'a> {
    asm: Assembler,
    values: Vec<u8>,
    budget: Budget,
    scratch: TensorProto,
    folder: &'a Path,
    keep_going: &'a mut dyn FnMut() -> bool,
}

/// An error about file `name`, naming it (I/O errors name their path already).
fn in_file(name: &str, e: Error) -> Error {
    match e {
        Error::Io { .. } | Error::Interrupted { .. } | Error::InFile { .. } => e,
        e => Error::InFile { file: name.to_owned(), error: Box::new(e) },
    }
}

impl FolderReader<'_> {
    /// Decodes every tensor of `input` into the value buffer, calling `each` on it while it is
    /// the scratch tensor.
    fn each_tensor(
        &mut self,
        input: &mut LegacyInput<'_>,
        each: &mut dyn FnMut(&mut Assembler, &mut TensorProto) -> Result<()>,
    ) -> Result<()> {
        let mut values = std::mem::take(&mut self.values);
        let result = self.each_tensor_into(input, &mut values, &mut |asm, t, _| each(asm, t));
        self.values = values;
        result
    }

    /// [`FolderReader::each_tensor`] with the values appended to `values`, which `each` sees.
    fn each_tensor_into(
        &mut self,
        input: &mut LegacyInput<'_>,
        values: &mut Vec<u8>,
        each: &mut VisitTensor<'_>,
    ) -> Result<()> {
        let path = self.folder.join(&input.name);
        let open = input.open.take().ok_or_else(|| Error::Internal {
            detail: format!("the folder file {} was read twice", input.name),
        })?;
        // The file stays open (one descriptor, one read buffer) while it is read, no longer.
        let (mut reader, len) = open()?;
        let mut stream = Stream::new(&mut *reader, len, &path, &mut *self.keep_going);
        let (asm, scratch, budget) = (&mut self.asm, &mut self.scratch, &mut self.budget);
        let mut run = || {
            let count = stream.message_count()?;
            for i in 0..count {
                let bound = stream.message(i, count)?;
                // An index entry and the position of a parameter sorted by name.
                budget.charge(40, stream.pos())?;
                scratch.decode(&mut stream, bound, i, values, budget)?;
                each(asm, scratch, values)?;
            }
            stream.expect_end(count)
        };
        run().map_err(|e| in_file(&input.name, e))
    }

    /// Adds every tensor of `input` to the index.
    fn tensors(&mut self, input: &mut LegacyInput<'_>, role: Role) -> Result<()> {
        self.each_tensor(input, &mut |asm, t| add_tensor(asm, t, None, role))
    }

    /// The properties of `input`: one-element FLOAT, INT64 or STRING tensors (ORT's rule). Their
    /// values go to the index, not to the value buffer.
    fn properties(&mut self, input: &mut LegacyInput<'_>) -> Result<Vec<(String, PropertyValue)>> {
        let start = self.values.len();
        let mut found = Vec::new();
        let mut values = std::mem::take(&mut self.values);
        let file = input.name.clone();
        let result = self.each_tensor_into(input, &mut values, &mut |_, t, buffer| {
            let value = property_value(t, buffer).map_err(|e| in_file(&file, e))?;
            found.push((t.name.clone(), value));
            Ok(())
        });
        values.truncate(start);
        self.values = values;
        result.map(|()| found)
    }

    fn group(&mut self, name: &str, files: &GroupFiles, inputs: &mut [LegacyInput<'_>]) -> Result<()> {
        let Some(props_at) = files.properties else {
            return Err(Error::BadLegacyFolder {
                detail: format!(
                    "optimizer group {name:?} has momentum files but no optim_{name}_properties.pbseq (its \
                     step and learning rate); the folder is incomplete"
                ),
            });
        };
        let props = self.properties(&mut inputs[props_at])?;
        let file = inputs[props_at].name.clone();
        let (mut lr, mut step) = (None, None);
        for (key, value) in props {
            match (key.as_str(), value) {
                (LEGACY_LR_PROPERTY, PropertyValue::Float(v)) if lr.is_none() => lr = Some(v),
                (LEGACY_STEP_PROPERTY, PropertyValue::Int(v)) if step.is_none() => step = Some(v),
                (LEGACY_LR_PROPERTY | LEGACY_STEP_PROPERTY, _) => {
                    return Err(in_file(
                        &file,
                        Error::BadLegacyFolder {
                            detail: format!(
                                "property {key:?} appears twice or has the wrong type ({LEGACY_LR_PROPERTY} \
                                 is a float, {LEGACY_STEP_PROPERTY} an int64)"
                            ),
                        },
                    ))
                }
                (other, _) => {
                    return Err(in_file(
                        &file,
                        Error::BadLegacyFolder {
                            detail: format!("unexpected optimizer group property {other:?}"),
                        },
                    ))
                }
            }
        }
        let (Some(lr), Some(step)) = (lr, step) else {
            return Err(in_file(
                &file,
                Error::BadLegacyFolder {
                    detail: format!("needs a float property {LEGACY_LR_PROPERTY:?} and an int64 property {LEGACY_STEP_PROPERTY:?}"),
                },
            ));
        };
        // Each momentum file holds one momentum of every parameter, named after the parameter;
        // the index holds each parameter's momentums together. Collect them in a scratch index
        // first (compact: no allocation per tensor), then regroup by parameter.
        let mut pending = Assembler::for_legacy_folder();
        let mut momentum_of: Vec<u32> = Vec::new();
        let mut momentum_names: Vec<&str> = Vec::new();
        for (m, (momentum, &at)) in files.momentums.iter().enumerate() {
            momentum_names.push(momentum);
            std::mem::swap(&mut self.asm, &mut pending);
            let result = self.each_tensor(&mut inputs[at], &mut |asm, t| {
                momentum_of.push(m as u32);
                add_tensor(asm, t, None, Role::Momentum)
            });
            std::mem::swap(&mut self.asm, &mut pending);
            result?;
        }
        let scratch = pending.finish()?;
        let mut order: Vec<usize> = (0..scratch.tensor_count()).collect();
        // Stable: within a parameter, momentums stay in momentum-name order (the file order).
        order.sort_by(|&a, &b| scratch.name_at(a).cmp(scratch.name_at(b)));
        self.asm.begin_group(Some(name), step, lr)?;
        let mut i = 0;
        while i < order.len() {
            let param = scratch.name_at(order[i]);
            self.asm.begin_state(Some(param))?;
            while i < order.len() && scratch.name_at(order[i]) == param {
                let position = order[i];
                let momentum = momentum_names[momentum_of[position] as usize];
                if i > 0
                    && scratch.name_at(order[i - 1]) == param
                    && momentum_of[order[i - 1]] == momentum_of[position]
                {
                    let file = &inputs[files.momentums[momentum]].name;
                    return Err(in_file(
                        file,
                        Error::DuplicateName { kind: "parameter", name: param.to_owned() },
                    ));
                }
                let Some(t) = scratch.tensor(position) else { break };
                let (raw_data, string_count) = match t.storage {
                    Storage::Inline { offset, len, .. } => (RawData::Read { offset, len }, 0),
                    Storage::Strings(s) => (RawData::Absent, s.len()),
                    _ => (RawData::Absent, 0),
                };
                let fields = TensorFields {
                    name: Some(momentum),
                    doc_string: None,
                    dims: t.dims,
                    data_type: t.data_type.code(),
                    raw_data,
                    string_count,
                    external_data_offset: -1,
                };
                self.asm.tensor(&fields, Role::Momentum, &mut |out| {
                    if let Storage::Strings(s) = t.storage {
                        out.extend_from_slice(s);
                    }
                    Ok(())
                })?;
                i += 1;
            }
            self.asm.end_state()?;
        }
        self.asm.end_group()
    }
}

/// Adds the decoded tensor `t` to `asm`, named `rename` or its own name.
fn add_tensor(asm: &mut Assembler, t: &mut TensorProto, rename: Option<&str>, role: Role) -> Result<()> {
    let (raw_data, string_count) = match &t.values {
        Some(Values::Bytes(r)) => (RawData::Read { offset: r.start, len: r.len() }, 0),
        Some(Values::Strings) => (RawData::Absent, t.strings.len()),
        _ => (RawData::Absent, 0),
    };
    let fields = TensorFields {
        name: Some(rename.unwrap_or(&t.name)),
        doc_string: None,
        dims: &t.dims,
        data_type: t.data_type,
        raw_data,
        string_count,
        external_data_offset: -1,
    };
    let strings = &mut t.strings;
    asm.tensor(&fields, role, &mut |out| {
        out.append(strings);
        Ok(())
    })
}

/// A property's value: the decoded tensor `t` (values in `buffer`), which must be one FLOAT,
/// INT64 or STRING value.
fn property_value(t: &TensorProto, buffer: &[u8]) -> Result<PropertyValue> {
    let name = &t.name;
    let wrong = |detail: String| Error::BadLegacyFolder { detail: format!("property {name:?} {detail}") };
    let data_type = DataType::from_code(t.data_type)
        .ok_or_else(|| Error::UnknownDataType { tensor: name.clone(), code: t.data_type })?;
    let count = crate::shape::element_count(name, &t.dims)?;
    if !matches!(data_type, DataType::Float | DataType::Int64 | DataType::String) {
        return Err(wrong(format!(
            "has data type {}; properties are float, int64 or string scalars",
            data_type.name()
        )));
    }
    if count != 1 {
        return Err(wrong(format!("holds {count} values; properties are scalars")));
    }
    let bytes = match &t.values {
        Some(Values::Bytes(r)) => buffer.get(r.clone()).unwrap_or_default(),
        _ => &[],
    };
    let missing = || {
        wrong(format!(
            "has {} bytes of data; one {} needs {}",
            bytes.len(),
            data_type.name(),
            data_type.element_size().unwrap_or(0)
        ))
    };
    match data_type {
        DataType::Float => {
            let b: [u8; 4] = bytes.try_into().map_err(|_| missing())?;
            Ok(PropertyValue::Float(f32::from_le_bytes(b)))
        }
        DataType::Int64 => {
            let b: [u8; 8] = bytes.try_into().map_err(|_| missing())?;
            Ok(PropertyValue::Int(i64::from_le_bytes(b)))
        }
        _ => match t.strings.as_slice() {
            [s] => Ok(PropertyValue::Str(s.clone())),
            other => Err(wrong(format!("holds {} strings; properties are scalars", other.len()))),
        },
    }
}
