#!/usr/bin/env bash
# bench-p2p.sh MOONCAKE EMBEDDED_ETCD [bench p2p flags...]: starts an
# embedded etcd (it exits when our pipe to its stdin closes), runs
# `mooncake bench p2p --etcd <its endpoint>` with the remaining flags,
# and stops the etcd.
set -euo pipefail
mc=$1 etcd=$2
shift 2
coproc ETCD { exec "$etcd"; }
read -r -t 60 word ep <&"${ETCD[0]}" || { echo "bench-p2p: embedded etcd did not start" >&2; exit 1; }
[ "$word" = endpoint ] || { echo "bench-p2p: unexpected etcd output: $word $ep" >&2; exit 1; }
rc=0
"$mc" bench p2p --etcd "$ep" "$@" || rc=$?
kill "$ETCD_PID" 2>/dev/null || true
wait "$ETCD_PID" 2>/dev/null || true
exit $rc
