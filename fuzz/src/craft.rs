//! Build checkpoint flatbuffers field by field, bypassing the writer, for seeds and repros of
//! shapes `serialize_checkpoint` never writes (external offsets, version 1, doc strings, ...).
//! Field slots follow rust/core/schema/*.fbs (slot = 4 + 2 × field id).

use flatbuffers::{FlatBufferBuilder, TableFinishedWIPOffset, WIPOffset};

type Table = WIPOffset<TableFinishedWIPOffset>;

#[derive(Clone, Debug, Default)]
pub struct RawTensor {
    pub name: Option<String>,
    pub doc_string: Option<String>,
    pub dims: Option<Vec<i64>>,
    pub data_type: i32,
    pub raw: Option<Vec<u8>>,
    pub strings: Option<Vec<String>>,
    /// -1 (the default) is left out.
    pub external_offset: i64,
}

impl RawTensor {
    /// A float tensor with inline zero bytes.
    pub fn floats(name: &str, dims: &[i64]) -> RawTensor {
        let n: i64 = dims.iter().product();
        RawTensor {
            name: Some(name.into()),
            dims: Some(dims.to_vec()),
            data_type: 1,
            raw: Some(vec![0; n as usize * 4]),
            external_offset: -1,
            ..RawTensor::default()
        }
    }

    /// A float tensor whose bytes are at `offset` of the external file.
    pub fn external(name: &str, dims: &[i64], offset: i64) -> RawTensor {
        RawTensor { raw: None, external_offset: offset, ..RawTensor::floats(name, dims) }
    }
}

#[derive(Clone, Debug, Default)]
pub struct RawGroup {
    pub name: Option<String>,
    pub step: i64,
    pub initial_learning_rate: f32,
    pub states: Vec<(Option<String>, Vec<RawTensor>)>,
}

#[derive(Clone, Debug)]
pub struct RawCheckpoint {
    pub version: i32,
    pub module: bool,
    pub nominal: bool,
    pub has_external_data: bool,
    pub trainable: Vec<RawTensor>,
    pub frozen: Vec<RawTensor>,
    pub groups: Vec<RawGroup>,
    pub ints: Vec<(String, i64)>,
    pub floats: Vec<(String, f32)>,
    pub strings: Vec<(String, String)>,
}

impl Default for RawCheckpoint {
    fn default() -> Self {
        RawCheckpoint {
            version: 2,
            module: true,
            nominal: false,
            has_external_data: false,
            trainable: Vec::new(),
            frozen: Vec::new(),
            groups: Vec::new(),
            ints: Vec::new(),
            floats: Vec::new(),
            strings: Vec::new(),
        }
    }
}

fn tensor(fbb: &mut FlatBufferBuilder<'_>, t: &RawTensor) -> Table {
    let name = t.name.as_deref().map(|s| fbb.create_string(s));
    let doc = t.doc_string.as_deref().map(|s| fbb.create_string(s));
    let dims = t.dims.as_deref().map(|d| fbb.create_vector(d));
    let raw = t.raw.as_deref().map(|r| fbb.create_vector(r));
    let strings = t.strings.as_deref().map(|v| {
        let offsets: Vec<_> = v.iter().map(|s| fbb.create_string(s)).collect();
        fbb.create_vector(&offsets)
    });
    let start = fbb.start_table();
    if let Some(o) = name {
        fbb.push_slot_always(4, o);
    }
    if let Some(o) = doc {
        fbb.push_slot_always(6, o);
    }
    if let Some(o) = dims {
        fbb.push_slot_always(8, o);
    }
    fbb.push_slot::<i32>(10, t.data_type, 0);
    if let Some(o) = raw {
        fbb.push_slot_always(12, o);
    }
    if let Some(o) = strings {
        fbb.push_slot_always(14, o);
    }
    fbb.push_slot::<i64>(16, t.external_offset, -1);
    fbb.end_table(start)
}

type Tables<'f> = WIPOffset<flatbuffers::Vector<'f, flatbuffers::ForwardsUOffset<TableFinishedWIPOffset>>>;

fn tensors<'f>(fbb: &mut FlatBufferBuilder<'f>, ts: &[RawTensor]) -> Tables<'f> {
    let offsets: Vec<Table> = ts.iter().map(|t| tensor(fbb, t)).collect();
    fbb.create_vector(&offsets)
}

fn property<V: flatbuffers::Push + Copy>(fbb: &mut FlatBufferBuilder<'_>, name: &str, value: V) -> Table {
    let name = fbb.create_string(name);
    let start = fbb.start_table();
    fbb.push_slot_always(4, name);
    fbb.push_slot_always::<V>(6, value);
    fbb.end_table(start)
}

