"""vLLM general plugin of mooncake-go (entry point `mooncake_go` in the
group `vllm.general_plugins`, declared in pyproject.toml): vLLM calls
register() at start-up in each of its processes (front end, engine core,
workers; `VLLM_PLUGINS` may filter plugins by name).

It registers MooncakeGoConnector by name in vLLM's KVConnectorFactory, so
that

- `{"kv_connector": "MooncakeGoConnector"}` works without
  `kv_connector_module_path` (which keeps working too), and
- vLLM's MultiConnector can hold our connector: MultiConnector rebuilds
  each sub-connector's KVConnectorStats in the front-end process by
  registered class name (KVConnectorFactory.get_connector_class_by_name),
  and without the registration the front end fails the first step whose
  stats are ours ("Connector 'MooncakeGoConnector' is not registered").

Cost: loading the entry point imports mooncake_go.vllm (and with it the
connector's Python module; libmooncake.so is loaded only when a
connector is built), and register() imports vLLM's KVConnectorFactory
module: about 0.8-1.2 s and 400 modules in a bare Python on a 2-core
machine, less inside vLLM, which imports much of that anyway. Set
`VLLM_PLUGINS` to a list without `mooncake_go` to skip it where our
connector is not used. register() never raises into vLLM: a vLLM without
the factory, or a name taken already (another copy of this plugin), is
logged at debug level and skipped.
"""

import logging

NAME = "MooncakeGoConnector"

logger = logging.getLogger(__name__)


def register() -> None:
    """Registers NAME -> mooncake_go.vllm.connector.MooncakeGoConnector
    in vLLM's KVConnectorFactory (once per process; later calls, and a
    name already registered, do nothing). Returns None; never raises."""
    try:
        from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory

        # Raises ValueError for a name registered already (an earlier
        # call in this process): nothing to do then.
        KVConnectorFactory.register_connector(NAME, "mooncake_go.vllm.connector", NAME)
    except Exception as e:  # noqa: BLE001 - a plugin must not stop vLLM's start
        logger.debug("mooncake_go: %s not registered with vLLM's KVConnectorFactory: %s", NAME, e)
