"""Child process of test_env.py: renames itself with setproctitle, as
vLLM's processes do, then makes a store-mode scheduler connector whose
pool settings come only from the file MOONCAKE_CONFIG_PATH names.

    python env_peer.py ORDER CONFIG_PATH

ORDER "title-first": setproctitle, then the first library call (the Go
runtime starts after the environment block was overwritten);
"load-first": the library starts first, then setproctitle overwrites the
block the Go runtime read; "set-after-load": the library starts first,
then MOONCAKE_CONFIG_PATH is set (os.environ, i.e. libc setenv) and the
title changed. Prints "ok <layout>" or the error, exit 0 / 1.
"""

import os
import sys

import setproctitle

from mooncake_go.vllm import _abi


def main():
    order, path = sys.argv[1], sys.argv[2]
    if order == "title-first":
        setproctitle.setproctitle("VLLM::EngineCore " + "x" * 400)
        _abi._lib_handle()
    elif order == "load-first":
        _abi._lib_handle()
        setproctitle.setproctitle("VLLM::EngineCore " + "x" * 400)
    elif order == "set-after-load":
        _abi._lib_handle()
        os.environ["MOONCAKE_CONFIG_PATH"] = path
        setproctitle.setproctitle("VLLM::Worker_TP0 " + "y" * 400)
    else:
        raise SystemExit(f"unknown order {order}")
    settings = {
        "kv_role": "kv_both", "engine_id": "env-test", "model": "/models/env-model", "kv_dtype": "bfloat16",
        "layout": "vllm-lbhnc", "block_size": 16, "kv_connector_extra_config": {},
    }
    try:
        c = _abi.Connector(settings, _abi.ROLE_SCHEDULER)
    except _abi.MooncakeError as e:
        print("error", e)
        return 1
    print("ok", c.pool_error() or "pool open")
    c.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
