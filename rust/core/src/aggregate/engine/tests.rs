//! The round against the arithmetic it stands for: uploads added one at a time, in batches, as
//! files or as bytes, and split across "cluster tasks" (screening rounds, portables and range
//! passes) all give the same verdicts and aggregate.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::*;
use crate::aggregate::structure::{ExpectedParam, MAX_WEIGHT};
use crate::test_support::bytes_tensor;
use crate::DataType;

const LANES: [usize; 2] = [300, 7];

fn layout() -> Layout {
    let params = LANES
        .iter()
        .enumerate()
        .map(|(i, &n)| ExpectedParam {
            name: format!("t{i}"),
            trainable: true,
            data_type: DataType::Float,
            dims: vec![n as i64],
        })
        .collect();
    Layout { params, momentums: Vec::new() }
}

/// A checkpoint whose values are `f(tensor, lane)`.
fn checkpoint(f: impl Fn(usize, usize) -> f32) -> Vec<u8> {
    let values: Vec<Vec<u8>> = LANES
        .iter()
        .enumerate()
        .map(|(t, &n)| (0..n).flat_map(|i| f(t, i).to_le_bytes()).collect())
        .collect();
    let trainable = values
        .iter()
        .enumerate()
        .map(|(t, v)| bytes_tensor(&format!("t{t}"), DataType::Float, &[LANES[t] as i64], v))
        .collect();
    crate::serialize_checkpoint(&crate::CheckpointSpec { trainable, ..Default::default() }).unwrap()
}

fn file(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

fn value(k: usize) -> impl Fn(usize, usize) -> f32 {
    move |t, i| ((i * 13 + t * 7 + k * 31) % 97) as f32 * 0.25 - 12.0 + k as f32
}

fn upload(path: &Path, label: &str, weight: f64, staleness: u64) -> FileUpload {
    FileUpload { path: path.to_path_buf(), rule: WeightRule::Given(weight), label: label.into(), staleness }
}

fn words(verdicts: &[Verdict]) -> Vec<String> {
    verdicts
        .iter()
        .map(|v| match v {
            Verdict::Accepted { weight } => format!("accepted {weight}"),
            Verdict::Duplicate { first } => format!("duplicate of {first}"),
            Verdict::Rejected(r) => r.kind.code().to_string(),
            Verdict::Unreadable(_) => "unreadable".into(),
        })
        .collect()
}

fn shared(bytes: Vec<u8>) -> Shared {
    Arc::new(bytes)
}

#[test]
fn uploads_one_at_a_time_as_files_or_bytes_give_the_batch_s_sums() {
    let dir = tempfile::tempdir().unwrap();
    let paths: Vec<PathBuf> =
        (0..6).map(|k| file(dir.path(), &format!("u{k}.ckpt"), &checkpoint(value(k)))).collect();
    let uploads: Vec<FileUpload> =
        paths.iter().enumerate().map(|(k, p)| upload(p, &format!("c{k}"), 1.0 + k as f64, 0)).collect();
    let mut batch = Round::new(layout(), Options::fedavg(), Staleness::default()).unwrap();
    let batch_words = words(&batch.add_files(&uploads).unwrap());
    let batch = batch.finish().unwrap();
    let mut one = Round::new(layout(), Options::fedavg(), Staleness::default()).unwrap();
    let mut bytes = Round::new(layout(), Options::fedavg(), Staleness::default()).unwrap();
    for (k, u) in uploads.iter().enumerate() {
        assert_eq!(words(&one.add_files(std::slice::from_ref(u)).unwrap()), vec![batch_words[k].clone()]);
        let v = bytes.add_bytes(shared(std::fs::read(&u.path).unwrap()), None, &u.rule, &u.label, None, 0);
        assert_eq!(words(&[v]), vec![batch_words[k].clone()]);
    }
    let (one, bytes) = (one.finish().unwrap(), bytes.finish().unwrap());
    assert_eq!(one.values.slots(&one.lanes), batch.values.slots(&batch.lanes));
    assert_eq!(bytes.values.slots(&bytes.lanes), batch.values.slots(&batch.lanes));
    // the arithmetic: sum(w * v) / sum(w), in float64
    let total: f64 = (0..6).map(|k| 1.0 + k as f64).sum();
    for (lane, got) in batch.means()[0].iter().enumerate() {
        let want: f64 = (0..6).map(|k| (1.0 + k as f64) * f64::from(value(k)(0, lane))).sum::<f64>() / total;
        assert!((got - want).abs() <= 1e-12 * want.abs().max(1.0), "lane {lane}: {got} vs {want}");
    }
}

#[test]
fn the_same_upload_twice_counts_once_and_names_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = checkpoint(value(1));
    let path = file(dir.path(), "a.ckpt", &bytes);
    std::os::unix::fs::symlink(&path, dir.path().join("link.ckpt")).unwrap();
    for options in [Options::fedavg(), Options { method: Method::Median, ..Options::fedavg() }] {
        let mut round = Round::new(layout(), options, Staleness::default()).unwrap();
        let got = round
            .add_files(&[
                upload(&path, "first", 1.0, 0),
                upload(&dir.path().join("link.ckpt"), "again", 1.0, 0),
            ])
            .unwrap();
        assert_eq!(words(&got), ["accepted 1", "duplicate of first"]);
        let twice = [
            round.add_bytes(shared(bytes.clone()), None, &WeightRule::Given(1.0), "b1", None, 0),
            round.add_bytes(shared(bytes.clone()), None, &WeightRule::Given(1.0), "b2", None, 0),
        ];
        assert_eq!(words(&twice), ["accepted 1", "duplicate of b1"]);
    }
}

