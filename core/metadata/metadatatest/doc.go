// Package metadatatest is the conformance suite for metadata.Store
// implementations: one set of tests (RunStoreTests) and benchmarks
// (RunStoreBenchmarks) that every backend — memmeta, httpmeta, and any later
// etcd or Redis backend — runs from its own _test.go file, in the manner of
// hashicorp/raft's transport tests.
//
// The suite pins the contract documented on metadata.Store: round trips,
// overwrite, delete, not-found and invalid-key errors matched with
// errors.Is, keys with '/', spaces, reserved URL characters and unicode,
// large values, concurrent writers, value isolation and context
// cancellation. It requires Delete of an absent key to report
// metadata.ErrNotFound, so a backend whose service cannot tell must not run
// that case through this suite.
//
// Concurrency: each sub-test gets a fresh store from the factory; tests run
// sequentially but the concurrency cases drive one store from many
// goroutines, so run the suite under -race. It never sleeps.
package metadatatest
