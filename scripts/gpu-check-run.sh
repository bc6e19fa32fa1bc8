#!/usr/bin/env bash
# The run half of the GPU check (copied into the bundle as run.sh by
# scripts/gpu-check.sh build): runs the GPU tests and benchmarks of the
# bundled test binaries against the bundled libcudart.so.12 (or
# $MC_CUDART_PATH), printing one "PASS|FAIL|SKIP <test>" line per test and
# one "GBPS <transfer> <size> <GB/s>" line per measured transfer, then
# "gpu-check: PASS" or "gpu-check: FAIL" (also when any GPU test was
# skipped, even if others passed: on a GPU host a skip means the runtime
# or the device was not found). Needs only the NVIDIA driver
# (libcuda.so.1); every binary is bounded by a timeout (150 s for each
# test binary, 120 s for the benchmark: at most 7 minutes if one hangs; a
# normal run takes well under 5).
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
export MC_CUDART_PATH=${MC_CUDART_PATH:-$here/lib/libcudart.so.12}
export LD_LIBRARY_PATH=$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT
status=0

# skip_reasons FILE: the distinct messages of the skipped tests in a
# verbose go test log, at most three, indented.
skip_reasons() {
	grep -E -B1 -- '--- SKIP' "$1" | grep -vE -- '(^--$|--- SKIP|=== RUN)' | sed -E 's/^\s*[^ ]+:[0-9]+: //' | sort -u | head -3 | sed 's/^/    /'
}

# GPU tests: every TestGPU* of each binary, verbose, 120 s each at most.
for bin in "$here"/bin/*.test; do
	name=$(basename "$bin" .test)
	out=$log/$name.txt
	timeout 150 "$bin" -test.run '^TestGPU' -test.v -test.timeout 120s >"$out" 2>&1
	rc=$?
	grep -E '^\s*--- (PASS|FAIL|SKIP): TestGPU' "$out" |
		sed -E "s/^\s*--- (PASS|FAIL|SKIP): ([^ ]+) \(([^)]*)\)/\1 $name.\2 (\3)/"
	if [ $rc -ne 0 ]; then
		status=1
		echo "FAIL $name (exit $rc); its output:"
		tail -40 "$out" | sed 's/^/    /'
	elif grep -qE -- '--- SKIP: TestGPU' "$out"; then
		status=1 # on a GPU host every GPU test must run: a skip means no runtime or no device
		echo "FAIL $name: $(grep -cE -- '--- SKIP: TestGPU' "$out") GPU test(s) skipped (reasons:"
		skip_reasons "$out"
		echo "    )"
	elif ! grep -qE -- '--- PASS: TestGPU' "$out"; then
		status=1
		echo "FAIL $name: it has no GPU test"
	fi
done

# Throughput: BenchmarkGPUTransfers, 1 MiB and 64 MiB, MB/s -> GB/s.
bench=$here/bin/core-transfer-cuda.test
if [ -x "$bench" ]; then
	out=$log/bench.txt
	if timeout 120 "$bench" -test.run '^$' -test.v -test.bench '^BenchmarkGPUTransfers$' -test.benchtime 2s >"$out" 2>&1; then
		awk '/^BenchmarkGPUTransfers\// {
			split($1, p, "/"); sz = p[3]; sub(/-[0-9]+$/, "", sz)
			for (i = 2; i <= NF; i++) if ($(i+1) == "MB/s") printf "GBPS %-20s %-6s %7.2f GB/s\n", p[2], sz, $i / 1000
		}' "$out"
		grep -q '^BenchmarkGPUTransfers/' "$out" || {
			status=1
			echo "FAIL BenchmarkGPUTransfers skipped:"
			skip_reasons "$out"
		}
	else
		status=1
		echo "FAIL BenchmarkGPUTransfers; its output:"
		tail -30 "$out" | sed 's/^/    /'
	fi
fi

if [ $status -eq 0 ]; then echo "gpu-check: PASS"; else echo "gpu-check: FAIL"; fi
exit $status