#[test]
fn staleness_discounts_by_fedbuff_s_formula_and_the_cut_off_rejects() {
    let dir = tempfile::tempdir().unwrap();
    let paths: Vec<PathBuf> =
        (0..3).map(|k| file(dir.path(), &format!("u{k}.ckpt"), &checkpoint(value(k)))).collect();
    let rule = Staleness { exponent: 0.5, cutoff: Some(10) };
    let mut round = Round::new(layout(), Options::fedavg(), rule).unwrap();
    let got = round
        .add_files(&[
            upload(&paths[0], "a", 2.0, 0),
            upload(&paths[1], "b", 2.0, 3),
            upload(&paths[2], "c", 2.0, 11),
        ])
        .unwrap();
    assert_eq!(words(&got), ["accepted 2", &format!("accepted {}", 2.0 / 2.0), "stale"]);
    let other = Staleness { exponent: 1.5, cutoff: None };
    assert_eq!(other.discount(7).unwrap(), 8f64.powf(-1.5));
    assert!(Round::new(layout(), Options::fedavg(), Staleness { exponent: f64::NAN, cutoff: None }).is_err());
}

#[test]
fn weights_past_the_bounds_are_rejected_not_summed() {
    // A weight above MAX_WEIGHT (2^64) could make the total infinite and zero the aggregate.
    let dir = tempfile::tempdir().unwrap();
    let small = |_: usize, _: usize| 0.001f32;
    let paths: Vec<PathBuf> =
        (0..3).map(|k| file(dir.path(), &format!("u{k}.ckpt"), &checkpoint(small))).collect();
    for options in [Options::fedavg(), Options { method: Method::Median, ..Options::fedavg() }] {
        let mut round = Round::new(layout(), options.clone(), Staleness::default()).unwrap();
        let got = round
            .add_files(&[
                upload(&paths[0], "a", MAX_WEIGHT, 0),
                upload(&paths[1], "b", 1e308, 0),
                upload(&paths[2], "c", f64::NAN, 0),
            ])
            .unwrap();
        let kinds: Vec<String> =
            words(&got).into_iter().map(|w| w.split(' ').next().unwrap_or("").to_string()).collect();
        assert_eq!(kinds, ["accepted", "weight", "weight"], "{options:?}");
        let done = round.finish().unwrap();
        assert!(done.means().concat().iter().all(|v| (v - 0.001f32 as f64).abs() < 1e-9), "{options:?}");
    }
}

