// Package pipeline overlaps per-layer KV transfers with the engine's
// per-layer compute: a Saver stores layer i while the engine computes layer
// i+1, and a Prefetcher loads layers ahead of the consumer. The work itself
// is a LayerFunc (store or load one layer, typically a batch put or get of
// the layer keys of every block in the step built with kvpool's LayerKey
// and GatherLayer/ScatterLayer), so the package knows nothing of the pool
// and is tested with plain functions.
//
// # Bounds
//
// Nothing here queues without bound and nothing waits without a deadline:
//
//   - Config.Window bounds the layers a component holds: a Saver never has
//     more than Window layers pending (queued or being saved), and
//     SaveLayer blocks - back-pressure on the engine - until one finishes;
//     a Prefetcher never starts layer j before the consumer has reached
//     layer j-Window+1 (entered WaitLayer for it), so at most Window layers
//     (the one being read included) are loaded or loading and not yet
//     released.
//   - Config.Workers (<= Window) bounds the LayerFunc calls running at once.
//   - Every blocking call takes a context and is additionally bounded by
//     Config.Timeout; every LayerFunc call gets a context with
//     Config.Timeout and is cancelled by Close (and, for a Prefetcher pass,
//     by Cancel). A LayerFunc must return when its context is done.
//   - A failed or timed-out layer is an error, never a hang: SaveLayer's
//     failures are returned by WaitAll, a load's failure by WaitLayer for
//     that layer.
//
// # Ordering
//
// Layers start in the order they were submitted (Saver) or in layer order
// (Prefetcher); with Workers == 1 they also finish in that order.
//
// # Concurrency
//
// Saver and Prefetcher are safe for concurrent use. Goroutines exist only
// while a LayerFunc call runs (one per call, at most Workers); Close
// cancels the component's own context and waits for them, so after Close
// returns no goroutine of the component is left. Shutdown order: stop
// calling SaveLayer/Start, optionally WaitAll, then Close.
package pipeline
