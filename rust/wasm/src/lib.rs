//! ortckpt in the browser: the core's reader, writer and checks on bytes held in memory, exported
//! to JavaScript with wasm-bindgen (no files, no mmap; the core is built without its `fs` layer).
//!
//! * [`Checkpoint::open`] verifies a checkpoint (and its external data, when given) exactly as the
//!   Python wheel does, through `LoadedCheckpoint`; then `tensors()`, `values(i)`, `stats(i)`,
//!   `properties()` and `optimizerGroups()` read it.
//! * [`diff_checkpoints`] compares two checkpoints tensor by tensor (`diff.rs`).
//! * [`CheckpointBuilder`] collects tensors, optimizer state and properties and serializes them
//!   with the core's writer (`builder.rs`).
//!
//! Every failure is a JavaScript `Error` named `CheckpointError` whose message is the core's and
//! whose `kind` is the core's `ErrorKind`.

mod builder;
mod diff;
mod js;
mod numbers;
mod stats;

use ortckpt_core::{CheckpointBytes, LoadedCheckpoint, ParamKind, PropertyValue, Storage};
use wasm_bindgen::prelude::*;

pub use builder::CheckpointBuilder;
use js::{array, core_error, dtype_name, int, object};

#[wasm_bindgen(typescript_custom_section)]
const TYPES: &'static str = r#"
/** One tensor of a checkpoint: a parameter or one optimizer-state (momentum) tensor. */
export interface TensorInfo {
  /** Position in the checkpoint: what values(), stats() take. */
  index: number;
  /** The tensor's own name (for optimizer state: e.g. "momentum0"). */
  name: string;
  /** A parameter's name; "group/parameter/momentum" for optimizer state. */
  key: string;
  kind: "trainable" | "frozen" | "optimizer";
  /** Optimizer state only: its group and parameter. */
  group: string | null;
  param: string | null;
  /** numpy / ml_dtypes spelling: "float32", "bfloat16", "int64", "string", ... */
  dtype: string;
  shape: number[];
  /** Number of elements (the product of the shape). */
  size: number;
  storage: "inline" | "external" | "strings" | "nominal";
  docString: string;
}
export interface CheckpointProperty { name: string; type: "int" | "float" | "string"; value: number | bigint | string; }
export interface OptimizerState { param: string; momentums: number[]; }
export interface OptimizerGroup { name: string; step: number | bigint; initialLearningRate: number; states: OptimizerState[]; }
/** Statistics of the finite values; NaN and infinities are counted apart (see docs/viewer.md). */
export interface TensorStats {
  count: number; finite: number; nan: number; posInf: number; negInf: number;
  min: number; max: number; mean: number; std: number;
  /** numpy's np.histogram(finite, bins, range=(min, max)): bins + 1 edges, bins counts. */
  edges: number[]; counts: number[];
}
export interface TensorChange {
  section: "parameter" | "optimizer"; key: string;
  status: "same" | "changed" | "added" | "removed" | "dtype" | "shape";
  changedElements: number; maxAbsDiff: number; relL2: number;
}
/** Exact values: integer arrays by width (BigInt arrays for 64-bit), Uint8Array of 0/1 for bool,
 * Float64Array for float64, Float32Array for float32 and the narrower floats (float16, bfloat16,
 * float8 widened exactly), complex interleaved (re, im); string[] for strings; null when nominal. */
export type TensorValues = Int8Array | Uint8Array | Int16Array | Uint16Array | Int32Array | Uint32Array
  | BigInt64Array | BigUint64Array | Float32Array | Float64Array | string[] | null;
"#;

/// A checkpoint's bytes copied into wasm memory, never changed: nothing to re-check before use.
struct Held(Box<[u8]>);

impl CheckpointBytes for Held {
    fn raw(&self) -> (*const u8, usize) {
        (self.0.as_ptr(), self.0.len())
    }
}

/// Where a tensor sits: its list and, for optimizer state, its group and parameter.
struct Row<'a> {
    position: usize,
    kind: &'static str,
    group: Option<&'a str>,
    param: Option<&'a str>,
}

impl Row<'_> {
    fn key(&self, name: &str) -> String {
        match (self.group, self.param) {
            (Some(g), Some(p)) => format!("{g}/{p}/{name}"),
            _ => name.to_owned(),
        }
    }
}

/// A verified checkpoint held in wasm memory.
#[wasm_bindgen]
pub struct Checkpoint {
    loaded: LoadedCheckpoint<Held>,
}