#[test]
fn too_few_uploads_for_the_method_is_an_aggregation_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = file(dir.path(), "a.ckpt", &checkpoint(value(0)));
    let bulyan = Options { method: Method::Bulyan { byzantine: 1 }, ..Options::fedavg() };
    let mut round = Round::new(layout(), bulyan, Staleness::default()).unwrap();
    round.add_files(&[upload(&path, "a", 1.0, 0)]).unwrap();
    let err = round.finish().err().unwrap().error;
    assert!(matches!(err, Error::Aggregation { .. }));
    assert!(err.to_string().contains("4 * byzantine + 3 = 7"), "{err}");
    let empty = Round::new(layout(), Options::fedavg(), Staleness::default()).unwrap();
    assert!(matches!(empty.finish(), Err(Unfinished { error: Error::Aggregation { .. }, .. })));
}

#[test]
fn partial_rounds_merged_give_the_whole_round() {
    let dir = tempfile::tempdir().unwrap();
    let uploads: Vec<FileUpload> = (0..6)
        .map(|k| upload(&file(dir.path(), &format!("u{k}.ckpt"), &checkpoint(value(k))), "c", 1.0, 0))
        .collect();
    let mut whole = Round::new(layout(), Options::fedavg(), Staleness::default()).unwrap();
    whole.add_files(&uploads).unwrap();
    let mut first = Round::new(layout(), Options::fedavg(), Staleness::default()).unwrap();
    first.add_files(&uploads[..2]).unwrap();
    let mut second = Round::new(layout(), Options::fedavg(), Staleness::default()).unwrap();
    second.add_files(&uploads[2..]).unwrap();
    let mut client = Round::new(layout(), Options::fedavg(), Staleness::default()).unwrap();
    let mut merged = first.into_partial().unwrap();
    merged.merge(&second.into_partial().unwrap()).unwrap();
    client.absorb(&merged).unwrap();
    let (a, b) = (whole.finish().unwrap(), client.finish().unwrap());
    assert_eq!(a.count, b.count);
    for (x, y) in a.means().concat().iter().zip(b.means().concat()) {
        assert!((x - y).abs() <= 1e-12 * x.abs().max(1.0));
    }
    let mut huge = Partial { sums: vec![1e308; 2], bounds: vec![1e308], total_weight: 1.0, count: 1 };
    assert!(matches!(huge.merge(&huge.clone()), Err(Error::Aggregation { .. })));
}

