#!/usr/bin/env bash
# make fuzz / make fuzz-short: runs every Go fuzz target of the module for
# FUZZTIME each, one after another. Targets are found by their
# declaration, `func FuzzXxx(f *testing.F)` in a _test.go file, so a new
# one is picked up without editing a list. FUZZ narrows the run to the
# targets whose name matches that regular expression (FUZZ=FuzzServe).
#
# Each package's test binary is built once, instrumented for fuzzing
# (go test -c -fuzz), into build/fuzz/, and run per target from the
# package's directory with go test's own fuzz cache directory, exactly as
# `go test -run '^$' -fuzz '^FuzzXxx$' -fuzztime $FUZZTIME ./pkg` would,
# without linking the binary again for every target.
#
# FUZZMINIMIZE (default 5s) bounds the time spent minimizing each new
# input (go test's -fuzzminimizetime, 60s by default): with the default, a
# 60 s run of FuzzServe spent from its third second on minimizing one
# input, 4,845 executions in all, against 173,570 with 5s. A failing
# input is still kept, less minimized.
#
# A failing input is written to the package's testdata/fuzz/FuzzXxx/
# directory: keep it there (committed, it runs as a regression test in
# every plain `go test`) after fixing the bug it found.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-60s}
FUZZMINIMIZE=${FUZZMINIMIZE:-5s}
FUZZ=${FUZZ:-.}
module=$($GO list -m)
cache=$($GO env GOCACHE)/fuzz
targets=$(grep -rHoE --include='*_test.go' '^func Fuzz[A-Za-z0-9_]*\(f \*testing\.F\)' \
	core connectors abi vllm sglang lmcache nixl trtllm integration-tests 2>/dev/null |
	sed -E 's|^(.*)/[^/]*_test\.go:func (Fuzz[A-Za-z0-9_]*).*|\1 \2|' | sort -u)
[ -n "$targets" ] || { echo "fuzz: no fuzz targets found" >&2; exit 1; }
mkdir -p build/fuzz
n=0
start=$(date +%s)
built=""
while read -r dir name; do
	[[ $name =~ $FUZZ ]] || continue
	bin=$root/build/fuzz/${dir//\//_}.test
	if [[ $built != *" $dir "* ]]; then
		$GO test -c -fuzz . -o "$bin" "./$dir"
		built="$built $dir "
	fi
	echo "fuzz: ./$dir $name for $FUZZTIME"
	t0=$(date +%s%N)
	(cd "$dir" && "$bin" -test.run '^$' -test.fuzz "^${name}\$" -test.fuzztime "$FUZZTIME" -test.fuzzminimizetime "$FUZZMINIMIZE" \
		-test.fuzzcachedir "$cache/$module/$dir" -test.paniconexit0)
	echo "fuzz: ./$dir $name passed in $((($(date +%s%N) - t0) / 1000000)) ms"
	n=$((n + 1))
done <<<"$targets"
echo "fuzz: $n targets passed in $(($(date +%s) - start)) s (FUZZTIME=$FUZZTIME each)"
