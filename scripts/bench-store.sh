#!/usr/bin/env bash
# make bench-store: measures, in one run on this machine, redis-server (from
# Debian, on 127.0.0.1, no persistence) with redis-benchmark SET/GET, then
# the pool (mooncake bench store: in-process master and 2 nodes) put/get of
# the same value sizes with the same concurrency, with the transport the
# engine picks by default on one host (shm), tcp only, and tcp only with
# the master calls on the gRPC stream instead of the framed session
# (--grpc-session, for comparison), and the raw
# transfer engine over tcp (mooncake bench transfer: one request of the
# value size per op, the same number of threads; once to the same target
# offsets every op as upstream's bench does, once with --target_span of
# the pool's size, each op to the next offsets, as the pool's values
# spread over its memory; both before and after ours tcp, which their
# geometric mean is compared with), then plain loopback sockets with no engine
# (mooncake bench transfer --protocol socket: what the kernel gives the
# same writes), and prints our figures
# as ratios of redis's and of the raw engine's. GB/s = ops/s x value size /
# 1e9. They alternate for ROUNDS rounds and the medians are compared, so
# that load from other processes hits all alike; the load average is
# printed at start and end.
#
# Keys: ours are distinct (every put a new key, gets over the newest keys
# still in the pool). redis-benchmark reuses one key unless given -r, so
# it runs with -r <pool bytes / value size>: random keys over a keyspace
# the size of our pool (1 GiB), SET overwriting and GET reading them (a
# GET of a key no SET chose yet, about 2% of them after the SET test,
# answers nil without a value: redis's GET figure is a little flattered).
#
# Then, where the upstream wheel is installed, upstream's master and store
# clients on tcp with the same sizes and clients (ours tcp / upstream and
# ours default / upstream), and (LARGE, default 1GiB; empty = skip) one
# large value over shm on a pool of 2 x 1.5 GiB against memcpy of the same
# size.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin/mooncake}
DUR=${DUR:-3}          # seconds per measured phase of ours
CLIENTS=${CLIENTS:-4}  # concurrency of both
SIZES=${SIZES:-"1MiB 4MiB"}
ROUNDS=${ROUNDS:-3}    # rounds alternating redis and ours; medians are printed
POOL=$((1 << 30))      # bytes of our in-process pool (2 nodes x 512 MiB): redis's keyspace
LARGE=${LARGE-1GiB}    # one large shm value against memcpy; empty = skip

for size in $SIZES ${LARGE:+$LARGE}; do
  [[ "$size" =~ ^[1-9][0-9]*(KiB|MiB|GiB)?$ ]] || { echo "bench-store.sh: size \"$size\" (SIZES/LARGE): want a positive number of bytes, optionally with KiB, MiB or GiB (e.g. 1MiB)" >&2; exit 2; }
done
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || { echo "bench-store.sh: ROUNDS=\"$ROUNDS\": want a whole number >= 1" >&2; exit 2; }
[[ "$CLIENTS" =~ ^[1-9][0-9]*$ ]] || { echo "bench-store.sh: CLIENTS=\"$CLIENTS\": want a whole number >= 1" >&2; exit 2; }

if ! command -v redis-server >/dev/null || ! command -v redis-benchmark >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "redis-server/redis-benchmark missing: installing Debian's redis-server" >&2
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server; } >&2
  else
    echo "redis-server/redis-benchmark missing: apt-get install -y redis-server" >&2
    exit 1
  fi
fi
[ -x "$BIN" ] || go build -o "$BIN" ./core/cmd/mooncake

bytes_of() { case "$1" in *GiB) echo $(( ${1%GiB} << 30 ));; *MiB) echo $(( ${1%MiB} << 20 ));; *KiB) echo $(( ${1%KiB} << 10 ));; *) echo "$1";; esac; }
# requests per redis-benchmark test: about 4 GB moved, a few seconds each
requests_of() { echo $(( (4000 << 20) / $1 )); }
keys_of() { echo $(( POOL / $1 )); }
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
rdir=$(mktemp -d)
redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no --dir "$rdir" \
  --logfile "$rdir/redis.log" --daemonize no &
srv=$!
trap 'kill $srv 2>/dev/null || true; wait $srv 2>/dev/null || true; rm -rf "$rdir"' EXIT
for _ in $(seq 100); do  # wait (bounded) until it answers
  [ "$(redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null)" = PONG ] && break
  sleep 0.05
done
echo "redis-server $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p') on 127.0.0.1:$port (--save '' --appendonly no); $(nproc) CPUs"
echo "load average at start: $(loadavg)"