#[test]
fn a_cluster_s_screening_admission_and_range_passes_equal_one_machine() {
    let dir = tempfile::tempdir().unwrap();
    let mut uploads: Vec<FileUpload> = (0..9)
        .map(|k| {
            upload(&file(dir.path(), &format!("u{k}.ckpt"), &checkpoint(value(k))), &format!("c{k}"), 1.0, 0)
        })
        .collect();
    let bad = file(dir.path(), "nan.ckpt", &checkpoint(|t, i| if t == 1 && i == 2 { f32::NAN } else { 1.0 }));
    uploads.insert(4, upload(&bad, "nan", 1.0, 0));
    let lanes = layout().slot_lanes();
    let total: usize = lanes.iter().sum();
    for method in [
        Method::Median,
        Method::TrimmedMean { trim: 0.2 },
        Method::Krum { byzantine: 1 },
        Method::Bulyan { byzantine: 1 },
    ] {
        for clip in [None, Some(40.0)] {
            let options = Options { method, clip_norm: clip, chunk_bytes: 256, ..Options::fedavg() };
            let mut local = Round::new(layout(), options.clone(), Staleness::default()).unwrap();
            let local_words = words(&local.add_files(&uploads).unwrap());
            let local = local.finish().unwrap();
            // two tasks screen half each; the client admits in order; three ranges per pass
            let mut client = Round::new(layout(), options.clone(), Staleness::default()).unwrap();
            let mut remote_words = Vec::new();
            for half in uploads.chunks(5) {
                let mut task = Round::screening(layout(), options.clone(), Staleness::default()).unwrap();
                let verdicts = task.add_files(half).unwrap();
                let mut portables = task.into_portables().into_iter();
                for v in verdicts {
                    remote_words.push(match v {
                        Verdict::Accepted { .. } => client.admit(portables.next().unwrap()).unwrap(),
                        other => other,
                    });
                }
            }
            assert_eq!(words(&remote_words), local_words);
            let spans = [(0, 100), (100, 301), (301, total)];
            let portables = client.remote().to_vec();
            let squares = if clip.is_some() {
                spans
                    .iter()
                    .map(|&s| passes::squares(&portables, None, &lanes, s, 256).unwrap())
                    .fold(vec![0.0; portables.len()], |acc, part| {
                        acc.iter().zip(part).map(|(a, b)| a + b).collect()
                    })
            } else {
                vec![0.0; portables.len()]
            };
            let scale = clip_scale(&squares, clip);
            let mut d = vec![0.0; portables.len() * portables.len()];
            if method.uses_distances() {
                for &s in &spans {
                    let (part, _) = passes::distances(&portables, None, &lanes, s, 256, &scale).unwrap();
                    d.iter_mut().zip(part).for_each(|(a, b)| *a += b);
                }
            }
            let weights = portables.iter().map(|p| p.weight).collect();
            let (plan, scores) = plan_of(&options, weights, scale, &d, 1);
            let mut values = Vec::new();
            let mut gaps = vec![0.0; portables.len()];
            for &s in &spans {
                let r = passes::reduce(&portables, None, &lanes, s, 256, &plan).unwrap();
                values.extend(r.values);
                gaps.iter_mut().zip(r.gaps).for_each(|(a, b)| *a += b);
            }
            let reduced = Reduced::of_cluster(values, gaps);
            let remote = client.finish_remote(reduced, squares, &plan, scores).unwrap();
            if clip.is_none() {
                assert_eq!(
                    remote.values.slots(&remote.lanes),
                    local.values.slots(&local.lanes),
                    "{method:?}"
                );
            } else {
                for (x, y) in remote.means().concat().iter().zip(local.means().concat()) {
                    assert!((x - y).abs() <= 1e-9 * x.abs().max(1.0), "{method:?} clipped: {x} vs {y}");
                }
            }
            let selected = |a: &Aggregate| a.members.iter().map(|m| m.selected).collect::<Vec<_>>();
            assert_eq!(selected(&remote), selected(&local), "{method:?}");
        }
    }
}

