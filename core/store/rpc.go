package store

// GRPCWindow is the fixed gRPC flow-control window, in bytes, of the
// master's server and of its clients' connections (per stream and per
// connection): gRPC's own BDP-estimation ceiling, set statically so that
// gRPC sends no BDP ping probes. Upstream's master speaks another RPC
// stack (coro_rpc); this has no upstream counterpart.
const GRPCWindow = 1 << 24
