#!/usr/bin/env bash
# make bench-cpu-interference: how much a busy neighbouring CPU slows a
# copy on this machine. A single-thread memcpy (mooncake bench memcpy,
# 128 KiB blocks over 256 MiB buffers: the size of one layer's piece of a
# KV block) runs pinned to the last CPU while the first CPU is
#   idle        nothing pinned there,
#   yield-spin  a Python loop of os.sched_yield() (what vLLM's processes
#               run while they wait on their shared-memory queues),
#   compute     a shell busy loop (interpreter-style integer work),
# ROUNDS times each, alternating; it prints the median GB/s of each and
# its ratio to idle. On a VM whose two vCPUs share one physical core
# (SMT siblings hidden by the hypervisor; lscpu may still say one thread
# per core) work on one vCPU slows the other's copies: that bounds any
# copy measured while an engine computes beside it.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin/mooncake}
DUR=${DUR:-2}
ROUNDS=${ROUNDS:-3}
[ -x "$BIN" ] || go build -o "$BIN" ./core/cmd/mooncake
ncpu=$(nproc)
if [ "$ncpu" -lt 2 ]; then
  echo "bench-cpu-interference: needs 2 CPUs, this process may use $ncpu" >&2
  exit 1
fi
cpus=($(python3 -c 'import os; print(*sorted(os.sched_getaffinity(0)))'))
near=${cpus[0]} far=${cpus[-1]}

neighbour=
stop() { [ -n "$neighbour" ] && kill "$neighbour" 2>/dev/null && wait "$neighbour" 2>/dev/null; neighbour=; return 0; }
trap stop EXIT
start() {
  case $1 in
  idle) ;;
  yield-spin) taskset -c "$near" python3 -c 'import os
while True: os.sched_yield()' & neighbour=$! ;;
  compute) taskset -c "$near" sh -c 'while :; do :; done' & neighbour=$! ;;
  esac
}
copy() { taskset -c "$far" "$BIN" bench memcpy --block_size 128KiB --total 256MiB --duration "${DUR}s" --json |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["gbps"])'; }

printf 'load average at start: %s; copy on CPU %s, neighbour on CPU %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)" "$far" "$near"
declare -A runs
for r in $(seq "$ROUNDS"); do
  for what in idle yield-spin compute; do
    start "$what"
    runs[$what]+="$(copy) "
    stop
  done
done
median() { python3 -c 'import statistics,sys; print(statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }
idle=$(median ${runs[idle]})
for what in idle yield-spin compute; do
  m=$(median ${runs[$what]})
  printf '%-11s memcpy %6.2f GB/s (rounds: %s) = %.2f x idle\n' "$what" "$m" "${runs[$what]% }" "$(python3 -c "print($m / $idle)")"
done
printf 'load average at end: %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
