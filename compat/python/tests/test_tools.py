"""The upstream tool names (mooncake_master, mooncake_client,
mooncake_http_metadata_server, transfer_engine_bench): gflags command
lines translated to the `mooncake` binary's, then run for real."""

import os
import re
import socket
import subprocess
import sys
import pytest

from conftest import child_env, free_port, http_get, master_proc, stop, wait_listening

from mooncake import _gflags as g
from mooncake import cli, cli_bench, cli_client


def args_of(translate, argv):
    a, warnings, _ = translate(argv)
    return a, warnings


def flag(args, name):
    """Value of --name=V in args (the last one), or None."""
    vals = [a.split("=", 1)[1] for a in args if a.startswith(f"--{name}=")]
    return vals[-1] if vals else None


def test_gflags_syntax():
    spec = {"b": (g.BOOL, False), "n": (g.INT, 1), "s": (g.STRING, "x"), "d": (g.DOUBLE, 0.5)}
    p = g.parse("t", ["--b", "-n=3", "--s", "hello", "--d=0.25", "pos", "--", "--n=9"], spec)
    assert p.values == {"b": True, "n": 3, "s": "hello", "d": 0.25}
    assert p.given == {"b", "n", "s", "d"} and p.positional == ["pos", "--n=9"]
    assert g.parse("t", ["--nob"], spec).values["b"] is False
    for raw, want in (("true", True), ("FALSE", False), ("1", True), ("0", False), ("yes", True), ("n", False)):
        assert g.parse("t", [f"--b={raw}"], spec).values["b"] is want
    assert g.parse("t", ["--n=0x10"], spec).values["n"] == 16
    assert g.parse("t", ["--v=2", "--log_dir", "/tmp", "--logtostderr"], spec).given == set(), "glog flags are ignored"
    assert g.parse("t", ["--help"], spec).help and g.parse("t", ["-version"], spec).version
    for bad, msg in ((["--zzz"], "unknown command line flag 'zzz'"), (["--b=maybe"], "illegal value 'maybe'"),
                     (["--n=x"], "illegal value 'x'"), (["--s"], "missing its argument"), (["--nos"], "unknown command line flag 'nos'")):
        with pytest.raises(g.UsageError, match=re.escape(msg)):
            g.parse("t", bad, spec)


def test_flagfile(tmp_path):
    f = tmp_path / "flags"
    f.write_text("# a comment\n--n=5\n\n--s=from-file\n")
    p = g.parse("t", [f"--flagfile={f}", "--s=cli"], {"n": (g.INT, 1), "s": (g.STRING, "")})
    assert p.values == {"n": 5, "s": "cli"}
    with pytest.raises(g.UsageError, match="flagfile"):
        g.parse("t", [f"--flagfile={tmp_path / 'none'}"], {})


def test_durations():
    for raw, ms in (("500", 500), ("500ms", 500), ("5s", 5000), ("1.5s", 1500), ("2m", 120000), ("1h", 3600000)):
        assert g.parse_duration_ms("t", "x", raw) == ms
    for bad in ("five", "-1", "5d"):
        with pytest.raises(g.UsageError):
            g.parse_duration_ms("t", "x", bad)


def test_master_defaults_are_upstreams():
    a, warnings = args_of(cli.translate, [])
    assert a[0] == "master" and warnings == []
    assert flag(a, "rpc_port") == "50051"
    assert flag(a, "enable_http_metadata_server") == "false", "upstream's master embeds no metadata server by default"
    assert flag(a, "http_metadata_server_port") == "8080"
    assert flag(a, "default_kv_lease_ttl") == "10000" and flag(a, "default_kv_soft_pin_ttl") == "1800000"
    assert flag(a, "eviction_ratio") == "0.05" and flag(a, "eviction_high_watermark_ratio") == "0.9"
    assert flag(a, "metrics_port") == "9003" and flag(a, "client_ttl") == "10"
    assert flag(a, "enable_ha") is None


