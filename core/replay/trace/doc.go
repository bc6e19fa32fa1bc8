// Package trace parses the request traces released with the Mooncake
// FAST'25 paper ("Mooncake: Trading More Storage for Less Computation").
//
// A trace is a JSON Lines file: one JSON object per line, one line per
// request, sorted by arrival time. Every line has exactly four keys:
//
//	{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, ...]}
//
// timestamp is the arrival time in milliseconds from the start of the trace,
// input_length and output_length are token counts, and hash_ids holds one
// chained prefix hash per 512-token block of the prompt (see BlockTokens).
// Two requests sharing the first k ids share the first k blocks of KV cache.
//
// # Validation
//
// Parsing is strict, so that a damaged or foreign file is rejected instead
// of silently skewing a replay: each line must be a JSON object with exactly
// the four keys above (no unknown or duplicate keys), every number must be a
// non-negative integer literal, input_length must be positive, hash_ids must
// hold exactly ceil(input_length/512) ids, and timestamps must not decrease
// from one valid line to the next. Empty lines are errors too. Every
// rejection is a *LineError naming the file, the 1-based line number and a
// specific reason; it matches ErrMalformed with errors.Is.
//
// # Concurrency
//
// A Reader is not safe for concurrent use; Request values are plain data.
// ReadFile is the only function that touches the file system.
package trace
