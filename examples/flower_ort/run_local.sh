#!/usr/bin/env bash
# Runs this Flower app on one machine, end to end, and stops everything it started:
#   1. makes the training artifacts with onnxruntime-training (ort_device.py artifacts);
#   2. starts a SuperLink and NODES SuperNodes (default 3) on 127.0.0.1, insecure mode, free ports;
#   3. `flwr run` of the app against them, following its logs to the end (ROUNDS rounds, default 2);
#   4. on exit (success, failure or Ctrl-C) stops the SuperLink, the SuperNodes and every process
#      Flower started under them.
#
#   bash examples/flower_ort/run_local.sh [WORK]
#
# Needs: flwr and ortckpt (the project's .venv from scripts/setup.sh, or the first `flwr` on PATH)
# and onnxruntime-training 1.19.2 for the devices (the venv scripts/setup_ort_env.sh makes:
# $ORTCKPT_ORT_VENV, default <repo>/.ort-venv; or ORT=/path/to/its/python).
# Writes only into WORK (default: a new temporary directory): the artifacts, Flower's home
# (FLWR_HOME=WORK/flwr-home: the SuperLink connection goes there, ~/.flwr is never touched), the
# logs, and the ServerApp's out-dir (each round's global checkpoint and rounds.json).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
app="$repo/examples/flower_ort"
bin="$repo/.venv/bin"
if [ ! -x "$bin/flwr" ]; then
  flwr=$(command -v flwr) || { echo "run_local.sh: no flwr: run 'bash scripts/setup.sh' first" >&2; exit 1; }
  bin=$(dirname "$flwr")
fi
ort=${ORT:-${ORTCKPT_ORT_VENV:-$repo/.ort-venv}/bin/python}
if [ ! -x "$ort" ]; then
  echo "run_local.sh: no ORT python at $ort: run 'bash scripts/setup_ort_env.sh' first (or set ORT)" >&2
  exit 1
fi
work=${1:-$(mktemp -d)}
mkdir -p "$work"
work=$(cd "$work" && pwd)
nodes=${NODES:-3}
# Flower starts its own programs (flower-superexec, the apps) from PATH
export PATH="$bin:$PATH" FLWR_HOME="$work/flwr-home" FLWR_TELEMETRY_ENABLED=0 FLWR_DISABLE_UPDATE_CHECK=1
mkdir -p "$FLWR_HOME"

started=()
descendants() {  # a process and everything under it (Flower starts its apps in sessions of their own)
  echo "$1"
  local child
  for child in $(pgrep -P "$1" || true); do descendants "$child"; done
}
stop() {
  local all=() pid
  for pid in "${started[@]}"; do mapfile -t -O "${#all[@]}" all < <(descendants "$pid"); done
  [ "${#all[@]}" -gt 0 ] || return 0
  kill "${all[@]}" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "${all[@]}" 2>/dev/null || break; sleep 0.1; done
  kill -9 "${all[@]}" 2>/dev/null || true
  echo "run_local.sh: stopped the SuperLink, the SuperNodes and their apps"
}
trap stop EXIT
trap 'exit 130' INT   # Ctrl-C and kill end the script through its EXIT trap, which stops the rest
trap 'exit 143' TERM

free_port() { "$bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_port() {  # port log pid: until the process listens on the port (it must not exit meanwhile)
  for _ in $(seq 600); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    kill -0 "$3" 2>/dev/null || break
    sleep 0.1
  done
  echo "run_local.sh: nothing listens on 127.0.0.1:$1; the log:" >&2
  tail -n 40 "$2" >&2
  return 1
}

echo "== artifacts: generate_artifacts with onnxruntime-training ($work/artifacts)"
"$ort" "$app/flower_ort/ort_device.py" artifacts "$work/artifacts"

echo "== a SuperLink and $nodes SuperNodes on 127.0.0.1 (logs in $work)"
port=$(free_port)
"$bin/flower-superlink" --insecure --host 127.0.0.1 --port "$port" \
  --disable-runtime-dependency-installation >"$work/superlink.log" 2>&1 &
started+=($!)
wait_port "$port" "$work/superlink.log" "$!"
# the connection `flwr run` uses, in FLWR_HOME (Flower 1.42 reads it there, not from the app)
cat >"$FLWR_HOME/config.toml" <<EOF
[superlink]
default = "local"

[superlink.local]
address = "127.0.0.1:$port"
insecure = true
EOF
for i in $(seq 0 $((nodes - 1))); do
  node_port=$(free_port)
  "$bin/flower-supernode" --insecure --superlink "127.0.0.1:$port" --host 127.0.0.1 --port "$node_port" \
    --node-config "partition-id=$i ort-python=\"$ort\" artifacts=\"$work/artifacts\"" \
    >"$work/supernode$i.log" 2>&1 &
  started+=($!)
  wait_port "$node_port" "$work/supernode$i.log" "$!"
done

echo "== flwr run"
"$bin/flwr" run "$app" local --stream --run-config \
  "initial-checkpoint=\"$work/artifacts/checkpoint\" training-model=\"$work/artifacts/training_model.onnx\" out-dir=\"$work/out\" min-nodes=$nodes num-server-rounds=${ROUNDS:-2}"
echo "== done: each round's global checkpoint and rounds.json are in $work/out"
ls "$work/out"
