use super::super::columns::{reduce_block, reduce_stored_block};
use super::*;

/// The statistic of each column by sorting it: the reference.
fn by_sorting(x: &[f64], n: usize, stat: Statistic) -> Vec<f64> {
    let c = x.len() / n;
    (0..c)
        .map(|j| {
            let mut col: Vec<f64> = (0..n).map(|r| x[r * c + j]).collect();
            col.sort_by(f64::total_cmp);
            match stat {
                Statistic::Median if n % 2 == 1 => col[n / 2],
                Statistic::Median => (col[n / 2 - 1] + col[n / 2]) / 2.0,
                Statistic::TrimmedMean(cut) => col[cut..n - cut].iter().sum::<f64>() / (n - 2 * cut) as f64,
            }
        })
        .collect()
}

fn check(x: &[f64], n: usize, what: &str) {
    let c = x.len() / n;
    for stat in [
        Statistic::Median,
        Statistic::TrimmedMean(n / 10),
        Statistic::TrimmedMean(0),
        Statistic::TrimmedMean(n / 2 - 1),
    ] {
        let want = by_sorting(x, n, stat);
        let mut got = vec![f64::NAN; c];
        let (mut sq, mut gaps) = (vec![0.0; n], vec![0.0; n]);
        reduce_block(x, n, stat, &mut got, &mut sq, &mut gaps);
        for (j, (g, w)) in got.iter().zip(&want).enumerate() {
            // sums in another order: rounding within n ulps of the column's largest magnitude
            let largest = (0..n).map(|r| x[r * c + j].abs()).fold(0.0, f64::max);
            let close = match stat {
                Statistic::Median => g == w,
                Statistic::TrimmedMean(_) => g == w || (g - w).abs() <= 1e-12 * largest,
            };
            assert!(close, "{what}: n = {n}, {stat:?}, column {j}: {g} instead of {w}");
        }
        for r in 0..n {
            let row = &x[r * c..(r + 1) * c];
            let want_sq: f64 = row.iter().map(|v| v * v).sum();
            let want_gap: f64 = row.iter().zip(&got).map(|(v, a)| (v - a) * (v - a)).sum();
            let near = |got: f64, want: f64| got == want || (got - want).abs() <= 1e-9 * want;
            assert!(near(sq[r], want_sq), "{what}: squares of row {r}: {} instead of {want_sq}", sq[r]);
            assert!(near(gaps[r], want_gap), "{what}: gaps of row {r}: {} instead of {want_gap}", gaps[r]);
        }
    }
}

