#!/usr/bin/env bash
# Runs upstream Mooncake's own transfer-engine test pair,
# mooncake-wheel/tests/transfer_engine_target.py and
# transfer_engine_initiator_test.py, UNCHANGED, against the mooncake-go
# wheel (build/wheel, `make wheel`), as upstream's scripts/run_tests.sh
# runs them: a `mooncake_http_metadata_server`, MC_METADATA_SERVER pointing
# at it, MC_FORCE_TCP=true, the target in the background, the initiator's
# unittest in the foreground. Differences from run_tests.sh, both to make
# the run reliable on a shared machine: a free port instead of 8080, and
# the initiator starts once the target printed "Target server ready"
# (run_tests.sh starts both at once).
#
# The two files are read from a checkout (or bare clone) of
# kvcache-ai/Mooncake given as UPSTREAM_MOONCAKE, at the pinned commit
# UPSTREAM_COMMIT when it is a git repository (default: the mirror at
# /work/.mirror/kvcache-ai+Mooncake/repo when present). Without one the script
# prints one SKIPPED line saying how to run it, and exits 0.
#
#   UPSTREAM_MOONCAKE=/path/to/Mooncake make test-upstream-engine
set -euo pipefail

PIN="${UPSTREAM_COMMIT:-3b5a594133958449a1feaf1c9e0fc1b553e34a28}"
# Default: the mirror this workplace's tools fetch into, when present (as
# scripts/test-upstream-store.sh does).
SRC="${UPSTREAM_MOONCAKE:-/work/.mirror/kvcache-ai+Mooncake/repo}"
FILES=(transfer_engine_target.py transfer_engine_initiator_test.py)
cd "$(dirname "$0")/.."

if [ -z "$SRC" ] || [ ! -e "$SRC" ]; then
  echo "test-upstream-engine: SKIPPED: no upstream Mooncake snapshot (set UPSTREAM_MOONCAKE to a clone of github.com/kvcache-ai/Mooncake; commit $PIN is the one tested)"
  exit 0
fi
wheel=$(ls build/wheel/mooncake_go-*.whl 2>/dev/null | tail -1)
[ -n "$wheel" ] || { echo "test-upstream-engine: build/wheel has no mooncake_go wheel: run make wheel" >&2; exit 1; }

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

if git --git-dir="$SRC" rev-parse --git-dir >/dev/null 2>&1 || git -C "$SRC" rev-parse --git-dir >/dev/null 2>&1; then
  g=(git -C "$SRC"); [ -d "$SRC/.git" ] || [ ! -f "$SRC/HEAD" ] || g=(git --git-dir="$SRC")
  for f in "${FILES[@]}"; do "${g[@]}" show "$PIN:mooncake-wheel/tests/$f" > "$work/$f"; done
  echo "test-upstream-engine: upstream files at $PIN"
else
  for f in "${FILES[@]}"; do cp "$SRC/mooncake-wheel/tests/$f" "$work/$f"; done
  echo "test-upstream-engine: upstream files from $SRC (not a git repository: commit unknown)"
fi

python3 -m venv "$work/venv"
"$work/venv/bin/pip" install --quiet --disable-pip-version-check --no-deps "$wheel"
port=$("$work/venv/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
env -u MOONCAKE_GO_LIB -u MC_MOONCAKE_BIN -u PYTHONPATH "$work/venv/bin/mooncake_http_metadata_server" --port "$port" --host 127.0.0.1 &
pids+=($!)
for _ in $(seq 100); do (echo > "/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done

export MC_METADATA_SERVER="http://127.0.0.1:$port/metadata" MC_FORCE_TCP=true
cd "$work"
env -u MOONCAKE_GO_LIB -u MC_MOONCAKE_BIN -u PYTHONPATH "$work/venv/bin/python" -u transfer_engine_target.py > target.log 2>&1 &
pids+=($!)
for _ in $(seq 300); do
  grep -q "Target server ready" target.log && break
  kill -0 "${pids[1]}" 2>/dev/null || { echo "test-upstream-engine: target exited:"; cat target.log; exit 1; }
  sleep 0.1
done
grep -q "Target server ready" target.log || { echo "test-upstream-engine: target not ready after 30 s:"; cat target.log; exit 1; }
env -u MOONCAKE_GO_LIB -u MC_MOONCAKE_BIN -u PYTHONPATH "$work/venv/bin/python" transfer_engine_initiator_test.py
