#!/usr/bin/env bash
# test-upstream-store.sh - run upstream Mooncake's own store test,
# mooncake-wheel/tests/test_distributed_object_store.py, UNCHANGED, against
# our mooncake.store package (compat/python + abi/python, on
# build/libmooncake.so) and our `mooncake master`, the way upstream's
# scripts/run_tests.sh runs it: master with --default_kv_lease_ttl=500 and
# the embedded HTTP metadata server, then
#   MC_METADATA_SERVER=... DEFAULT_KV_LEASE_TTL=500 python test_distributed_object_store.py
# (MC_FORCE_TCP=true as for its transfer-engine tests). Ports are free
# 127.0.0.1 ports instead of 8080/50051; the test reads them from
# MC_METADATA_SERVER and MASTER_SERVER. Clients listen on 127.0.0.1 only
# (MC_TCP_BIND_ADDRESS).
#
# The test file comes from the pinned upstream commit UPSTREAM_COMMIT and
# must match UPSTREAM_SHA256 (so "unchanged" is checked, not assumed):
#   1. from a git clone or mirror of kvcache-ai/Mooncake holding that commit:
#      $UPSTREAM_MOONCAKE (as make test-upstream-engine takes it), else
#      $UPSTREAM_GIT (default: the snapshot at
#      /work/.mirror/kvcache-ai+Mooncake/repo, when present), else
#   2. downloaded from raw.githubusercontent.com with curl.
# When neither works it prints one SKIPPED line saying how to provide it
# and exits 0 (SKIP_FAIL=1 makes that exit 1).
#
# Usage (make test-upstream-store builds what it needs first):
#   PYTHON=.venv/bin/python MOONCAKE_BIN=bin/mooncake scripts/test-upstream-store.sh
# By hand, with any checkout of upstream at that commit:
#   git -C ~/Mooncake show 3b5a594133958449a1feaf1c9e0fc1b553e34a28:mooncake-wheel/tests/test_distributed_object_store.py > /tmp/t.py
#   bin/mooncake master --default_kv_lease_ttl=500 --enable_http_metadata_server=true &
#   PYTHONPATH=compat/python:abi/python MOONCAKE_GO_LIB=$PWD/build/libmooncake.so \
#     MC_METADATA_SERVER=http://127.0.0.1:8080/metadata MASTER_SERVER=127.0.0.1:50051 \
#     DEFAULT_KV_LEASE_TTL=500 MC_FORCE_TCP=true python /tmp/t.py
set -euo pipefail

UPSTREAM_COMMIT=3b5a594133958449a1feaf1c9e0fc1b553e34a28
UPSTREAM_PATH=mooncake-wheel/tests/test_distributed_object_store.py
UPSTREAM_SHA256=5d3b3ec43915a402889def77d71ff863479ee7ec5889a257af9de8884b1f8e3a
UPSTREAM_GIT=${UPSTREAM_MOONCAKE:-${UPSTREAM_GIT:-/work/.mirror/kvcache-ai+Mooncake/repo}}

repo=$(cd "$(dirname "$0")/.." && pwd)
python=$(command -v "${PYTHON:-python3}") || { echo "test-upstream-store: no ${PYTHON:-python3}" >&2; exit 1; }
case $python in /*) ;; *) python=$PWD/$python ;; esac
bin=${MOONCAKE_BIN:-$repo/bin/mooncake}
lib=${MOONCAKE_GO_LIB:-$repo/build/libmooncake.so}
work=$(mktemp -d "${TMPDIR:-/tmp}/mc-upstream-store.XXXXXX")
master_pid=
cleanup() {
  if [ -n "$master_pid" ]; then
    kill "$master_pid" 2>/dev/null || true
    wait "$master_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

skip() {
  echo "test-upstream-store: SKIPPED: $*; give UPSTREAM_MOONCAKE=<a kvcache-ai/Mooncake clone holding $UPSTREAM_COMMIT> (or network access to raw.githubusercontent.com)"
  [ "${SKIP_FAIL:-0}" = 1 ] && exit 1
  exit 0
}

test_file=$work/test_distributed_object_store.py
if [ -d "$UPSTREAM_GIT" ] && git -C "$UPSTREAM_GIT" cat-file -e "$UPSTREAM_COMMIT:$UPSTREAM_PATH" 2>/dev/null; then
  git -C "$UPSTREAM_GIT" show "$UPSTREAM_COMMIT:$UPSTREAM_PATH" >"$test_file"
  from="$UPSTREAM_GIT at $UPSTREAM_COMMIT"
elif command -v curl >/dev/null &&
  curl -fsSL --max-time 30 -o "$test_file" "https://raw.githubusercontent.com/kvcache-ai/Mooncake/$UPSTREAM_COMMIT/$UPSTREAM_PATH" 2>/dev/null; then
  from="raw.githubusercontent.com at $UPSTREAM_COMMIT"
else
  skip "upstream's $UPSTREAM_PATH is not available (no git snapshot at $UPSTREAM_GIT, download failed)"
fi
got=$(sha256sum "$test_file" | cut -d' ' -f1)
if [ "$got" != "$UPSTREAM_SHA256" ]; then
  echo "test-upstream-store: $UPSTREAM_PATH from $from has sha256 $got, want $UPSTREAM_SHA256" >&2
  exit 1
fi
[ -x "$bin" ] || { echo "test-upstream-store: $bin not built (make build)" >&2; exit 1; }
[ -f "$lib" ] || { echo "test-upstream-store: $lib not built (make lib)" >&2; exit 1; }

free_port() { "$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
meta_port=$(free_port)
rpc_port=$(free_port)
"$bin" master --default_kv_lease_ttl=500 --enable_http_metadata_server=true \
  --rpc_address=127.0.0.1 --rpc_port="$rpc_port" --metrics_port=0 \
  --http_metadata_server_host=127.0.0.1 --http_metadata_server_port="$meta_port" >"$work/master.log" 2>&1 &
master_pid=$!
for _ in $(seq 1 300); do
  if ! kill -0 "$master_pid" 2>/dev/null; then
    echo "test-upstream-store: mooncake master exited:" >&2
    cat "$work/master.log" >&2
    exit 1
  fi
  grep -q "^mooncake master: rpc" "$work/master.log" && break
  sleep 0.1
done
grep -q "^mooncake master: rpc" "$work/master.log" || { echo "test-upstream-store: master not up after 30 s" >&2; cat "$work/master.log" >&2; exit 1; }

echo "test-upstream-store: $UPSTREAM_PATH from $from (sha256 verified), master 127.0.0.1:$rpc_port"
cd "$work"
status=0
env PYTHONPATH="$repo/compat/python:$repo/abi/python${PYTHONPATH:+:$PYTHONPATH}" MOONCAKE_GO_LIB="$lib" \
  MC_METADATA_SERVER="http://127.0.0.1:$meta_port/metadata" MASTER_SERVER="127.0.0.1:$rpc_port" \
  DEFAULT_KV_LEASE_TTL=500 MC_FORCE_TCP=true MC_TCP_BIND_ADDRESS=127.0.0.1 \
  "$python" test_distributed_object_store.py || status=$?
if [ "$status" != 0 ]; then
  echo "test-upstream-store: FAILED (exit $status); master log:" >&2
  tail -50 "$work/master.log" >&2
fi
exit "$status"