def test_master_mapping():
    a, w = args_of(cli.translate, ["--port=61351", "--max_threads=2", "--metrics_port=19003"])
    assert flag(a, "rpc_port") == "61351" and flag(a, "metrics_port") == "19003"
    assert len(w) == 1 and "--max_threads=2" in w[0] and "ignored" in w[0]
    a, _ = args_of(cli.translate, ["--port=1", "--rpc_port=2"])
    assert flag(a, "rpc_port") == "2", "rpc_port wins over port, as upstream"
    a, _ = args_of(cli.translate, ["--default_kv_lease_ttl=500", "--default_kv_soft_pin_ttl=30s", "--enable_http_metadata_server",
                                   "--noallow_evict_soft_pinned_objects", "--http_metadata_server_port", "18080"])
    assert flag(a, "default_kv_lease_ttl") == "500" and flag(a, "default_kv_soft_pin_ttl") == "30000"
    assert flag(a, "enable_http_metadata_server") == "true" and flag(a, "http_metadata_server_port") == "18080"
    assert flag(a, "allow_evict_soft_pinned_objects") == "false"
    a, _ = args_of(cli.translate, ["--enable_ha=true", "--etcd_endpoints=h1:2379;h2:2379"])
    assert flag(a, "enable_ha") == "true" and flag(a, "etcd_endpoints") == "h1:2379;h2:2379"
    a, _ = args_of(cli.translate, ["--enable_ha", "--ha_backend_connstring=etcd://h3:2379"])
    assert flag(a, "etcd_endpoints") == "h3:2379"
    a, w = args_of(cli.translate, ["--etcd_endpoints=h1:2379"])
    assert flag(a, "enable_ha") is None and "without --enable_ha" in w[0]
    a, _ = args_of(cli.translate, ["--rpc_interface=lo"])
    assert flag(a, "rpc_address") == "127.0.0.1"
    a, w = args_of(cli.translate, ["--enable_cxl=false", "--root_fs_dir=/tmp/x", "--allocation_strategy=free_ratio_first"])
    assert flag(a, "allocation_strategy") == "free_ratio_first" and len(w) == 1 and "root_fs_dir" in w[0]


@pytest.mark.parametrize("argv, msg", [
    (["--enable_cxl=true"], "--enable_cxl=true: unsupported: CXL"),
    (["--enable_snapshot"], "unsupported: snapshots"),
    (["--promotion_on_hit=1"], "unsupported: promotion"),
    (["--dynamic_replication_mode=observe"], "unsupported: dynamic"),
    (["--config_path=/etc/master.yaml"], "unsupported: a master config file"),
    (["--allocation_strategy=cxl"], "unsupported"),
    (["--enable_ha", "--ha_backend_type=redis", "--ha_backend_connstring=x"], "etcd only"),
    (["--enable_ha"], "needs --etcd_endpoints"),
    (["--default_kv_lease_ttl=soon"], "want milliseconds"),
    (["--eviction_ratio=1.5"], "between 0.0 and 1.0"),
    (["--rpc_interface=no-such-if0"], "no such interface"),
    (["--no_such_flag=1"], "unknown command line flag 'no_such_flag'"),
])
def test_master_refusals(argv, msg):
    with pytest.raises(g.UsageError, match=re.escape(msg)):
        cli.translate(argv)


def test_client_mapping():
    a, w = args_of(cli_client.translate, ["--master_server_address=127.0.0.1:61351", "--port=61352"])
    assert a[:2] == ["node", "--master=127.0.0.1:61351"]
    assert flag(a, "metadata_server") == "http://127.0.0.1:8080/metadata" and flag(a, "segment-size") == "4 GB"
    assert flag(a, "local_hostname") is None and flag(a, "bind") is None
    assert len(w) == 1 and "--port=61352" in w[0]
    a, w = args_of(cli_client.translate, ["--host=10.1.2.3", "--global_segment_size=16MB", "--protocol=rdma", "--threads=4"])
    assert flag(a, "local_hostname") == "10.1.2.3" and flag(a, "bind") == "10.1.2.3:0"
    assert flag(a, "segment-size") == "16MB" and flag(a, "protocol") == "tcp"
    assert any("rdma" in x for x in w) and any("--threads=4" in x for x in w)
    a, _ = args_of(cli_client.translate, ["--host=node-7"])
    assert flag(a, "local_hostname") == "node-7" and flag(a, "bind") is None
    with pytest.raises(g.UsageError):
        cli_client.translate(["--bogus"])
    # A bad size names the flag the user gave, not the node's.
    with pytest.raises(g.UsageError, match="--global_segment_size=abc"):
        cli_client.translate(["--global_segment_size=abc"])


def test_bench_mapping():
    a, w = args_of(cli_bench.translate, ["--mode=target", "--metadata_server=http://h:8080/metadata", "--duration=3", "--gpu_id=0"])
    assert a[:2] == ["bench", "transfer"] and flag(a, "mode") == "target" and flag(a, "duration") == "3s"
    assert flag(a, "metadata_server") == "http://h:8080/metadata" and flag(a, "protocol") == "tcp"
    assert any("--gpu_id=0" in x for x in w) and any("rdma" in x for x in w)


def run_tool(module, *argv, timeout=30):
    return subprocess.run([sys.executable, "-m", module, *argv], capture_output=True, text=True, timeout=timeout, env=child_env())