#[test]
fn values_checked_where_the_median_reads_them_give_the_checked_round_s_result() {
    // uploads 1 and 4 hold a NaN and an infinity; upload 5 is upload 1 again. These tensors are
    // small: deferring is asked for whatever their size (no other test reads the variable).
    std::env::set_var("ORTCKPT_DEFER_MIN_TENSOR_BYTES", "0");
    let dir = tempfile::tempdir().unwrap();
    let bad = |k: usize, at: (usize, usize), v: f32| {
        let f = value(k);
        move |t, i| if (t, i) == at { v } else { f(t, i) }
    };
    let mut paths: Vec<PathBuf> =
        (0..5).map(|k| file(dir.path(), &format!("u{k}.ckpt"), &checkpoint(value(k)))).collect();
    paths[1] = file(dir.path(), "nan.ckpt", &checkpoint(bad(1, (1, 3), f32::NAN)));
    paths[4] = file(dir.path(), "inf.ckpt", &checkpoint(bad(4, (0, 299), f32::INFINITY)));
    paths.push(paths[1].clone());
    let uploads: Vec<FileUpload> =
        paths.iter().enumerate().map(|(k, p)| upload(p, &format!("c{k}"), 1.0 + k as f64, 0)).collect();
    let median = || Options { method: Method::Median, ..Options::fedavg() };
    let mut checked = Round::new(layout(), median(), Staleness::default()).unwrap();
    let checked_words = words(&checked.add_files(&uploads).unwrap());
    assert_eq!(
        checked_words,
        ["accepted 1", "non-finite", "accepted 3", "accepted 4", "non-finite", "duplicate of c1"]
    );
    let mut deferred = Round::new(layout(), median(), Staleness::default()).unwrap();
    let deferred_words = words(&deferred.add_files_deferring_values(&uploads).unwrap());
    assert_eq!(
        deferred_words,
        ["accepted 1", "accepted 2", "accepted 3", "accepted 4", "accepted 5", "duplicate of c1"]
    );
    assert_eq!(deferred.total_weight(), 15.0);
    let (checked, deferred) = (checked.finish().unwrap(), deferred.finish().unwrap());
    // the two left out at the end (places 1 and 4 among the accepted), as the check names them
    let dropped: Vec<(usize, String)> = deferred
        .dropped
        .iter()
        .map(|(place, r)| (*place, format!("{} {}", r.kind.code(), r.message)))
        .collect();
    assert_eq!(dropped.len(), 2);
    assert_eq!((dropped[0].0, dropped[1].0), (1, 4));
    assert!(dropped[0].1.starts_with("non-finite") && dropped[0].1.contains("t1"), "{dropped:?}");
    assert!(dropped[1].1.contains("t0"), "{dropped:?}");
    assert_eq!((deferred.count, deferred.total_weight), (checked.count, checked.total_weight));
    assert_eq!(deferred.values.slots(&deferred.lanes), checked.values.slots(&checked.lanes));
    assert_eq!(deferred.members, checked.members);
    // a model with float64 tensors is checked at once (its sums' bounds need every value)
    let mut f64_layout = layout();
    f64_layout.params[0].data_type = DataType::Double;
    let mut round = Round::new(f64_layout, median(), Staleness::default()).unwrap();
    assert!(!round.defers_values());
    let _ = round.add_files_deferring_values(&[]).unwrap();
}

#[test]
fn a_plain_median_s_float32_slots_come_rounded_as_the_caller_rounds_them() {
    let dir = tempfile::tempdir().unwrap();
    // six uploads: the median of an even count is a mean of two, which rounding can change
    let paths: Vec<PathBuf> =
        (0..6).map(|k| file(dir.path(), &format!("u{k}.ckpt"), &checkpoint(value(k)))).collect();
    let uploads: Vec<FileUpload> =
        paths.iter().enumerate().map(|(k, p)| upload(p, &format!("c{k}"), 1.0, 0)).collect();
    let round = |options: Options| {
        let mut r = Round::new(layout(), options, Staleness::default()).unwrap();
        r.add_files(&uploads).unwrap();
        r
    };
    for method in [Method::Median, Method::TrimmedMean { trim: 0.2 }] {
        let plain = || Options { method, ..Options::fedavg() };
        let (wide, narrow) =
            (round(plain()).finish().unwrap(), round(plain()).finish_rounding(true).unwrap());
        assert_eq!(wide.members, narrow.members, "{method:?}");
        for (w, n) in wide.values.slots(&wide.lanes).into_iter().zip(narrow.values.slots(&narrow.lanes)) {
            let (Slot::F64(w), Slot::F32(n)) = (w, n) else {
                panic!("{method:?}: a float32 slot not rounded")
            };
            assert_eq!(w.iter().map(|&v| v as f32).collect::<Vec<_>>(), n, "{method:?}");
        }
        // noise is added to the float64 values (the caller rounds them): nothing comes rounded
        let noisy = Options { clip_norm: Some(1e6), noise_multiplier: Some(1e-3), seed: Some(7), ..plain() };
        let done = round(noisy).finish_rounding(true).unwrap();
        assert!(done.values.slots(&done.lanes).iter().all(|s| matches!(s, Slot::F64(_))), "{method:?}");
    }
    // Krum's family keeps float64 values whatever is asked
    let krum = Options { method: Method::Krum { byzantine: 1 }, ..Options::fedavg() };
    let done = round(krum).finish_rounding(true).unwrap();
    assert!(done.values.slots(&done.lanes).iter().all(|s| matches!(s, Slot::F64(_))));
}

