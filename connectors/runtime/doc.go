// Package runtime is the engine-neutral core of a KV connector: the
// scheduler half decides what to load and save, the worker half moves the
// bytes and reports completions, in the shape vLLM's v1 connector API has
// (KVConnectorBase_V1) and the other engines can be mapped onto. An
// adapter (vllm/, sglang/, ...) only translates its engine's types into
// LookupRequest, UpdateAfterAlloc, SaveRequest and Plan and back.
//
// # Scheduler half
//
// Scheduler.Lookup (get_num_new_matched_tokens) checks, in one
// BatchIsExist call with a deadline, which of a request's block keys past
// the engine's local hit are present on every shard, and answers in whole
// blocks - never every token for a synchronous load. UpdateAfterAlloc
// (update_state_after_alloc) turns an accepted hit into a LoadSpec;
// PlanSave turns blocks that became full into a SaveSpec; RequestFinished
// (request_finished) says whether the engine must hold the request's
// blocks until its saves are reported. BuildPlan (build_connector_meta)
// hands the step's Plan to every worker.
//
// # Worker half
//
// Worker.Start (start_load_kv) launches the plan's loads (Loader) and
// saves (Saver) on goroutines, at most MaxInFlight calls at once, each
// with a deadline. WaitForLoad (wait_for_layer_load, whole-block loads)
// and WaitForSave (wait_for_save) wait with deadlines. GetFinished
// (get_finished) and FailedBlocks (get_block_ids_with_load_errors) report
// completions once each.
//
// # Invariants
//
//   - Every async load ends in finishedRecving exactly once: landed,
//     failed, timed out, or cancelled because the request finished (an
//     abort) - a request never waits forever for its KV.
//   - Every block whose load failed or timed out is in FailedBlocks no
//     later than the step in which its request is in finishedRecving
//     (call GetFinished before FailedBlocks, as vLLM does); synchronous
//     loads report failures in their own step. Blocks of a load cancelled
//     by an abort are not reported: nobody reads them.
//   - A request is in finishedSending exactly once, after its saves
//     finished (stored or failed), iff it had saves - exactly when
//     RequestFinished returned true.
//   - Finished requests leave no state behind (Tracked drops to 0) and no
//     goroutine outlives its job; Close cancels every job and waits.
//
// Loader and Saver must return when their context is done; the deadlines
// above rely on it.
//
// # Concurrency
//
// Scheduler and Worker are safe for concurrent use; neither holds its
// lock across I/O. Plans are values: Start does not keep the caller's
// slices.
package runtime
