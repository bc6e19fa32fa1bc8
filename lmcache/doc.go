// Package lmcache is the Go half of mooncake-go's LMCache remote-storage
// plugin (mooncake_go.lmcache, a RemoteConnector that LMCache 0.5.6 loads
// through remote_storage_plugins): the settings of one plugin instance
// (ParseSettings: the plugin's scope of LMCache's extra_config, or the
// upstream Mooncake JSON of MOONCAKE_CONFIG_PATH, loaded by
// connectors/config under LMCache's rules) and the Connector that serves
// LMCache's lookups, puts and gets on the pool with one store client.
//
// Values are a chunk's raw bytes, exactly as long as LMCache's memory
// object says (a partial last chunk is shorter; LMCache's reader learns
// its length from the bytes read), moved between the pool and LMCache's
// registered CPU buffer with no copy. Keys are LMCache's key strings,
// opaque, behind an optional prefix.
//
// Concurrency: a Connector is safe for concurrent use; its calls block
// (bounded by the settings' timeouts) and keep no goroutine of their own
// apart from the lookup breaker's probe. It is exported to C by
// lmcache/capi (abi/include/mooncake/lmcache.h). Built and tested without
// cgo.
package lmcache