impl RawCheckpoint {
    pub fn build(&self) -> Vec<u8> {
        let mut fbb = FlatBufferBuilder::new();
        let fbb = &mut fbb;
        let module = self.module.then(|| {
            let trainable = tensors(fbb, &self.trainable);
            let frozen = tensors(fbb, &self.frozen);
            let start = fbb.start_table();
            fbb.push_slot_always(4, trainable);
            fbb.push_slot_always(6, frozen);
            fbb.push_slot::<bool>(8, self.nominal, false);
            fbb.push_slot::<bool>(10, self.has_external_data, false);
            fbb.end_table(start)
        });
        let groups = (!self.groups.is_empty()).then(|| {
            let offsets: Vec<Table> = self
                .groups
                .iter()
                .map(|g| {
                    let states: Vec<Table> = g
                        .states
                        .iter()
                        .map(|(p, ms)| {
                            let p = p.as_deref().map(|s| fbb.create_string(s));
                            let ms = tensors(fbb, ms);
                            let start = fbb.start_table();
                            if let Some(o) = p {
                                fbb.push_slot_always(4, o);
                            }
                            fbb.push_slot_always(6, ms);
                            fbb.end_table(start)
                        })
                        .collect();
                    let states = fbb.create_vector(&states);
                    let name = g.name.as_deref().map(|s| fbb.create_string(s));
                    let start = fbb.start_table();
                    if let Some(o) = name {
                        fbb.push_slot_always(4, o);
                    }
                    fbb.push_slot_always::<i64>(6, g.step);
                    fbb.push_slot_always::<f32>(8, g.initial_learning_rate);
                    fbb.push_slot_always(10, states);
                    fbb.end_table(start)
                })
                .collect();
            fbb.create_vector(&offsets)
        });
        let bag = (!(self.ints.is_empty() && self.floats.is_empty() && self.strings.is_empty())).then(|| {
            let ints: Vec<Table> = self.ints.iter().map(|(n, v)| property(fbb, n, *v)).collect();
            let floats: Vec<Table> = self.floats.iter().map(|(n, v)| property(fbb, n, *v)).collect();
            let strings: Vec<Table> = self
                .strings
                .iter()
                .map(|(n, v)| {
                    let v = fbb.create_string(v);
                    property(fbb, n, v)
                })
                .collect();
            let (ints, floats, strings) =
                (fbb.create_vector(&ints), fbb.create_vector(&floats), fbb.create_vector(&strings));
            let start = fbb.start_table();
            fbb.push_slot_always(4, ints);
            fbb.push_slot_always(6, floats);
            fbb.push_slot_always(8, strings);
            fbb.end_table(start)
        });
        let start = fbb.start_table();
        fbb.push_slot_always::<i32>(4, self.version);
        if let Some(o) = module {
            fbb.push_slot_always(6, o);
        }
        if let Some(o) = groups {
            fbb.push_slot_always(8, o);
        }
        if let Some(o) = bag {
            fbb.push_slot_always(10, o);
        }
        let root = fbb.end_table(start);
        fbb.finish(root, Some("ODTC"));
        fbb.finished_data().to_vec()
    }
}

/// Checkpoints `serialize_checkpoint` does not write, all of which `index_checkpoint` accepts:
/// the seeds in `seeds/index_bytes/` (see `examples/make_seeds.rs`).
pub fn examples() -> Vec<RawCheckpoint> {
    let strings = |name: &str, values: &[&str]| RawTensor {
        name: Some(name.into()),
        dims: Some(vec![values.len() as i64]),
        data_type: 8,
        strings: Some(values.iter().map(|s| s.to_string()).collect()),
        external_offset: -1,
        ..RawTensor::default()
    };
    vec![
        // External data: two float tensors beside small inline ones, and an empty external one.
        RawCheckpoint {
            has_external_data: true,
            trainable: vec![
                RawTensor::external("a", &[16], 0),
                RawTensor::external("b", &[4, 4], 64),
                RawTensor::floats("c", &[3]),
            ],
            frozen: vec![RawTensor::external("e", &[0], 128), strings("s", &["x", "", "✓"])],
            groups: vec![RawGroup {
                name: Some("group0".into()),
                step: 2,
                initial_learning_rate: 1e-3,
                states: vec![(Some("a".into()), vec![RawTensor::external("momentum0", &[16], 192)])],
            }],
            ..RawCheckpoint::default()
        },
        // Version 1, unsorted, a doc string, every property type.
        RawCheckpoint {
            version: 1,
            trainable: vec![
                RawTensor { doc_string: Some("doc".into()), ..RawTensor::floats("z", &[2, 2]) },
                RawTensor::floats("a", &[]),
            ],
            ints: vec![("epoch".into(), -1)],
            floats: vec![("loss".into(), 0.5)],
            strings: vec![("note".into(), "héllo".into())],
            ..RawCheckpoint::default()
        },
        // A nominal checkpoint with dims, and a state without module state.
        RawCheckpoint {
            nominal: true,
            trainable: vec![RawTensor { raw: Some(vec![]), ..RawTensor::floats("w", &[3, 0]) }],
            frozen: vec![RawTensor { strings: Some(vec![]), raw: None, ..strings("s", &[]) }],
            ..RawCheckpoint::default()
        },
        RawCheckpoint { module: false, ints: vec![("only".into(), 1)], ..RawCheckpoint::default() },
    ]
}

/// External tensors a = [0, 16) and b = [12, 28) overlap; an empty one at 8 sorts between them.
pub fn overlap_hidden_by_empty_tensor() -> RawCheckpoint {
    RawCheckpoint {
        has_external_data: true,
        trainable: vec![
            RawTensor::external("a", &[4], 0),
            RawTensor::external("e", &[0], 8),
            RawTensor::external("b", &[4], 12),
        ],
        ..RawCheckpoint::default()
    }
}