/// Files standing for named uploads (a URL's private copy, deleted once counted, so the next copy
/// may take its inode): the verdicts and aggregate of the same bytes given with their names,
/// for FedAvg and the median. The same name twice is a duplicate; a new file in a deleted copy's
/// place, or a local upload, never is; a name whose copy could not be indexed is not recorded.
#[test]
fn named_files_count_as_their_names_not_their_inodes() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = b"not a checkpoint".to_vec();
    let given: Vec<(&str, Vec<u8>)> = vec![
        ("https://h/a", checkpoint(value(1))),
        ("https://h/b", checkpoint(value(2))),
        ("https://h/a", checkpoint(value(1))),
        ("https://h/c", garbage),
        ("https://h/c", checkpoint(value(3))),
    ];
    for options in [Options::fedavg(), Options { method: Method::Median, ..Options::fedavg() }] {
        let mut named = Round::new(layout(), options.clone(), Staleness::default()).unwrap();
        let mut bytes = Round::new(layout(), options, Staleness::default()).unwrap();
        let (mut by_file, mut by_bytes) = (Vec::new(), Vec::new());
        for (k, (name, data)) in given.iter().enumerate() {
            let label = format!("c{k}");
            let path = file(dir.path(), "copy.ckpt", data); // the same path, again and again
            by_file.push(named.add_file_named(&upload(&path, &label, 1.0 + k as f64, 0), name).unwrap());
            std::fs::remove_file(&path).unwrap();
            let rule = WeightRule::Given(1.0 + k as f64);
            let identity = Some(Identity::Named((*name).to_owned()));
            by_bytes.push(bytes.add_bytes(shared(data.clone()), None, &rule, &label, identity, 0));
        }
        let local = file(dir.path(), "local.ckpt", &checkpoint(value(4)));
        by_file.extend(named.add_files(&[upload(&local, "local", 2.0, 0)]).unwrap());
        by_bytes.extend(bytes.add_files(&[upload(&local, "local", 2.0, 0)]).unwrap());
        let got = words(&by_file);
        assert_eq!(
            got,
            ["accepted 1", "accepted 2", "duplicate of c0", "unreadable", "accepted 5", "accepted 2"]
        );
        assert_eq!(got, words(&by_bytes));
        let (named, bytes) = (named.finish().unwrap(), bytes.finish().unwrap());
        assert_eq!(named.values.slots(&named.lanes), bytes.values.slots(&bytes.lanes));
    }
}

#[test]
fn rounded_slots_are_flagged_by_slot_though_an_empty_slot_has_no_segment() {
    // slots 1 and 4 have no lanes, so no segment: the flags of segments 1 and 2 are slots 2 and 3's
    let lanes = [4usize, 0, 2, 1, 0];
    let segments = robust::segments(&lanes, 0, lanes.iter().sum());
    assert_eq!(segments.iter().map(|s| s.slot).collect::<Vec<_>>(), [0, 2, 3]);
    assert_eq!(robust::by_slot(&segments, &[true, false, true]), [true, false, false, true]);
    assert!(robust::by_slot(&[], &[]).is_empty());
}