def test_tool_errors_are_one_line(mooncake_bin):
    for module, argv in (("mooncake.cli", ["--bogus"]), ("mooncake.cli", ["--enable_cxl"]), ("mooncake.cli_client", ["--bogus=1"])):
        r = run_tool(module, *argv)
        assert r.returncode == 2 and r.stderr.count("\n") == 1, (module, argv, r.stderr)
    r = subprocess.run([sys.executable, "-m", "mooncake.cli", "--port=1"], capture_output=True, text=True, timeout=30,
                       env=child_env(MC_MOONCAKE_BIN="/nonexistent/mooncake"))
    assert r.returncode == 127 and "MC_MOONCAKE_BIN" in r.stderr
    r = run_tool("mooncake.cli", "--help")
    assert r.returncode == 0 and "Mapped:" in r.stdout
    r = run_tool("mooncake.cli", "--version")
    assert r.returncode == 0 and "mooncake" in r.stdout


def start_tool(module, *argv):
    return subprocess.Popen([sys.executable, "-m", module, *argv], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=child_env())


def test_master_and_client_run(mooncake_bin, tmp_path):
    """mooncake_master with upstream's flags (embedded metadata server on)
    serves metadata and RPC in the process the caller started (exec keeps
    the pid); mooncake_client mounts a segment on it."""
    rpc, meta, metrics = free_port(), free_port(), free_port()
    m = start_tool("mooncake.cli", f"--port={rpc}", "--rpc_address=127.0.0.1", f"--metrics_port={metrics}", "--metrics_host=127.0.0.1",
                   "--enable_http_metadata_server=true", f"--http_metadata_server_port={meta}", "--http_metadata_server_host=127.0.0.1",
                   "--default_kv_lease_ttl=500", "--max_threads=2")
    try:
        wait_listening(meta, m, "mooncake_master")
        wait_listening(rpc, m, "mooncake_master")
        assert os.path.realpath(f"/proc/{m.pid}/exe") == os.path.realpath(mooncake_bin), "the wrapper exec'd the binary"
        assert http_get(f"http://127.0.0.1:{meta}/metadata?key=nothing")[0] == 404
        c = start_tool("mooncake.cli_client", f"--master_server_address=127.0.0.1:{rpc}", f"--metadata_server=http://127.0.0.1:{meta}/metadata",
                       "--global_segment_size=16MB", "--host=127.0.0.1", "--port=61352")
        try:
            line = c.stderr.readline()
            assert "--port=61352 is accepted for compatibility and ignored" in line
            line = c.stderr.readline()
            assert "contributes 16.0 MiB" in line, line
            assert c.poll() is None
        finally:
            stop(c)
        code, body = http_get(f"http://127.0.0.1:{metrics}/metrics")
        assert code == 200 and b"master_" in body
    finally:
        m.terminate()
        out, err = m.communicate(timeout=30)
    assert "--max_threads=2 is accepted" in err
    assert m.returncode == 0, err


def test_master_without_metadata_server(mooncake_bin):
    """Upstream's default: no embedded metadata server."""
    rpc, meta = free_port(), free_port()
    m = start_tool("mooncake.cli", f"--port={rpc}", "--rpc_address=127.0.0.1", "--metrics_port=0", f"--http_metadata_server_port={meta}")
    try:
        wait_listening(rpc, m, "mooncake_master")
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", meta), timeout=2).close()
    finally:
        stop(m)


def test_http_metadata_server(mooncake_bin, lib):
    port = free_port()
    s = start_tool("mooncake.http_metadata_server", "--port", str(port), "--host", "127.0.0.1", "--log-level", "DEBUG")
    try:
        wait_listening(port, s, "python -m mooncake.http_metadata_server")
        assert os.path.realpath(f"/proc/{s.pid}/exe") == os.path.realpath(mooncake_bin)
        from mooncake.engine import TransferEngine

        e = TransferEngine()
        assert e.initialize(f"127.0.0.1:{free_port()}", f"http://127.0.0.1:{port}/metadata", "tcp", "") == 0
    finally:
        stop(s)
    r = run_tool("mooncake.http_metadata_server", "--port", "notaport")
    assert r.returncode == 2


def test_kv_bootstrap_server(mooncake_bin):
    from mooncake.http_metadata_server import KVBootstrapServer, KVPoll

    port = free_port()
    srv = KVBootstrapServer(port, "127.0.0.1")
    assert srv.poll() == KVPoll.Failed
    srv.run()
    try:
        assert srv.poll() == KVPoll.Success
        assert http_get(f"http://127.0.0.1:{port}/metadata?key=x")[0] == 404
    finally:
        srv.close()
    assert srv.poll() == KVPoll.Failed
