#!/usr/bin/env bash
# Fuzzes ortckpt-core with cargo-fuzz (libFuzzer + AddressSanitizer) on the stable toolchain.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]     # SECONDS per target, default 60; default: every target
#
# Targets (fuzz/fuzz_targets/): index_bytes (index_checkpoint on arbitrary bytes, then a
# write/read round trip of what it accepts), spec_roundtrip (serialize_checkpoint on arbitrary
# specs, then read back), legacy_folder (the ORT 1.15 folder decoder on arbitrary .pbseq bytes,
# in every role; seeded from tests/data/ort115), adapter_bytes (index_adapter, ORT adapter files,
# on arbitrary bytes, then a write/read round trip), npz (read_npz on arbitrary bytes, within a
# decompression budget) and safetensors_bytes (read_safetensors on arbitrary bytes); and two Python
# targets (fuzz/python/, run by the venv's interpreter in their own process, a crash seen as a
# signal): export_models (hostile eval models given to export_for_inference) and flower_records
# (hostile Flower records and replies given to the decoders and OrtFedAvg.aggregate_train); their
# failures land in fuzz/artifacts/python. The corpus grows in fuzz/corpus/TARGET (not in git); it is seeded from
# tests/data, tests/data/corpus and fuzz/seeds/TARGET. Crashes, timeouts and OOMs land in
# fuzz/artifacts/TARGET and make this script exit non-zero; logs go to fuzz/logs/TARGET.log.
#
# Reproduce or minimize a finding (same environment):
#   RUSTC_BOOTSTRAP=1 cargo fuzz run TARGET fuzz/artifacts/TARGET/crash-...
#   RUSTC_BOOTSTRAP=1 cargo fuzz tmin TARGET fuzz/artifacts/TARGET/crash-...
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"

seconds=${1:-60}
shift || true
if ! [[ $seconds =~ ^[0-9]+$ ]] || [ "$seconds" -lt 1 ]; then
    echo "usage: $0 [SECONDS] [TARGET...]" >&2
    exit 2
fi

# cargo-fuzz passes -Zsanitizer=address and friends to rustc; RUSTC_BOOTSTRAP=1 lets the stable
# compiler accept them (the ASan runtime ships with the stable x86_64-linux standard library).
export RUSTC_BOOTSTRAP=1
export PATH="$HOME/.cargo/bin:$PATH"
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "== installing cargo-fuzz"
    cargo install cargo-fuzz --locked
fi

python_targets=(export_models flower_records)
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(cargo fuzz list)
    targets+=("${python_targets[@]}")
fi

is_python() { [[ " ${python_targets[*]} " == *" $1 "* ]]; }

if [ -n "$(for t in "${targets[@]}"; do is_python "$t" || echo "$t"; done)" ]; then
    echo "== building fuzz targets"
    cargo fuzz build
fi

mkdir -p fuzz/logs
failed=()
for target in "${targets[@]}"; do
    if is_python "$target"; then
        log=fuzz/logs/$target.log
        seed=$((RANDOM * 32768 + RANDOM))
        echo "== fuzzing $target for ${seconds}s, seed $seed (log: $log)"
        status=0
        .venv/bin/python "fuzz/python/$target.py" "$seconds" "$seed" fuzz/artifacts/python >"$log" 2>&1 || status=$?
        tail -n 1 "$log"
        if [ "$status" -ne 0 ]; then
            echo "!! $target failed (exit $status; a negative or >128 status is a signal)"
            tail -n 40 "$log"
            failed+=("$target")
        fi
        continue
    fi
    corpus=fuzz/corpus/$target
    artifacts=fuzz/artifacts/$target
    mkdir -p "$corpus" "$artifacts"
    # The spec target reads its input through `arbitrary`, so checkpoint files are no seeds for it.
    if [ "$target" = index_bytes ]; then
        for dir in tests/data tests/data/corpus; do
            [ -d "$dir" ] && find "$dir" -maxdepth 1 -name '*.ckpt' -exec cp {} "$corpus/" \;
        done
    fi
    if [ "$target" = legacy_folder ]; then
        for file in tests/data/ort115/*/*.pbseq; do
            cp "$file" "$corpus/$(basename "$(dirname "$file")")-$(basename "$file")"
        done
    fi
    if [ -d "fuzz/seeds/$target" ]; then
        cp fuzz/seeds/"$target"/* "$corpus/"
    fi
    log=fuzz/logs/$target.log
    echo "== fuzzing $target for ${seconds}s (log: $log)"
    status=0
    cargo fuzz run "$target" "$corpus" -- \
        -max_total_time="$seconds" -rss_limit_mb=2048 -max_len=65536 -timeout=5 \
        -print_final_stats=1 -artifact_prefix="$artifacts/" >"$log" 2>&1 || status=$?
    grep -E '^#[0-9]+[[:space:]]+DONE|^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)' "$log" || true
    if [ "$status" -ne 0 ]; then
        echo "!! $target failed (exit $status):"
        grep -E -A1 'panicked at' "$log" | head -n 4 || true
        grep -E 'ERROR: (libFuzzer|AddressSanitizer)|^SUMMARY|Test unit written|^Base64' "$log" || tail -n 40 "$log"
        failed+=("$target")
    fi
done

if [ ${#failed[@]} -ne 0 ]; then
    echo "FAILED: ${failed[*]}"
    exit 1
fi
echo "fuzzing passed: ${targets[*]} (${seconds}s each)"
