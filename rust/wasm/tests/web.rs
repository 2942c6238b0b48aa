//! The JavaScript API in headless Chromium (wasm-bindgen-test-runner + chromedriver; see
//! scripts/build_web.sh). Expected values come from the corpus manifests ORT's own bindings wrote
//! (tests/data/corpus/*.json), parsed with the browser's JSON.
#![cfg(target_arch = "wasm32")]

use js_sys::{Array, Float32Array, Reflect, JSON};
use ortckpt_wasm::{diff_checkpoints, Checkpoint, CheckpointBuilder};
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

const ADAMW: &[u8] = include_bytes!("../../../tests/data/corpus/ort_adamw_with_optimizer.ckpt");
const ADAMW_JSON: &str = include_str!("../../../tests/data/corpus/ort_adamw_with_optimizer.json");
const DTYPES: &[u8] = include_bytes!("../../../tests/data/dtypes.ckpt");

fn get(v: &JsValue, key: &str) -> JsValue {
    Reflect::get(v, &key.into()).unwrap()
}

fn items(v: &JsValue) -> Vec<JsValue> {
    Array::from(v).iter().collect()
}

fn by_key(tensors: &JsValue, key: &str) -> JsValue {
    items(tensors).into_iter().find(|t| get(t, "key").as_string().as_deref() == Some(key)).unwrap()
}

fn index(t: &JsValue) -> usize {
    get(t, "index").as_f64().unwrap() as usize
}

#[wasm_bindgen_test]
fn every_parameter_and_momentum_equals_the_manifest() {
    let c = Checkpoint::open(ADAMW.into(), None, None).unwrap();
    let manifest = JSON::parse(ADAMW_JSON).unwrap();
    let tensors = c.tensors();
    assert_eq!(c.version(), 2);
    let mut seen = 0;
    for (list, kind) in [("requires_grad_params", "trainable"), ("frozen_params", "frozen")] {
        for p in items(&get(&manifest, list)) {
            let name = get(&p, "name").as_string().unwrap();
            let t = by_key(&tensors, &name);
            assert_eq!(get(&t, "kind").as_string().unwrap(), kind);
            assert_eq!(get(&t, "dtype").as_string().unwrap(), "float32");
            assert_eq!(
                JSON::stringify(&get(&t, "shape")).unwrap(),
                JSON::stringify(&get(&p, "dims")).unwrap()
            );
            let values: Float32Array = c.values(index(&t)).unwrap().dyn_into().unwrap();
            let expected: Vec<f32> =
                items(&get(&p, "values")).iter().map(|v| v.as_f64().unwrap() as f32).collect();
            assert_eq!(values.to_vec(), expected, "{name}");
            seen += 1;
        }
    }
    for g in items(&get(&manifest, "optimizer_groups")) {
        let group = get(&g, "group_name").as_string().unwrap();
        for s in items(&get(&g, "optimizer_states")) {
            let param = get(&s, "param_name").as_string().unwrap();
            for m in items(&get(&s, "momentums")) {
                let key = format!("{group}/{param}/{}", get(&m, "name").as_string().unwrap());
                let t = by_key(&tensors, &key);
                assert_eq!(get(&t, "kind").as_string().unwrap(), "optimizer");
                let values: Float32Array = c.values(index(&t)).unwrap().dyn_into().unwrap();
                let expected: Vec<f32> =
                    items(&get(&m, "values")).iter().map(|v| v.as_f64().unwrap() as f32).collect();
                assert_eq!(values.to_vec(), expected, "{key}");
                seen += 1;
            }
        }
    }
    assert_eq!(seen, Array::from(&tensors).length());
    let groups = c.optimizer_groups();
    let group = Array::from(&groups).get(0);
    assert_eq!(get(&group, "step").as_f64(), Some(3.0));
    assert_eq!(get(&group, "initialLearningRate").as_f64(), Some(f64::from(0.001f32)));
    let props: Vec<(String, String)> = items(&c.properties())
        .iter()
        .map(|p| (get(p, "name").as_string().unwrap(), get(p, "type").as_string().unwrap()))
        .collect();
    let expected = [("epoch", "int"), ("best_loss", "float"), ("note", "string")]; // file order
    assert_eq!(props, expected.map(|(a, b)| (a.to_owned(), b.to_owned())));
}