# One round: redis-benchmark SET/GET, ours with shm, then the raw engine,
# ours tcp only (framed and on the gRPC stream), and the raw engine again;
# each appends "size who op ops_per_s gbps p50_ms p99_ms cpu_s_per_gb"
# lines to $rows (cpu: this process's CPU seconds per GB moved, pool and
# clients or both ends of the raw engine in one process; "-" for redis,
# a process of its own). Ours tcp runs between two raw runs and its
# per-round ratios to the raw engine take the geometric mean of both: the
# speed this shared machine gives drifts (the raw engine's 1 MiB reads
# ran 3.7-6.8 GB/s within minutes on 2026-12-05), and a baseline
# measured on both sides cancels a steady drift.
rows="$rdir/rows"
store() {  # store SIZE PROTO [extra flags]: ours, put and get
  local size=$1 proto=$2
  shift 2
  "$BIN" bench store --protocol "${proto%grpc}" "$@" --value-size "$size" --clients "$CLIENTS" --duration "${DUR}s" --json |
    python3 -c 'import json,sys; d=json.load(sys.stdin); s,p=sys.argv[1],sys.argv[2]
for op in ("put","get"): x=d[op]; print(s, p, op, x["ops_per_s"], x["gbps"], x["p50_ms"], x["p99_ms"], x["cpu_s_per_gb"])' "$size" "$proto" >>"$rows"
}
# raw SIZE WHEN: the raw engine twice, upstream's way (every op to the same
# target offsets, which stay in the CPU cache: "raw") and over a target
# span the size of our pool (each op to the next offsets, as the pool's
# puts and gets spread over its memory: "rawspan"), write then read;
# WHEN (before/after) suffixes who.
raw() {
  local size=$1 when=$2 who args
  for op in write read; do
    for who in raw rawspan; do
      args=(--protocol tcp)
      [ "$who" = rawspan ] && args+=(--target_span "$POOL")
      "$BIN" bench transfer "${args[@]}" --operation "$op" --block_size "$size" --batch_size 1 --threads "$CLIENTS" --duration "${DUR}s" --json |
        python3 -c 'import json,sys; d=json.load(sys.stdin); s,op,who=sys.argv[1],sys.argv[2],sys.argv[3]
print(s, who, op, d["gbps"]*1e9/d["block_size"], d["gbps"], d["batch_p50_ms"], d["batch_p99_ms"], d["cpu_s_per_gb"])' "$size" "$op" "$who$when" >>"$rows"
    done
  done
}
round() {
  local size=$1 b n csv
  b=$(bytes_of "$size")
  n=$(requests_of "$b")
  csv=$(redis-benchmark -h 127.0.0.1 -p "$port" -c "$CLIENTS" -n "$n" -d "$b" -r "$(keys_of "$b")" -t set,get -q --csv)
  echo "$csv" | awk -F'"' -v s="$size" -v b="$b" '$2=="SET"||$2=="GET"{printf "%s redis %s %s %.6f %s %s -\n", s, $2, $4, $4*b/1e9, $10, $14}' >>"$rows"
  store "$size" shm
  raw "$size" 1
  store "$size" tcp
  raw "$size" 2
  # tcpgrpc: tcp only with the master calls on the gRPC Session stream
  # instead of the framed session (--grpc-session), for comparison.
  store "$size" tcpgrpc --grpc-session
  # Writes only, no engine at all (socket: one plain loopback TCP
  # connection per client, each write a value into a target of the pool's
  # span, then an 8-byte ack: what the kernel's sockets give this pattern).
  "$BIN" bench transfer --protocol socket --target_span "$POOL" --operation write --block_size "$size" --batch_size 1 --threads "$CLIENTS" --duration "${DUR}s" --json |
    python3 -c 'import json,sys; d=json.load(sys.stdin); s=sys.argv[1]
print(s, "socket", "write", d["gbps"]*1e9/d["block_size"], d["gbps"], d["batch_p50_ms"], d["batch_p99_ms"], d["cpu_s_per_gb"])' "$size" >>"$rows"
}

for size in $SIZES; do
  b=$(bytes_of "$size")
  echo "value $size: redis-benchmark -h 127.0.0.1 -p $port -c $CLIENTS -n $(requests_of "$b") -d $b -r $(keys_of "$b") -t set,get -q --csv"
  echo "value $size: $BIN bench store --protocol shm|tcp [--grpc-session] --value-size $size --clients $CLIENTS --duration ${DUR}s"
  echo "value $size: $BIN bench transfer --protocol tcp --operation write|read --block_size $size --batch_size 1 --threads $CLIENTS --duration ${DUR}s [--target_span $POOL]"
  echo "value $size: $BIN bench transfer --protocol socket --block_size $size --batch_size 1 --threads $CLIENTS --duration ${DUR}s --target_span $POOL"
  for r in $(seq "$ROUNDS"); do round "$size"; done
