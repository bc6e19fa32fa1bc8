"""Command lines in gflags' syntax (upstream Mooncake's tools parse theirs
with gflags), parsed into values that the tool wrappers (cli.py,
cli_client.py, cli_bench.py) translate into the `mooncake` binary's flags.

Accepted as gflags does: ``--flag=value`` and ``-flag=value``; ``--flag
value`` for a non-boolean flag; ``--flag`` / ``--noflag`` and
``--flag=true|false|1|0|yes|no|t|f|y|n`` (any case) for a boolean; ``--``
ends the flags. ``--flagfile=FILE`` reads more flags from FILE (one per
line, ``#`` comments), as gflags. A flag the tool does not know is an
error, as in gflags; glog's own flags (``--v``, ``--log_dir``, ...) are
accepted and ignored.
"""

import os
import sys

BOOL, INT, UINT, DOUBLE, STRING = "bool", "int", "uint", "double", "string"

# glog's flags, which every upstream tool accepts; they mean nothing here.
LOGGING_FLAGS = {
    "v": INT, "log_dir": STRING, "logtostderr": BOOL, "alsologtostderr": BOOL,
    "colorlogtostderr": BOOL, "minloglevel": INT, "stderrthreshold": INT,
    "logbuflevel": INT, "logbufsecs": INT, "max_log_size": INT, "vmodule": STRING,
    "log_prefix": BOOL, "stop_logging_if_full_disk": BOOL, "timestamp_in_logfile_name": BOOL,
}

_TRUE = {"true", "1", "yes", "t", "y"}
_FALSE = {"false", "0", "no", "f", "n"}


class UsageError(Exception):
    """A command line gflags would reject; the message is one line."""


class Parsed:
    """Result of parse: values (name -> typed value, defaults filled in),
    given (names set on the command line), positional (the other
    arguments), and help / version requests."""

    def __init__(self, spec):
        self.values = {name: default for name, (kind, default) in spec.items()}
        self.given = set()
        self.positional = []
        self.help = False
        self.version = False

    def set(self, name):
        """True when name was given on the command line."""
        return name in self.given


def _convert(tool, name, kind, raw):
    if kind == BOOL:
        v = raw.lower()
        if v in _TRUE:
            return True
        if v in _FALSE:
            return False
        raise UsageError(f"{tool}: illegal value '{raw}' specified for bool flag '{name}'")
    if kind in (INT, UINT):
        try:
            v = int(raw, 0)
        except ValueError:
            raise UsageError(f"{tool}: illegal value '{raw}' specified for {kind} flag '{name}'") from None
        if kind == UINT and v < 0:
            raise UsageError(f"{tool}: illegal value '{raw}' specified for {kind} flag '{name}'")
        return v
    if kind == DOUBLE:
        try:
            return float(raw)
        except ValueError:
            raise UsageError(f"{tool}: illegal value '{raw}' specified for double flag '{name}'") from None
    return raw


def _flagfile(tool, path, depth):
    if depth > 8:
        raise UsageError(f"{tool}: --flagfile nesting is too deep at {path}")
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise UsageError(f"{tool}: --flagfile={path}: {e.strerror}") from None
    return [ln.strip() for ln in lines if ln.strip() and not ln.strip().startswith("#")]


def parse(tool, argv, spec):
    """Parses argv (without the program name) against spec, a dict
    name -> (kind, default). Raises UsageError."""
    out = Parsed(spec)
    known = dict((n, k) for n, (k, _) in spec.items())
    args = list(argv)
    depth = 0
    i = 0
    while i < len(args):
        a = args[i]
        i += 1
        if a == "--":
            out.positional.extend(args[i:])
            break
        if not a.startswith("-") or a == "-":
            out.positional.append(a)
            continue
        body = a[2:] if a.startswith("--") else a[1:]
        name, eq, raw = body.partition("=")
        if name in ("help", "helpfull", "helpshort", "helpxml", "helpon", "helpmatch", "h"):
            out.help = True
            continue
        if name == "version":
            out.version = True
            continue
        if name == "flagfile":
            if not eq:
                if i >= len(args):
                    raise UsageError(f"{tool}: flag '{a}' is missing its argument")
                raw, i = args[i], i + 1
            depth += 1
            args[i:i] = _flagfile(tool, raw, depth)
            continue
        kind = known.get(name)
        if kind is None and name in LOGGING_FLAGS:
            kind = LOGGING_FLAGS[name]
            if kind != BOOL and not eq:
                i += 1  # skip its value
            continue
        if kind is None:
            if name.startswith("no") and not eq and known.get(name[2:]) == BOOL:
                out.values[name[2:]] = False
                out.given.add(name[2:])
                continue
            raise UsageError(f"{tool}: unknown command line flag '{name}'")
        if kind == BOOL and not eq:
            out.values[name] = True
        else:
            if not eq:
                if i >= len(args):
                    raise UsageError(f"{tool}: flag '{a}' is missing its argument")
                raw, i = args[i], i + 1
            out.values[name] = _convert(tool, name, kind, raw)
        out.given.add(name)
    return out


