"""mooncake_http_metadata_server / ``python -m mooncake.http_metadata_server``:
upstream Mooncake's standalone HTTP metadata server, run by mooncake-go's
`mooncake metadata-server` (same protocol: GET/PUT/DELETE
/metadata?key=K, keys in memory).

Flags as upstream's (argparse): ``--port`` (8080), ``--host`` (0.0.0.0),
``--log-level`` (accepted; the Go server logs only its start line and
errors).

``KVBootstrapServer(port, host)`` is upstream's class of the same module:
``run()`` starts the server (here as a child process running the Go
binary) and returns once it is listening, ``poll()`` says whether it is
running, ``close()`` stops it.
"""

import argparse
import enum
import os
import socket
import subprocess
import sys
import time

from . import _gflags

TOOL = "mooncake_http_metadata_server"


class KVPoll(enum.Enum):
    """Status of the server (upstream KVPoll)."""

    Failed = 0
    Bootstrapping = 1
    WaitingForInput = 2
    Transferring = 3
    Success = 4


class KVBootstrapServer:
    """An HTTP metadata server on host:port in a child process."""

    def __init__(self, port: int, host: str = "0.0.0.0"):
        self.port = port
        self.host = host
        self.proc = None

    def run(self, timeout=30.0):
        """Starts the server and waits (up to timeout seconds) until it
        accepts connections; returns the child process. Raises
        RuntimeError when it exits or does not listen in time."""
        path = _gflags.binary()
        self.proc = subprocess.Popen([path, "metadata-server", f"--host={self.host}", f"--port={self.port}"], stdin=subprocess.DEVNULL)
        probe = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host.strip("[]")
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"metadata server on {self.host}:{self.port} exited with status {self.proc.returncode}")
            try:
                socket.create_connection((probe, self.port), timeout=1).close()
                return self.proc
            except OSError:
                if time.monotonic() > deadline:
                    self.close()
                    raise RuntimeError(f"metadata server on {self.host}:{self.port} not listening after {timeout} s") from None
                time.sleep(0.05)

    def poll(self) -> KVPoll:
        if self.proc is None or self.proc.poll() is not None:
            return KVPoll.Failed
        return KVPoll.Success

    def close(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="HTTP Metadata Server for Mooncake (mooncake-go)", formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--port", type=int, default=8080, help="Port to listen on")
    parser.add_argument("--host", type=str, default="0.0.0.0", help="Host to bind to")
    parser.add_argument("--log-level", type=str, choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], default="INFO", help="Logging level (accepted; the server logs its start line and errors)")
    return parser.parse_args(argv)


def main(argv=None):
    """Entry point of mooncake_http_metadata_server: replaces this process
    with `mooncake metadata-server --host --port` (same process id)."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    _gflags.exec_binary(TOOL, ["metadata-server", f"--host={args.host}", f"--port={args.port}"])


if __name__ == "__main__":
    sys.exit(main())