done

echo "load average after ours and redis: $(loadavg)"
python3 - "$rows" "$CLIENTS" "$ROUNDS" "$rdir/ours" <<'PY'
import math, statistics, sys
rows, clients, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ours = open(sys.argv[4], "w")  # "size put_gbps get_gbps tcp_put_gbps tcp_get_gbps" of ours, medians
data = {}
for line in open(rows):
    size, who, op, ops, gbps, p50, p99, cpu = line.split()
    data.setdefault((size, who, op), []).append((float(ops), float(gbps), float(p50), float(p99), None if cpu == "-" else float(cpu)))
# The raw engine ran twice a round, before (1) and after (2) ours tcp:
# "raw" and "rawspan" are both runs of each round, by their geometric mean.
for key in list(data):
    size, who, op = key
    if who in ("raw1", "rawspan1") and (size, who[:-1] + "2", op) in data:
        ones, twos = data[key], data[(size, who[:-1] + "2", op)]
        data[(size, who[:-1], op)] = [tuple(math.sqrt(x * y) for x, y in zip(u, v)) for u, v in zip(ones, twos)]
med = lambda xs: statistics.median(xs)
sizes = list(dict.fromkeys(k[0] for k in data))
for size in sizes:
    print(f"\nvalue {size}, {clients} clients, median of {rounds} rounds (each: redis, ours shm, raw engine, ours tcp, raw engine again, ours tcp on the gRPC stream, plain sockets)")
    def line(label, key, base=None):
        xs = data[key]
        g = med([x[1] for x in xs])
        ratio = f"= {g / med([x[1] for x in data[base]]):5.2f} x {base[2]}" if base else ""
        cpu = f"{med([x[4] for x in xs]):6.3f} CPU-s/GB" if xs[0][4] is not None else " " * 15
        print(f"  {label:<28} {med([x[0] for x in xs]):9.1f} ops/s {g:7.3f} GB/s  p50 {med([x[2] for x in xs]):6.3f} ms p99 {med([x[3] for x in xs]):7.3f} ms  {cpu}  {ratio}"
              f"  [GB/s per round: {' '.join('%.2f' % x[1] for x in xs)}]")
    line("redis SET", (size, "redis", "SET"))
    line("redis GET", (size, "redis", "GET"))
    for proto, label in (("shm", "ours, default (shm)"), ("tcp", "ours, tcp only"), ("tcpgrpc", "ours, tcp, gRPC stream")):
        line(f"{label} put", (size, proto, "put"), (size, "redis", "SET"))
        line(f"{label} get", (size, proto, "get"), (size, "redis", "GET"))
    for who, label in (("raw", "raw engine tcp"), ("rawspan", "raw tcp, 1 GiB span")):
        for op in ("write", "read"):
            line(f"{label} {op}", (size, who, op))
            for when, w in (("1", "before"), ("2", "after")):
                line(f"  ({w} ours tcp)", (size, who + when, op))
    line("plain sockets write, span", (size, "socket", "write"))
    g = lambda k: med([x[1] for x in data[k]])
    # Ratios within each round (run seconds apart), then their median:
    # steadier than a ratio of medians when the load drifts.
    def per_round(a, b, i=1):
        rs = [x[i] / y[i] for x, y in zip(data[a], data[b])]
        return f"{med(rs):.2f} x [{' '.join('%.2f' % r for r in rs)}]"
    print(f"  per-round ratios, median [each round]: tcp put / SET {per_round((size, 'tcp', 'put'), (size, 'redis', 'SET'))}, "
          f"tcp get / GET {per_round((size, 'tcp', 'get'), (size, 'redis', 'GET'))}")
    print(f"    tcp put / raw write {per_round((size, 'tcp', 'put'), (size, 'raw', 'write'))}, "
          f"tcp get / raw read {per_round((size, 'tcp', 'get'), (size, 'raw', 'read'))}, "
          f"tcp put p99 / SET p99 {per_round((size, 'tcp', 'put'), (size, 'redis', 'SET'), 3)}")
    print(f"    tcp put / raw write over the pool's span {per_round((size, 'tcp', 'put'), (size, 'rawspan', 'write'))}, "
          f"tcp get / raw read over the span {per_round((size, 'tcp', 'get'), (size, 'rawspan', 'read'))}")
    print(f"    CPU-s per GB, raw / ours tcp (1 = ours costs no more CPU per byte): put vs raw write {per_round((size, 'raw', 'write'), (size, 'tcp', 'put'), 4)}, "
          f"over the span {per_round((size, 'rawspan', 'write'), (size, 'tcp', 'put'), 4)}; "
          f"get vs raw read {per_round((size, 'raw', 'read'), (size, 'tcp', 'get'), 4)}, over the span {per_round((size, 'rawspan', 'read'), (size, 'tcp', 'get'), 4)}")
    print(f"    tcp put / tcp put on the gRPC stream {per_round((size, 'tcp', 'put'), (size, 'tcpgrpc', 'put'))}, "
          f"get {per_round((size, 'tcp', 'get'), (size, 'tcpgrpc', 'get'))}")
    print(f"    raw write over the span / plain sockets {per_round((size, 'rawspan', 'write'), (size, 'socket', 'write'))}, "
          f"plain sockets / SET {per_round((size, 'socket', 'write'), (size, 'redis', 'SET'))}")
    print(size, g((size, "shm", "put")), g((size, "shm", "get")), g((size, "tcp", "put")), g((size, "tcp", "get")), file=ours)
