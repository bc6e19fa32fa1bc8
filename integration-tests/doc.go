// Package integration holds end-to-end tests that run whole parts of the
// system together rather than one package at a time.
//
// The KV-cache pool tests (pool_test.go) start a real master and storage
// nodes inside the test process with localcluster.Start, all over TCP on
// 127.0.0.1 (gRPC for the master, the tcp transfer transport for value
// bytes, the embedded HTTP metadata server for segment descriptors), and
// drive them through a separate client exactly as an inference engine
// would: copying and zero-copy put/get, replicas, eviction, leases, node
// loss and bad input.
//
// Conventions: no sleeps (conditions that depend on a background loop are
// polled against a deadline), seeded randomness (the seed is logged), every
// listener on 127.0.0.1, and a goroutine-leak check after all tests in
// TestMain. The tests pass with -race.
//
// The package has no non-test code besides this file.
package integration