#[wasm_bindgen]
impl Checkpoint {
    /// Verifies `bytes` as a checkpoint; `external` holds its external data file's bytes (needed
    /// when the checkpoint has external data), `externalName` names that file in the error when it
    /// is missing. Throws a `CheckpointError` with the core's message.
    pub fn open(
        bytes: Box<[u8]>,
        external: Option<Box<[u8]>>,
        #[wasm_bindgen(js_name = externalName)] external_name: Option<String>,
    ) -> Result<Checkpoint, JsValue> {
        let name = external_name.unwrap_or_else(|| "(the second argument of Checkpoint.open)".to_owned());
        let loaded =
            LoadedCheckpoint::new(Held(bytes), external.map(Held), Some(&name)).map_err(core_error)?;
        Ok(Checkpoint { loaded })
    }

    /// The format version (1 or 2).
    #[wasm_bindgen(getter)]
    pub fn version(&self) -> i32 {
        self.loaded.index().version
    }

    /// Whether the checkpoint is nominal (names and types, no values).
    #[wasm_bindgen(getter, js_name = isNominal)]
    pub fn is_nominal(&self) -> bool {
        self.loaded.index().is_nominal
    }

    /// Whether some tensor's values are in the external data file.
    #[wasm_bindgen(getter, js_name = hasExternalData)]
    pub fn has_external_data(&self) -> bool {
        self.loaded.index().has_external_data
    }

    /// Every tensor: parameters (trainable, then frozen), then optimizer state.
    #[wasm_bindgen(unchecked_return_type = "TensorInfo[]")]
    pub fn tensors(&self) -> JsValue {
        array(self.rows().iter().filter_map(|row| {
            let t = self.loaded.index().tensor(row.position)?;
            let storage = match t.storage {
                Storage::Inline { .. } => "inline",
                Storage::External { .. } => "external",
                Storage::Strings(_) => "strings",
                Storage::Nominal => "nominal",
            };
            let size = t.dims.iter().try_fold(1i64, |n, &d| n.checked_mul(d)).map_or(JsValue::NULL, int);
            let opt = |s: Option<&str>| s.map_or(JsValue::NULL, JsValue::from);
            Some(object(&[
                ("index", JsValue::from(row.position as u32)),
                ("name", t.name.into()),
                ("key", row.key(t.name).into()),
                ("kind", row.kind.into()),
                ("group", opt(row.group)),
                ("param", opt(row.param)),
                ("dtype", dtype_name(t.data_type).into()),
                ("shape", array(t.dims.iter().map(|&d| int(d)))),
                ("size", size),
                ("storage", storage.into()),
                ("docString", t.doc_string.into()),
            ]))
        }))
    }

    /// The values of the tensor at `index` (see `TensorValues`); throws for a bad index.
    #[wasm_bindgen(unchecked_return_type = "TensorValues")]
    pub fn values(&self, index: usize) -> Result<JsValue, JsValue> {
        let t = self.tensor(index)?;
        if let Storage::Strings(strings) = t.storage {
            return Ok(array(strings.iter().map(|s| JsValue::from(s.as_str()))));
        }
        Ok(match self.bytes(index)? {
            Some(bytes) => js::typed_array(t.data_type, bytes),
            None => JsValue::NULL,
        })
    }

    /// Statistics and a `bins`-bin histogram of the tensor at `index`; null for strings, complex
    /// numbers and nominal tensors.
    #[wasm_bindgen(unchecked_return_type = "TensorStats | null")]
    pub fn stats(&self, index: usize, bins: usize) -> Result<JsValue, JsValue> {
        let t = self.tensor(index)?;
        let Some(bytes) = self.bytes(index)? else { return Ok(JsValue::NULL) };
        if !numbers::is_real(t.data_type) {
            return Ok(JsValue::NULL);
        }
        let s = stats::summarize(&|each| numbers::for_each(t.data_type, bytes, each), bins);
        let count = |n: usize| JsValue::from_f64(n as f64);
        Ok(object(&[
            ("count", count(s.count)),
            ("finite", count(s.finite)),
            ("nan", count(s.nan)),
            ("posInf", count(s.pos_inf)),
            ("negInf", count(s.neg_inf)),
            ("min", s.min.into()),
            ("max", s.max.into()),
            ("mean", s.mean.into()),
            ("std", s.std.into()),
            ("edges", array(s.edges.iter().map(|&e| JsValue::from_f64(e)))),
            ("counts", array(s.counts.iter().map(|&c| JsValue::from(c)))),
        ]))
    }

