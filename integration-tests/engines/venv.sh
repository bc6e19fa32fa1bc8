#!/usr/bin/env bash
# venv.sh ENGINE - print the path of ENGINE's cached virtual environment,
# building it first when no current one exists.
#
# ENGINE is a folder beside this script (vllm, ...) holding
# requirements.txt (every package pinned, dependencies included) and,
# optionally, wheel.txt (packages installed afterwards with --no-deps, for
# engine wheels whose own metadata pins something PyPI does not serve).
# The environment lives outside the repository, in
#   ${MC_ENGINE_CACHE:-$HOME/.cache/mooncake-go/engines}/ENGINE-HASH
# where HASH covers those two files, this script and the Python version:
# a fresh clone on a machine that already built it reuses it, and a change
# to any pin builds a new one (then removes ENGINE's older ones; they are
# ~6 GB each). An environment counts as current only once its .complete
# stamp is written, after every install step succeeded: a folder without it
# (an interrupted build) is removed and built again. It is built in place,
# so the console scripts in bin/ (pip, ...) name the right python.
# Concurrent callers wait on a lock.
#
# Progress goes to stderr; stdout is the path only. Exit status 1 with a
# line naming the failed step when pip fails.
set -euo pipefail

engine=${1:?usage: venv.sh ENGINE}
here=$(cd "$(dirname "$0")" && pwd)
dir="$here/$engine"
req="$dir/requirements.txt"
wheels="$dir/wheel.txt"
[ -f "$req" ] || { echo "venv.sh: no $req" >&2; exit 2; }
python=${PYTHON:-python3}
pyver=$("$python" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')

hash=$({ cat "$req"; [ -f "$wheels" ] && cat "$wheels"; cat "$0"; echo "$pyver"; } | sha256sum | cut -c1-12)
cache=${MC_ENGINE_CACHE:-$HOME/.cache/mooncake-go/engines}
venv="$cache/$engine-$hash"
mkdir -p "$cache"

if [ -f "$venv/.complete" ]; then
  echo "$venv"
  exit 0
fi

exec 9>"$cache/.$engine.lock"
flock 9
if [ -f "$venv/.complete" ]; then # built by another caller while we waited
  echo "$venv"
  exit 0
fi

echo "venv.sh: building $engine environment $venv (pins changed or first run; several minutes)" >&2
start=$(date +%s)
rm -rf "$venv"
step() {
  local what=$1
  shift
  if ! "$@" >&2; then
    echo "venv.sh: $engine: $what failed (see pip's output above)" >&2
    exit 1
  fi
}
step "python -m venv" "$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip --disable-pip-version-check --no-input)
step "pip install -r $req" "${pip[@]}" install --quiet -r "$req"
if [ -f "$wheels" ]; then
  mapfile -t extra < <(grep -v '^[[:space:]]*\(#\|$\)' "$wheels")
  if ((${#extra[@]})); then
    step "pip install --no-deps ${extra[*]}" "${pip[@]}" install --quiet --no-deps "${extra[@]}"
  fi
fi
touch "$venv/.complete"
for old in "$cache/$engine"-*; do
  [ "$old" != "$venv" ] && [ -d "$old" ] && rm -rf "$old"
done
echo "venv.sh: $engine environment ready in $(($(date +%s) - start)) s" >&2
echo "$venv"
