// Package config loads the Mooncake store client settings that engines
// already carry - the MOONCAKE_CONFIG_PATH JSON, the MOONCAKE_* variables,
// SGLang's and LMCache's extra-config keys - with the precedence, defaults
// and value forms of the upstream integration that would have read them,
// so that an operator switches to mooncake-go without rewriting configs.
//
// Load takes everything it reads as arguments (the environment is a map;
// FromOS builds one) and returns a Config, a Report of where each value came
// from and which keys were unknown or ignored, and an error. Upstream code
// reads each source with dict.get and silently skips what it does not
// know; Load does the same but reports it.
//
// # Keys
//
// Defaults per integration: G = Generic (Mooncake's MooncakeConfig), V =
// VLLM (MooncakeStoreConnector), S = SGLang (HiCache Mooncake backend), L =
// LMCache (MooncakestoreConnector); "-" = not read.
//
//	key                         G                  V          S                 L           environment
//	local_hostname              localhost (1)      - (2)      localhost         "" (3)      G,S MOONCAKE_LOCAL_HOSTNAME; S LOCAL_HOSTNAME; V MOONCAKE_REQUESTER_LOCAL_HOSTNAME
//	metadata_server             P2PHANDSHAKE (1)   ""         P2PHANDSHAKE      "" (3)      G,S MOONCAKE_TE_META_DATA_SERVER
//	master_server_address (4)   required           ""         required (5)      "" (3,6)    G,S MOONCAKE_MASTER
//	client_server_address       -                  -          ""                -           S MOONCAKE_CLIENT
//	global_segment_size         3355443200         4 GiB      4gb (7)           3355443200  G,S MOONCAKE_GLOBAL_SEGMENT_SIZE
//	local_buffer_size           1073741824         4 GiB      16 MiB (8)        1073741824  G MOONCAKE_LOCAL_BUFFER_SIZE; S SGLANG_MOONCAKE_LOCAL_BUFFER_SIZE
//	protocol                    tcp                rdma       rdma (9)          tcp         G,S MOONCAKE_PROTOCOL
//	device_name (4)             ""                 ""         "" (10)           "" (6)      G,S MOONCAKE_DEVICE
//	mode                        -                  embedded   -                 -
//	enable_offload              -                  false      -                 -
//	enable_ssd_offload          false              -          false             -           G MOONCAKE_OFFLOAD_ENABLED; S MOONCAKE_ENABLE_SSD_OFFLOAD
//	ssd_offload_path            ""                 -          ""                -           G,S MOONCAKE_OFFLOAD_FILE_STORAGE_PATH
//	tenant_id                   default            default    default           -           G,S MOONCAKE_TENANT_ID
//	preferred_segment           -                  "" (11)    -                 -           V MOONCAKE_PREFERRED_SEGMENT
//	standalone_storage          -                  -          false             -           S MOONCAKE_STANDALONE_STORAGE
//	master_metrics_port         -                  -          9003              -           S MOONCAKE_MASTER_METRICS_PORT
//	check_server                -                  -          false             -           S MOONCAKE_CHECK_SERVER
//	extra_backend_tag           -                  -          "" (12)           -
//	enable_group_semantics      -                  -          false (12)        -
//	transfer_timeout            -                  -          -                 1 (s)
//	storage_root_dir            -                  -          -                 ""
//	mooncake_prefer_local_alloc -                  -          -                 false (4)
//	mooncake_page_first_multi_buffer -             -          -                 false
//	mc_tls_ca_file (13)         ""                 ""         ""                ""          all MC_TLS_CA_FILE
//	mc_tls_cert_file (13)       ""                 ""         ""                ""          all MC_TLS_CERT_FILE
//	mc_tls_key_file (13)        ""                 ""         ""                ""          all MC_TLS_KEY_FILE
//	mc_tls_server_name (13)     ""                 ""         ""                ""          all MC_TLS_SERVER_NAME
//	mc_etcd_tls_ca_file (13)    ""                 ""         ""                ""          all MC_ETCD_TLS_CA_FILE
//	mc_etcd_tls_cert_file (13)  ""                 ""         ""                ""          all MC_ETCD_TLS_CERT_FILE
//	mc_etcd_tls_key_file (13)   ""                 ""         ""                ""          all MC_ETCD_TLS_KEY_FILE
//
//	(1) environment form; the file form requires the key.
//	(2) vLLM's v1 connector ignores the key: MOONCAKE_REQUESTER_LOCAL_HOSTNAME,
//	    else the rank's IP, which the adapter fills in (Config leaves it empty).
//	(3) required in extra_config; a MOONCAKE_CONFIG_PATH file may omit it.
//	(4) aliases: master_server_addr and rdma_devices (the store's dict-form
//	    setup, whose own defaults are 127.0.0.1:50051, 16 MiB and 16 MiB), and
//	    prefer_local_alloc (older LMCache).
//	(5) master_server_address or client_server_address.
//	(6) remote_url mooncakestore://host:port/?device=d fills an empty master
//	    and replaces device_name.
//	(7) for the instance: SGLang gives each rank global_segment_size/(tp*pp).
//	(8) the local_buffer_size key is ignored; only the variable counts.
//	(9) SGLang releases of 2025 defaulted to tcp.
//	(10) may be a JSON object from tensor-parallel rank to devices; see
//	    Config.DeviceForRank.
//	(11) from kv_connector_extra_config, else the variable.
//	(12) extra config only, whichever source holds the other keys.
//	(13) ours (upstream has no transport security): read from whichever
//	    file or extra config the integration reads Mooncake keys from (vLLM
//	    also from kv_connector_extra_config beside the file); a key those
//	    leave unset comes from its MC_* variable under every integration.
//	    PEM file paths for mutual TLS to the master (core/tlsconfig) and
//	    TLS to etcd; empty = plaintext.
//
// Keys that share the extra-config object with ours (vLLM's load_async,
// SGLang's backend_name, LMCache's save_chunk_meta, vllm-ascend's
// use_ascend_direct, ...) are reported as ignored, never as unknown. No
// integration reads replica_num or a soft-pin flag from its config
// (LMCache hard-codes one replica), so neither is a key here.
//
// # Precedence
//
// See Load. The rule that surprises operators: once an integration selects
// a file or an extra config, keys missing there take the defaults above,
// not the values of MOONCAKE_* variables; Report.Warnings names every
// Mooncake variable that is set but was not read. SGLang does not read
// MOONCAKE_CONFIG_PATH at all (its file variable is
// SGLANG_HICACHE_MOONCAKE_CONFIG_PATH).
//
// # Values
//
// Sizes take an integer or a string with a binary unit (ParseSize: "4gb",
// "80GB", "1GiB", "512mb", "1.5g", "1e9"): the union of Mooncake's, vLLM's
// and SGLang's parsers, all of which read units as powers of 1024. LMCache
// does not parse strings; a string size there loads with a warning.
// Booleans take JSON booleans or true/false, 1/0, yes/no, y/n, on/off; vLLM,
// SGLang and LMCache test raw values with Python truthiness, so a string
// such as "false" loads with a warning that upstream would read it as true.
// A JSON null counts as absent.
//
// # Concurrency
//
// Load and Validate are safe for concurrent use; the package keeps no
// mutable state.
package config