    /// The properties, in file order.
    #[wasm_bindgen(unchecked_return_type = "CheckpointProperty[]")]
    pub fn properties(&self) -> JsValue {
        array(self.loaded.index().properties.iter().map(|p| {
            let (kind, value) = match &p.value {
                PropertyValue::Int(v) => ("int", int(*v)),
                PropertyValue::Float(v) => ("float", JsValue::from_f64(f64::from(*v))),
                PropertyValue::Str(s) => ("string", s.as_str().into()),
            };
            object(&[("name", p.name.as_str().into()), ("type", kind.into()), ("value", value)])
        }))
    }

    /// The optimizer groups; each state lists its momentum tensors' indices.
    #[wasm_bindgen(js_name = optimizerGroups, unchecked_return_type = "OptimizerGroup[]")]
    pub fn optimizer_groups(&self) -> JsValue {
        array(self.loaded.index().optimizer_groups.iter().map(|g| {
            let states = array(g.states.iter().map(|s| {
                let momentums = array(s.momentums.clone().map(|i| JsValue::from(i as u32)));
                object(&[("param", s.param_name.as_str().into()), ("momentums", momentums)])
            }));
            object(&[
                ("name", g.name.as_str().into()),
                ("step", int(g.step)),
                ("initialLearningRate", JsValue::from_f64(f64::from(g.initial_learning_rate))),
                ("states", states),
            ])
        }))
    }
}

impl Checkpoint {
    fn tensor(&self, index: usize) -> Result<ortckpt_core::TensorRef<'_>, JsValue> {
        let count = self.loaded.index().tensor_count();
        self.loaded.index().tensor(index).ok_or_else(|| {
            js::error(&format!("no tensor at index {index}: the checkpoint has {count}"), "IndexError")
        })
    }

    /// The element bytes of the tensor at `index` (`None` for strings and nominal tensors).
    fn bytes(&self, index: usize) -> Result<Option<&[u8]>, JsValue> {
        self.loaded.prepare(index).map_err(core_error)?;
        Ok(self.loaded.values(index).map(|v| {
            // SAFETY: `values` returns a range inside a buffer `self.loaded` owns (checked against
            // its length); the boxed bytes never change and live as long as `&self`.
            unsafe { std::slice::from_raw_parts(v.data, v.len) }
        }))
    }

    /// Every tensor's list, group and parameter, in the order `tensors()` gives them.
    fn rows(&self) -> Vec<Row<'_>> {
        let index = self.loaded.index();
        let mut rows: Vec<Row<'_>> = (0..index.parameter_count())
            .map(|position| {
                let kind = match index.param_kind(position) {
                    Some(ParamKind::Frozen) => "frozen",
                    _ => "trainable",
                };
                Row { position, kind, group: None, param: None }
            })
            .collect();
        for g in &index.optimizer_groups {
            for s in &g.states {
                rows.extend(s.momentums.clone().map(|position| Row {
                    position,
                    kind: "optimizer",
                    group: Some(g.name.as_str()),
                    param: Some(s.param_name.as_str()),
                }));
            }
        }
        rows
    }

    fn entries(&self) -> Result<Vec<diff::Entry<'_>>, JsValue> {
        let mut out = Vec::new();
        for row in self.rows() {
            let t = self.tensor(row.position)?;
            let payload = match (t.storage, self.bytes(row.position)?) {
                (Storage::Strings(s), _) => diff::Payload::Strings(s),
                (_, Some(bytes)) => diff::Payload::Bytes(bytes),
                (_, None) => diff::Payload::Nominal,
            };
            let section = if row.group.is_some() { "optimizer" } else { "parameter" };
            let key = row.key(t.name);
            out.push(diff::Entry { section, key, data_type: t.data_type, dims: t.dims, payload });
        }
        Ok(out)
    }
}

/// Compares `a` with `b` tensor by tensor: which changed, by how much, which were added or removed.
#[wasm_bindgen(js_name = diffCheckpoints, unchecked_return_type = "TensorChange[]")]
pub fn diff_checkpoints(a: &Checkpoint, b: &Checkpoint) -> Result<JsValue, JsValue> {
    let changes = diff::diff(&a.entries()?, &b.entries()?);
    Ok(array(changes.into_iter().map(|c| {
        object(&[
            ("section", c.section.into()),
            ("key", c.key.into()),
            ("status", c.status.into()),
            ("changedElements", JsValue::from_f64(c.changed_elements as f64)),
            ("maxAbsDiff", c.max_abs_diff.into()),
            ("relL2", c.rel_l2.into()),
        ])
    })))
}
