#!/usr/bin/env bash
# A quick like-for-like A/B of the pool over tcp against the raw transfer
# engine, interleaved: each round runs the raw engine over a 1 GiB target
# span (write, then read: `mooncake bench transfer --target_span 1GiB`,
# each op to the next offsets, as the pool's values spread over its 1 GiB)
# and then `mooncake bench store --protocol tcp` once with each binary
# given, all with the same value size and 4 clients/threads. It prints,
# per binary (numbered in the order given; relative paths are the
# caller's), the medians of ours' GB/s and CPU-s per GB and the median of
# the per-round ratios ours put / raw write and ours get / raw read (the
# raw runs of the same round, seconds apart, on the first binary).
#
#   scripts/bench-store-vs-raw.sh [BIN ...]   (default: bin/mooncake)
#   ROUNDS=5 DUR=1 SIZE=1MiB CLIENTS=4
#
# A benchmark that fails ends the script (exit 1) with its command and error.
#
# Use it to compare two builds of the pool (say the binary before and
# after a change) against one baseline on this shared machine, whose speed
# drifts by a third between minutes: the ratios within a round cancel
# that; the full comparison with redis and upstream is make bench-store.
set -euo pipefail
# Binaries given as relative paths are the caller's, not the repository's.
bins=()
for b in "$@"; do
  [ -n "$b" ] || { echo "bench-store-vs-raw.sh: an empty binary path" >&2; exit 2; }
  bins+=("$(realpath -s -m -- "$b")")
done
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-5}
DUR=${DUR:-1}
SIZE=${SIZE:-1MiB}
CLIENTS=${CLIENTS:-4}
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || { echo "bench-store-vs-raw.sh: ROUNDS=\"$ROUNDS\": want a whole number >= 1" >&2; exit 2; }
[[ "$CLIENTS" =~ ^[1-9][0-9]*$ ]] || { echo "bench-store-vs-raw.sh: CLIENTS=\"$CLIENTS\": want a whole number >= 1" >&2; exit 2; }
[[ "$DUR" =~ ^[1-9][0-9]*$ ]] || { echo "bench-store-vs-raw.sh: DUR=\"$DUR\": want whole seconds >= 1" >&2; exit 2; }
[[ "$SIZE" =~ ^[1-9][0-9]*(KiB|MiB)$ ]] || { echo "bench-store-vs-raw.sh: SIZE=\"$SIZE\": want a size such as 1MiB" >&2; exit 2; }
if [ ${#bins[@]} -eq 0 ]; then
  [ -x bin/mooncake ] || go build -o bin/mooncake ./core/cmd/mooncake
  bins=("$PWD/bin/mooncake")
fi
for b in "${bins[@]}"; do
  [ -f "$b" ] && [ -x "$b" ] || { echo "bench-store-vs-raw.sh: $b: not an executable file" >&2; exit 2; }
done
rows=$(mktemp)
out=$(mktemp)
errf=$(mktemp)
trap 'rm -f "$rows" "$out" "$errf"' EXIT
# run CMD...: runs a benchmark with --json into $out; a failure (or output
# that is not mooncake's JSON) ends the script naming the command, with its
# own error.
run() {
  last="$*"
  if ! "$@" >"$out" 2>"$errf"; then
    echo "bench-store-vs-raw.sh: failed: $*" >&2
    tail -n 5 "$errf" >&2
    exit 1
  fi
}
# field KEY...: the number at that path of $out's JSON.
field() {
  python3 - "$out" "$@" 2>/dev/null <<'PY' || { echo "bench-store-vs-raw.sh: not the JSON of mooncake bench: $(head -c 200 "$out")" >&2; echo "  from: $last" >&2; exit 1; }
import json, sys
d = json.load(open(sys.argv[1]))
for k in sys.argv[2:]:
    d = d[k]
print(float(d))
PY
}
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg); $ROUNDS rounds, value $SIZE, $CLIENTS clients, ${DUR}s per phase"
for _ in $(seq "$ROUNDS"); do
  run "${bins[0]}" bench transfer --protocol tcp --target_span 1GiB --operation write --block_size "$SIZE" --batch_size 1 --threads "$CLIENTS" --duration "${DUR}s" --json
  w=$(field gbps)
  run "${bins[0]}" bench transfer --protocol tcp --target_span 1GiB --operation read --block_size "$SIZE" --batch_size 1 --threads "$CLIENTS" --duration "${DUR}s" --json
  r=$(field gbps)
  for i in "${!bins[@]}"; do
    run "${bins[$i]}" bench store --protocol tcp --value-size "$SIZE" --clients "$CLIENTS" --duration "${DUR}s" --json
    pg=$(field put gbps); pc=$(field put cpu_s_per_gb); gg=$(field get gbps); gc=$(field get cpu_s_per_gb)
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$i" "${bins[$i]}" "$w" "$r" "$pg" "$pc" "$gg" "$gc" >>"$rows"
  done
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$rows" <<'PY'
import statistics as st, sys
by = {}
for line in open(sys.argv[1]):
    i, b, *v = line.rstrip("\n").split("\t")  # tabs: a path may hold spaces
    by.setdefault((int(i), b), []).append([float(x) for x in v])
for (i, b), rs in sorted(by.items()):
    b = f"#{i + 1} {b}"
    med = lambda i: st.median(r[i] for r in rs)
    put = [r[2] / r[0] for r in rs]
    get = [r[4] / r[1] for r in rs]
    print(f"{b}: put {med(2):.2f} GB/s {med(3):.3f} CPU-s/GB, / raw write over the span {st.median(put):.2f} x "
          f"[{' '.join('%.2f' % x for x in put)}]; get {med(4):.2f} GB/s {med(5):.3f} CPU-s/GB, / raw read over the span "
          f"{st.median(get):.2f} x [{' '.join('%.2f' % x for x in get)}]  (raw write / read {med(0):.2f} / {med(1):.2f} GB/s)")
PY
