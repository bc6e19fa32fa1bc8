// Package memmeta is the in-memory metadata.Store: the twin of upstream's
// metadata backends (etcd, Redis, HTTP) that tests and single-process setups
// use. It keeps every key in one map in process memory and never does I/O.
//
// It behaves like the strictest backend: Get and Delete of an absent key
// return errors wrapping metadata.ErrNotFound (as the HTTP server embedded in
// mooncake_master), an empty key returns metadata.ErrInvalidKey, and a
// canceled context fails the call with ctx.Err() before any state changes.
//
// Concurrency: a Store is safe for concurrent use; one mutex guards the map,
// and values are copied in on Put and out on Get, so no caller ever shares a
// slice with the store or with another caller.
package memmeta