#[wasm_bindgen_test]
fn values_come_as_the_typed_array_of_their_type() {
    let c = Checkpoint::open(DTYPES.into(), None, None).unwrap();
    let tensors = c.tensors();
    let class = |key: &str| {
        let v = c.values(index(&by_key(&tensors, key))).unwrap();
        get(&get(&v, "constructor"), "name").as_string().unwrap()
    };
    for (key, expected) in [
        ("f.i8", "Int8Array"),
        ("f.u8", "Uint8Array"),
        ("f.i16", "Int16Array"),
        ("f.u16", "Uint16Array"),
        ("f.i32", "Int32Array"),
        ("f.u32", "Uint32Array"),
        ("f.i64", "BigInt64Array"),
        ("f.u64", "BigUint64Array"),
        ("f.bool", "Uint8Array"),
        ("w.f32", "Float32Array"),
        ("w.f64", "Float64Array"),
    ] {
        assert_eq!(class(key), expected, "{key}");
    }
    let stats = c.stats(index(&by_key(&tensors, "f.f32.special")), 10).unwrap();
    assert!(get(&stats, "nan").as_f64().unwrap() >= 1.0);
    assert!(get(&stats, "posInf").as_f64().unwrap() + get(&stats, "negInf").as_f64().unwrap() >= 1.0);
}

#[wasm_bindgen_test]
fn malformed_bytes_throw_the_core_error() {
    for bytes in [&b""[..], &b"not a checkpoint at all, just text"[..], &ADAMW[..ADAMW.len() / 2]] {
        let Err(e) = Checkpoint::open(bytes.into(), None, None) else {
            panic!("opened {} bytes", bytes.len())
        };
        let e: js_sys::Error = e.dyn_into().unwrap();
        assert_eq!(e.name(), "CheckpointError");
        assert!(get(&e, "kind").as_string().is_some());
        assert!(!String::from(e.message()).is_empty());
    }
    let c = Checkpoint::open(ADAMW.into(), None, None).unwrap();
    assert!(c.values(1000).is_err());
}

#[wasm_bindgen_test]
fn a_built_checkpoint_reads_back_and_diffs() {
    let build = |w: &[f32]| {
        let mut b = CheckpointBuilder::new();
        let w = Float32Array::from(w);
        b.add_parameter("w".into(), "float32", vec![2.0, 2.0], w.clone().into(), true).unwrap();
        b.add_parameter(
            "b".into(),
            "int64",
            vec![2.0],
            js_sys::BigInt64Array::from(&[1i64, -2][..]).into(),
            false,
        )
        .unwrap();
        b.add_optimizer_group("group0".into(), 5.0, 0.5).unwrap();
        b.add_momentum("group0", "w", "momentum0".into(), "float32", vec![2.0, 2.0], w.into()).unwrap();
        b.add_int_property("epoch".into(), 5.0).unwrap();
        b.add_string_property("note".into(), "hi".into());
        Checkpoint::open(b.to_bytes().unwrap().into(), None, None).unwrap()
    };
    let a = build(&[1.0, 2.0, 3.0, 4.0]);
    let b = build(&[1.0, 2.0, 3.0, 6.0]);
    let ta = a.tensors();
    let w: Float32Array = a.values(index(&by_key(&ta, "w"))).unwrap().dyn_into().unwrap();
    assert_eq!(w.to_vec(), [1.0, 2.0, 3.0, 4.0]);
    assert_eq!(get(&by_key(&ta, "b"), "kind").as_string().unwrap(), "frozen");
    let changes = items(&diff_checkpoints(&a, &b).unwrap());
    let status: Vec<(String, String)> = changes
        .iter()
        .map(|c| (get(c, "key").as_string().unwrap(), get(c, "status").as_string().unwrap()))
        .collect();
    let expected = [("w", "changed"), ("b", "same"), ("group0/w/momentum0", "changed")];
    assert_eq!(status, expected.map(|(k, s)| (k.to_owned(), s.to_owned())));
    assert_eq!(get(&changes[0], "maxAbsDiff").as_f64(), Some(2.0));
    // The core's validation: values that do not fill the shape.
    let mut bad = CheckpointBuilder::new();
    bad.add_parameter("w".into(), "float32", vec![3.0], Float32Array::from(&[1.0f32][..]).into(), true)
        .unwrap();
    let e: js_sys::Error = bad.to_bytes().unwrap_err().dyn_into().unwrap();
    assert!(String::from(e.message()).contains("\"w\""), "{}", String::from(e.message()));
}
