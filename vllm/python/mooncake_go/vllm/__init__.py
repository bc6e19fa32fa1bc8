"""mooncake_go.vllm: the vLLM v1 KV connector of mooncake-go.

Switch it on with no change to vLLM:

    --kv-transfer-config '{"kv_connector": "MooncakeGoConnector",
        "kv_connector_module_path": "mooncake_go.vllm",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {"master_server_address": "10.0.0.1:50051",
                                      "metadata_server": "http://10.0.0.1:8080/metadata"}}'

Importing this module loads nothing (vLLM imports it in processes that
never build a connector); libmooncake.so is loaded when a connector is
constructed. See vllm/README.md for both modes and every key.
"""

from .connector import MooncakeGoConnector, MooncakeGoMetadata

__all__ = ["MooncakeGoConnector", "MooncakeGoMetadata"]
