"""Refuses a `mooncake` package that mixes mooncake-go's files with
upstream Mooncake's (the mooncake-transfer-engine* wheels), whichever was
installed last.

Both distributions install a top-level `mooncake` package into the same
site-packages folder, so installing one over the other leaves a mix: after
mooncake-go over upstream, upstream's compiled engine.so/store.so shadow
our engine.py/store.py; after upstream over mooncake-go, upstream's
__init__.py runs and our leftover modules are silently half in effect.
Neither is usable, and neither would say so.

check() finds the `mooncake` package the interpreter would import and
raises ImportError with one line naming both distributions and the fix
when the folder holds files of both (our marker mooncake/_mooncake_go.py
next to upstream's compiled modules or binaries), or when both
distributions are installed in the same environment.

It runs in two places: mooncake/__init__.py of mooncake-go calls it, and
the wheel installs mooncake_go_guard.pth into site-packages, which calls
install() at interpreter start-up: install() only adds a finder to
sys.meta_path that runs check() the first time `mooncake` is imported, so
even upstream's __init__.py (after upstream was installed over ours) is
stopped with the same line. Nothing is imported or read until then.
"""

import glob
import importlib.machinery
import os
import sys

# Our marker file in the mooncake package (written by the mooncake-go wheel only).
MARKER = "_mooncake_go.py"
# Files only upstream's wheels ship in the mooncake package.
UPSTREAM_FILES = ("engine*.so", "store*.so", "_fast_copy*.so", "mooncake_master", "mooncake_client", "transfer_engine_bench")
OURS = "mooncake-go"
UPSTREAM_PREFIX = "mooncake-transfer-engine"

_checked = False


def _dists():
    """(ours, upstream): version strings of the installed distributions
    ("" when absent; upstream's as 'name version')."""
    try:
        from importlib import metadata
    except ImportError:  # pragma: no cover - Python < 3.8
        return "", ""
    ours, upstream = "", ""
    for d in metadata.distributions():
        name = (d.metadata.get("Name") or "").lower().replace("_", "-")
        if name == OURS:
            ours = d.version
        elif name.startswith(UPSTREAM_PREFIX):
            upstream = f"{name} {d.version}"
    return ours, upstream


def problem(dirs=None):
    """The one-line description of a mixed installation, or None. dirs are
    the folders of the `mooncake` package (default: where the import system
    would find it)."""
    if dirs is None:
        spec = importlib.machinery.PathFinder.find_spec("mooncake")
        if spec is None:
            return None
        dirs = list(spec.submodule_search_locations or [])
    ours_dir = upstream_dir = None
    upstream_file = ""
    for d in dirs:
        if os.path.exists(os.path.join(d, MARKER)):
            ours_dir = d
        for pat in UPSTREAM_FILES:
            hits = glob.glob(os.path.join(glob.escape(d), pat))
            if hits:
                upstream_dir, upstream_file = d, os.path.basename(hits[0])
                break
    files_mixed = ours_dir is not None and upstream_dir is not None
    if not files_mixed and ours_dir is None and upstream_dir is None:
        return None
    ours, upstream = _dists()
    if not files_mixed and not (ours and upstream):
        return None
    where = ours_dir or upstream_dir
    ours = f"{OURS} {ours}".strip() if ours else OURS
    upstream = upstream or f"upstream Mooncake ({upstream_file})"
    names = OURS + (" " + upstream.split()[0] if upstream.startswith(UPSTREAM_PREFIX) else "")
    return (
        f"mooncake: {where} mixes two distributions, {ours} and {upstream}, installed over each other; "
        f"neither works this way: run `pip uninstall -y {names}` (until no mooncake folder is left), "
        f"then install only the one you want"
    )


def check(dirs=None):
    """Raises ImportError(problem(dirs)) for a mixed installation. Checks
    once per process: the finder and mooncake/__init__.py both call it."""
    global _checked
    if _checked:
        return
    _checked = True
    msg = problem(dirs)
    if msg:
        raise ImportError(msg, name="mooncake")


class _Finder:
    """sys.meta_path entry that runs check() when `mooncake` is first
    imported and otherwise finds nothing."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == "mooncake" and not _checked:
            check()
        return None


def install():
    """Adds the finder (once) ahead of the path finders."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
