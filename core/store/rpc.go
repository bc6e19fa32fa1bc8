package store

// GRPCWindow is the fixed gRPC flow-control window, in bytes, of the
// master's server and of its clients' connections (per stream and per
// connection): gRPC's own BDP-estimation ceiling, set statically so that
// gRPC sends no BDP ping probes. Upstream's master speaks another RPC
// stack (coro_rpc); this has no upstream counterpart.
const GRPCWindow = 1 << 24

// MaxRequestBytes is the largest request, in bytes, the master's gRPC
// server accepts (gRPC's default receive limit, set explicitly so that the
// client's Session stream can keep under it: a larger request goes out as
// its unary call and fails alone with ResourceExhausted).
const MaxRequestBytes = 4 << 20

// MaxAnswerBytes is the largest master answer, in bytes, a client accepts
// (listings, pathological striping); the master's Session stream answers
// ResourceExhausted instead of sending more than this less a little
// framing slack.
const MaxAnswerBytes = 64 << 20
