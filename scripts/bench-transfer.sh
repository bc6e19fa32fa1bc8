#!/usr/bin/env bash
# make bench-transfer: measures, in one run on this machine, iperf3's
# single-stream loopback throughput and a single-thread memcpy baseline, then
# the transfer engine (mooncake bench transfer, loopback mode: target and
# initiator engines over real sockets) at 1 MiB and 64 KiB blocks, batch 128,
# and prints our figures as ratios of the baselines (tcp against an iperf3
# run made just before it).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin/mooncake}
DUR=${DUR:-5}
command -v iperf3 >/dev/null || { echo "iperf3 missing: apt-get install -y iperf3" >&2; exit 1; }
[ -x "$BIN" ] || go build -o "$BIN" ./core/cmd/mooncake

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
iperf3 -s -B 127.0.0.1 -p "$port" >/dev/null 2>&1 &
srv=$!
trap 'kill $srv 2>/dev/null || true' EXIT
# wait (bounded) until the server listens
for _ in $(seq 100); do
  python3 -c "import socket,sys; s=socket.socket(); sys.exit(s.connect_ex(('127.0.0.1',$port)))" 2>/dev/null && break
  sleep 0.05
done
iperf_run() { iperf3 -c 127.0.0.1 -p "$port" -t "$DUR" -J | python3 -c 'import json,sys; print(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/8e9)'; }
iperf=$(iperf_run)
memcpy=$("$BIN" bench memcpy --block_size 1MiB --duration "${DUR}s" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["gbps"])')

run() { "$BIN" bench transfer --protocol "$1" --operation "$2" --block_size "$3" --batch_size 128 --duration "${DUR}s" --json | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["gbps"], d["batch_p50_ms"], d["batch_p99_ms"])'; }

# On a shared machine the load drifts during the run, so each tcp figure is
# also divided by an iperf3 run made just before it ("adjacent"); the
# x iperf3 column uses the adjacent run for tcp and the first one for shm.
printf 'load average at start: %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
printf 'baseline  iperf3 single-stream loopback  %.3f GB/s\n' "$iperf"
printf 'baseline  memcpy single thread 1 MiB     %.3f GB/s\n' "$memcpy"
declare -A ours  # "proto op block" -> GB/s, for the upstream comparison below
for proto in tcp shm; do
  for op in write read; do
    for bs in 1MiB 64KiB; do
      base=$iperf note=""
      if [ "$proto" = tcp ]; then
        base=$(iperf_run)
        note=$(printf ', adjacent iperf3 %.3f GB/s' "$base")
      fi
      read -r gbps p50 p99 < <(run "$proto" "$op" "$bs")
      ours["$proto $op $bs"]=$gbps
      printf '%-4s %-5s block %-6s batch 128: %7.3f GB/s  = %.2f x iperf3, %.2f x memcpy   (batch p50 %.2f ms, p99 %.2f ms%s)\n' \
        "$proto" "$op" "$bs" "$gbps" "$(python3 -c "print($gbps/$base)")" "$(python3 -c "print($gbps/$memcpy)")" "$p50" "$p99" "$note"
    done
  done
done
printf 'load average at end: %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"

# Upstream reference: where the upstream wheel (requirements-bench.txt) installs,
# run its transfer engine over TCP loopback (two processes, P2PHANDSHAKE) with
# the same block and batch sizes, and print ours as a ratio of it. Skipped,
# with the reason, where it cannot be installed or does not run, or with
# UPSTREAM=0.
VENV=${VENV_BENCH:-.venv-bench}
upstream_log=$(mktemp)
trap 'kill $srv 2>/dev/null || true; rm -f "$upstream_log"' EXIT
upstream_ready() { [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c 'from mooncake.engine import TransferEngine' >"$upstream_log" 2>&1; }
upstream_why=""
if [ "${UPSTREAM:-1}" != 0 ] && ! upstream_ready; then
  if ! { [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV" >"$upstream_log" 2>&1; }; then
    upstream_why="python3 -m venv $VENV failed: $(tail -n 1 "$upstream_log")"
  elif ! "$VENV/bin/pip" install -q --disable-pip-version-check -r requirements-bench.txt >"$upstream_log" 2>&1; then
    upstream_why="pip install -r requirements-bench.txt failed: $(grep -m1 -i error "$upstream_log" || tail -n 1 "$upstream_log")"
  elif ! upstream_ready; then
    upstream_why="import mooncake.engine failed (missing system libraries? apt-get install -y libibverbs1 libnuma1 libcurl4): $(tail -n 1 "$upstream_log")"
  fi
fi
if [ "${UPSTREAM:-1}" = 0 ]; then
  echo "upstream  skipped: UPSTREAM=0"
elif [ -n "$upstream_why" ]; then
  echo "upstream  skipped: $upstream_why"
else
  for op in write read; do
    for bs in 1MiB 64KiB; do
      if up=$(timeout $((DUR + 90)) "$VENV/bin/python" scripts/bench_upstream_te.py --operation "$op" --block-size "$bs" \
                --batch-size 128 --duration "$DUR" 2>"$upstream_log" | python3 -c 'import json,sys; print(json.load(sys.stdin)["gbps"])' 2>/dev/null); then
        printf 'upstream tcp %-5s block %-6s batch 128: %7.3f GB/s; ours = %.2f x upstream\n' \
          "$op" "$bs" "$up" "$(python3 -c "print(${ours["tcp $op $bs"]}/$up)")"
      else
        echo "upstream tcp $op block $bs batch 128: failed: $(grep -v '^[WI][0-9]\{4\} \|Logging before InitGoogleLogging' "$upstream_log" | tail -n 1)"
      fi
    done
  done
fi
