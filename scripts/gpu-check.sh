#!/usr/bin/env bash
# The prepared real-GPU check (issue 19).
#
#   scripts/gpu-check.sh build [DIR]   here: compile the GPU test binaries
#                                      (go test -c, CGO_ENABLED=0), take
#                                      libcudart.so.12 from PyPI's
#                                      nvidia-cuda-runtime-cu12 wheel, and
#                                      pack DIR (default build/gpu-check) and
#                                      DIR.tar.gz (at most 64 MiB)
#   DIR/run.sh                         on a GPU host with only the NVIDIA
#                                      driver: one PASS/FAIL/SKIP line per
#                                      test and GB/s per transfer, in well
#                                      under 5 minutes; exit 1 on a FAIL
#   scripts/gpu-check.sh run [DIR]     the same, from this checkout
#
# MC_CUDART_PATH, when set for run.sh, replaces the bundled libcudart (the
# stand-in library tests the run half here: make gpu-check-fake).
set -euo pipefail

cmd=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$(realpath -m "${2:-$root/build/gpu-check}")

build() {
	rm -rf "$dir"
	mkdir -p "$dir/bin" "$dir/lib"
	cd "$root"
	# The packages with GPU tests (TestGPU*, BenchmarkGPU*), pure Go:
	# purego dlopens libcudart at run time.
	for p in core/transfer/cuda vllm; do
		CGO_ENABLED=0 go test -c -trimpath -o "$dir/bin/$(echo "$p" | tr / -).test" "./$p"
	done
	if [ -n "${GPU_CHECK_CUDART:-}" ]; then # a libcudart.so.12 already at hand
		cp "$GPU_CHECK_CUDART" "$dir/lib/libcudart.so.12"
	else
		wheel=$(mktemp -d)
		trap 'rm -rf "$wheel"' EXIT
		python3 -m pip download --quiet --no-deps --only-binary=:all: \
			--platform manylinux2014_x86_64 --python-version 3.12 \
			-d "$wheel" "nvidia-cuda-runtime-cu12${GPU_CHECK_CUDART_VERSION:+==$GPU_CHECK_CUDART_VERSION}"
		python3 - "$wheel" "$dir/lib" <<-'EOF'
			import pathlib, sys, zipfile
			whl = next(pathlib.Path(sys.argv[1]).glob("*.whl"))
			with zipfile.ZipFile(whl) as z:
			    name = next(n for n in z.namelist() if n.endswith("/lib/libcudart.so.12"))
			    pathlib.Path(sys.argv[2], "libcudart.so.12").write_bytes(z.read(name))
			print(f"libcudart.so.12 from {whl.name}")
		EOF
	fi
	cp "$root/scripts/gpu-check-run.sh" "$dir/run.sh"
	chmod +x "$dir/run.sh"
	tar -C "$(dirname "$dir")" -czf "$dir.tar.gz" "$(basename "$dir")"
	size=$(stat -c %s "$dir.tar.gz")
	if [ "$size" -gt $((64 << 20)) ]; then
		echo "gpu-check: $dir.tar.gz is $size bytes, over 64 MiB" >&2
		exit 1
	fi
	echo "gpu-check: built $dir ($(du -sh "$dir" | cut -f1)) and $dir.tar.gz ($size bytes)"
	echo "gpu-check: on the GPU host: tar xzf $(basename "$dir").tar.gz && $(basename "$dir")/run.sh"
}

case $cmd in
build) build ;;
run) exec "$dir/run.sh" ;;
*)
	echo "usage: $0 build|run [DIR]" >&2
	exit 2
	;;
esac