/// A small deterministic generator (no dependency for tests).
fn noise(seed: u64) -> impl FnMut() -> f64 {
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    move || {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((state >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
    }
}

#[test]
fn counting_selection_equals_sorting_on_any_data() {
    // columns past one tile and not a multiple of the vector width
    for n in [33usize, 64, 127, 128, 257, 1000] {
        let c = 2 * Plan::new(n, Statistic::Median, Rows::F64(&[])).map_or(64, |p| p.width) + 13;
        let mut rnd = noise(n as u64);
        type Shape = Box<dyn Fn(usize, usize, f64) -> f64>;
        let shapes: Vec<(&str, Shape)> = vec![
            ("random", Box::new(|_, _, u| u)),
            ("rows in order", Box::new(|r, j, _| r as f64 * 0.01 + j as f64)),
            ("rows in reverse", Box::new(move |r, _, _| (n - r) as f64)),
            ("constant columns", Box::new(|_, j, _| j as f64 - 7.0)),
            ("three values", Box::new(|r, j, _| ((r * 7 + j) % 3) as f64)),
            ("signed zeros", Box::new(|r, _, _| if r % 2 == 0 { 0.0 } else { -0.0 })),
            // the sample rows hold the extremes: the first brackets miss every rank
            (
                "misleading sample",
                Box::new(move |r, _, u| {
                    if Plan::new(n, Statistic::Median, Rows::F64(&[]))
                        .is_some_and(|p| p.sample_rows.contains(&r))
                    {
                        1e6 * (1.0 + u)
                    } else {
                        u
                    }
                }),
            ),
            (
                "float64 extremes",
                Box::new(|r, _, u| if r % 3 == 0 { f64::MAX / 2048.0 * u } else { f64::MIN_POSITIVE * u }),
            ),
            ("a repeated middle", Box::new(move |r, _, u| if r > n / 4 && r < 3 * n / 4 { 2.5 } else { u })),
        ];
        for (what, shape) in &shapes {
            let x: Vec<f64> = (0..n * c).map(|i| shape(i / c, i % c, rnd())).collect();
            check(&x, n, what);
        }
    }
}

#[test]
fn every_kernel_gives_the_statistics_of_a_sort() {
    // the plain loops (what AVX2 and other CPUs run) and, where the CPU has it, AVX-512:
    // whichever this machine dispatches to, both are checked here, on float64 tiles and on
    // float32 ones (values that float32 holds exactly, so both have the same sort)
    for n in [33usize, 1000] {
        let c = 3 * LANES + 5;
        let mut rnd = noise(7 * n as u64);
        let x: Vec<f64> =
            (0..n * c).map(|i| if i % 5 == 0 { 1.5 } else { f64::from(rnd() as f32) }).collect();
        let stored: Vec<u8> = x.iter().flat_map(|&v| (v as f32).to_le_bytes()).collect();
        for stat in [Statistic::Median, Statistic::TrimmedMean(n / 10)] {
            let want = by_sorting(&x, n, stat);
            for rows in [Rows::F64(&x), Rows::Stored(&stored, Lanes::F32)] {
                let Some(plan) = Plan::new(n, stat, rows) else { panic!("no plan for {n}") };
                let run = |kernel: &str| {
                    let mut got = vec![f64::NAN; c];
                    let group: Vec<(usize, &mut [f64])> = got.chunks_mut(plan.width).enumerate().collect();
                    let float32 = matches!(rows, Rows::Stored(..));
                    match (kernel, float32) {
                        #[cfg(target_arch = "x86_64")]
                        // SAFETY: only asked for when the CPU has AVX-512F (checked below)
                        ("avx512", false) => drop(unsafe { tiles_avx512::<f64>(rows, c, &plan, group) }),
                        #[cfg(target_arch = "x86_64")]
                        // SAFETY: as above
                        ("avx512", true) => drop(unsafe { tiles_avx512::<f32>(rows, c, &plan, group) }),
                        (_, false) => drop(tiles::<f64, Plain>(rows, c, &plan, group)),
                        (_, true) => drop(tiles::<f32, Plain>(rows, c, &plan, group)),
                    }
                    got
                };
                #[cfg(target_arch = "x86_64")]
                let kernels = if std::is_x86_feature_detected!("avx512f") {
                    vec!["plain", "avx512"]
                } else {
                    vec!["plain"]
                };
                #[cfg(not(target_arch = "x86_64"))]
                let kernels = vec!["plain"];
                for kernel in kernels {
                    for (j, (g, w)) in run(kernel).iter().zip(&want).enumerate() {
                        assert!(
                            (g - w).abs() <= 1e-12 * w.abs().max(1.0),
                            "{kernel}, n = {n}, {stat:?}, column {j}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn a_float32_pivot_orders_every_float32_as_the_float64_does() {
    let mut rnd = noise(11);
    let specials = [
        0.0,
        -0.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::from(f32::MAX),
        f64::from(f32::MAX).next_up(),
        f64::from(f32::MIN),
        f64::from(f32::MIN).next_down(),
        f64::MAX,
        -f64::MAX,
        f64::from(f32::MIN_POSITIVE),
        f64::from(f32::from_bits(1)) / 2.0,
        1.5f64.next_up(),
        1.5f64.next_down(),
    ];
    let pivots: Vec<f64> = specials.into_iter().chain((0..2000).map(|_| rnd() * 1e3)).collect();
    let values: Vec<f32> = specials
        .iter()
        .map(|&p| p as f32)
        .chain([1.5, 1.5f32.next_up(), 1.5f32.next_down(), f32::from_bits(1), -f32::from_bits(1)])
        .chain((0..2000).map(|_| (rnd() * 1e3) as f32))
        .filter(|v| v.is_finite())
        .collect();
    for &p in &pivots {
        let q = f32::pivot(p);
        for &v in &values {
            assert_eq!(f64::from(v) < p, v < q, "{v} < {p} (as float32 {q})");
            assert_eq!(f64::from(v) >= p, v >= q, "{v} >= {p} (as float32 {q})");
        }
    }
    assert!(f32::pivot(f64::NAN).is_nan());
}

#[test]
fn float32_tiles_give_what_float64_tiles_of_the_same_values_give() {
    // the results bit for bit; each row's squares and distances to the result within rounding
    for n in [33usize, 100, 1000] {
        let c = 2 * 128 + 21;
        let mut rnd = noise(3 * n as u64);
        type Shape = Box<dyn Fn(usize, usize, f64) -> f32>;
        let shapes: [(&str, Shape); 6] = [
            ("random", Box::new(|_, _, u| u as f32)),
            ("constant columns", Box::new(|_, j, _| j as f32 - 7.0)),
            ("three values", Box::new(|r, j, _| ((r * 7 + j) % 3) as f32)),
            ("signed zeros", Box::new(|r, _, _| if r % 2 == 0 { 0.0 } else { -0.0 })),
            (
                "float32 extremes",
                Box::new(
                    |r, _, u| if r % 3 == 0 { f32::MAX * u as f32 } else { f32::MIN_POSITIVE * u as f32 },
                ),
            ),
            (
                "a repeated middle",
                Box::new(move |r, _, u| if r > n / 4 && r < 3 * n / 4 { 2.5 } else { u as f32 }),
            ),
        ];
        for (what, shape) in &shapes {
            let x32: Vec<f32> = (0..n * c).map(|i| shape(i / c, i % c, rnd())).collect();
            let x: Vec<f64> = x32.iter().map(|&v| f64::from(v)).collect();
            let stored: Vec<u8> = x32.iter().flat_map(|v| v.to_le_bytes()).collect();
            for stat in [Statistic::Median, Statistic::TrimmedMean(n / 10), Statistic::TrimmedMean(0)] {
                let (mut want, mut got) = (vec![0.0; c], vec![0.0; c]);
                let (mut sq64, mut gp64, mut sq32, mut gp32) =
                    (vec![0.0; n], vec![0.0; n], vec![0.0; n], vec![0.0; n]);
                reduce_block(&x, n, stat, &mut want, &mut sq64, &mut gp64);
                reduce_stored_block(&stored, Lanes::F32, n, stat, &mut got, &mut sq32, &mut gp32);
                let first_other =
                    |a: &[f64], b: &[f64]| a.iter().zip(b).position(|(x, y)| x.to_bits() != y.to_bits());
                assert_eq!(first_other(&got, &want), None, "{what}: n = {n}, {stat:?}: results");
                // the diagnostics add up tiles of another width: the same within rounding
                let near =
                    |a: &[f64], b: &[f64]| a.iter().zip(b).all(|(x, y)| (x - y).abs() <= 1e-12 * y.abs());
                assert!(near(&sq32, &sq64), "{what}: n = {n}, {stat:?}: squares");
                assert!(near(&gp32, &gp64), "{what}: n = {n}, {stat:?}: distances");
            }
        }
    }
}