PY

# Upstream's store, where the upstream wheel is installed (.venv-bench, from
# `pip install -r requirements-bench.txt`): scripts/bench_upstream_store.py
# runs the wheel's mooncake_master and $CLIENTS store client processes (tcp,
# zero-copy put_from/get_into, pool of the same 1 GiB) with the same sizes
# and duration, and ours (default, the medians above) is printed as a ratio
# of it. Skipped, with the reason, where the wheel or its store is missing.
UPY=${UPSTREAM_PY:-.venv-bench/bin/python}
echo
for size in $SIZES; do
  if [ ! -x "$UPY" ]; then
    echo "upstream store: skipped: no $UPY (python3 -m venv .venv-bench && .venv-bench/bin/pip install -r requirements-bench.txt)"
    break
  fi
  echo "value $size: $UPY scripts/bench_upstream_store.py --value-size $size --clients $CLIENTS --duration $DUR"
  if ! up=$("$UPY" scripts/bench_upstream_store.py --value-size "$size" --clients "$CLIENTS" --duration "$DUR" 2>"$rdir/upstream.err"); then
    why=$(grep -m1 '^skipped: ' "$rdir/upstream.err" | sed 's/^skipped: //' || true)
    if [ -n "$why" ]; then echo "upstream store: skipped: $why"; break; fi
    echo "upstream store: failed: $(tail -n 20 "$rdir/upstream.err")"
    continue
  fi
  read -r _ our_put our_get tcp_put tcp_get < <(awk -v s="$size" '$1==s' "$rdir/ours")
  python3 -c 'import json,sys
d=json.loads(sys.argv[1]); op,og,tp,tg=map(float, sys.argv[2:6]); p,g=d["put"],d["get"]
for k,x in (("put",p),("get",g)):
    print("  upstream store %s  %9.1f ops/s %7.3f GB/s  p50 %6.3f ms p99 %7.3f ms%s" % (k, x["ops_per_s"], x["gbps"], x["p50_ms"], x["p99_ms"],
          "  (%d refused)" % x["errors"] if x["errors"] else ""))
print("upstream store put/get (tcp): %.3f/%.3f GB/s; ours tcp = %.2f x / %.2f x upstream (same transport); ours default (shm) = %.2f x / %.2f x" % (
    p["gbps"], g["gbps"], tp/p["gbps"], tg/g["gbps"], op/p["gbps"], og/g["gbps"]))' "$up" "$our_put" "$our_get" "$tcp_put" "$tcp_get"
done

# One large value over shm (the same-host path) against memcpy of the
# same size: a pool of 2 nodes x 1.5 GiB, one client, the default warmup
# (writes the pool once, so segments are faulted in as in steady state).
if [ -n "$LARGE" ]; then
  lb=$(bytes_of "$LARGE")
  echo
  echo "value $LARGE: $BIN bench store --protocol shm --value-size $LARGE --segment-size $((lb * 3 / 2)) --clients 1 --ops 6; $BIN bench memcpy --block_size $LARGE --total $LARGE --duration ${DUR}s"
  large=$("$BIN" bench store --protocol shm --value-size "$LARGE" --segment-size "$((lb * 3 / 2))" --clients 1 --ops 6 --json)
  mc=$("$BIN" bench memcpy --block_size "$LARGE" --total "$LARGE" --duration "${DUR}s" --json)
  python3 -c 'import json,sys
d=json.loads(sys.argv[1]); m=json.loads(sys.argv[2])["gbps"]
print("  memcpy %s single thread     %7.3f GB/s" % (sys.argv[3], m))
for op in ("put","get"):
    x=d[op]; print("  ours shm %s %s    %7.3f GB/s = %.2f x memcpy (p50 %.1f ms)" % (op, sys.argv[3], x["gbps"], x["gbps"]/m, x["p50_ms"]))' "$large" "$mc" "$LARGE"
fi
echo "load average at end: $(loadavg)"