def parse_duration_ms(tool, name, raw):
    """Upstream's duration flags: raw milliseconds, or a number with an ms,
    s, m or h suffix. Returns whole milliseconds; raises UsageError."""
    s = str(raw).strip().lower()
    for suffix, mult in (("ms", 1), ("s", 1000), ("m", 60_000), ("h", 3_600_000)):
        if s.endswith(suffix):
            num = s[: -len(suffix)].strip()
            break
    else:
        num, mult = s, 1
    try:
        v = float(num)
    except ValueError:
        raise UsageError(f"{tool}: --{name}={raw}: want milliseconds or a duration such as 500ms, 5s, 1m, 1h") from None
    if v < 0 or v != v:
        raise UsageError(f"{tool}: --{name}={raw}: must not be negative")
    return int(v * mult)


def show(v):
    """A flag value as written on a command line (booleans as true/false)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def warn(tool, msg):
    """One warning line on stderr."""
    print(f"{tool}: warning: {msg}", file=sys.stderr, flush=True)


def fail(tool_msg, code=2):
    """Prints one error line and exits (status 2, a usage error)."""
    print(tool_msg, file=sys.stderr, flush=True)
    sys.exit(code)


def binary():
    """Path of the mooncake-go binary the tools run: $MC_MOONCAKE_BIN, else
    the one inside the installed mooncake_go package (mooncake_go/bin/
    mooncake), else bin/mooncake of the source tree this package sits in
    (`make build`)."""
    env = os.environ.get("MC_MOONCAKE_BIN")
    if env:
        return env
    tried = []
    try:
        import mooncake_go

        tried.append(os.path.join(os.path.dirname(os.path.abspath(mooncake_go.__file__)), "bin", "mooncake"))
    except ImportError:
        pass
    here = os.path.dirname(os.path.abspath(__file__))
    tried.append(os.path.join(here, "..", "..", "..", "bin", "mooncake"))
    for p in tried:
        if os.path.isfile(p):
            return os.path.normpath(p)
    return os.path.normpath(tried[0]) if tried else "mooncake"


def run_tool(tool, translate, usage, argv=None):
    """The body of every upstream-named console script: translate(argv)
    gives (binary arguments, warning lines, parsed command line), arguments
    None for --help / --version; usage() is the --help text. A UsageError
    is one line and status 2; otherwise this process becomes the binary
    (exec_binary)."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        args, warnings, p = translate(argv)
    except UsageError as e:
        fail(str(e))
    if args is None:
        if p.help:
            print(usage().rstrip("\n"))
            return 0
        exec_binary(tool, ["--version"])
    for w in warnings:
        warn(tool, w)
    exec_binary(tool, args)


def exec_binary(tool, args):
    """Replaces this process with `mooncake ARGS` (the process id stays the
    one the caller started, as upstream's wrappers keep it). Exits with
    status 127 and one line when the binary is missing."""
    path = binary()
    if not os.path.isfile(path):
        fail(f"{tool}: the mooncake-go binary is not at {path}: reinstall the mooncake-go wheel, "
             f"run `make build` in a source tree, or set MC_MOONCAKE_BIN", 127)
    if not os.access(path, os.X_OK):
        try:
            os.chmod(path, os.stat(path).st_mode | 0o111)
        except OSError as e:
            fail(f"{tool}: {path} is not executable: {e.strerror}", 126)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(path, [path, *args])
