// Package memory owns off-heap memory for KV bytes: anonymous mmap regions
// (Map) or memfd-backed shared regions (MapShared, MapFD) for same-host peers,
// that can be registered with the transfer engine as segments or local
// buffers.
//
// Ownership and lifetime: a Region owns its mapping from Map until Close.
// Slices returned by Region.Bytes alias the mapping and must not be used
// after Close (the memory is unmapped; an access faults). The transfer engine
// never frees memory it did not map: callers unregister a region from the
// engine before they Close it.
//
// This is one of the two packages allowed to use unsafe (the other is
// abi/cbridge); each use is commented.
//
// Concurrency: a Region's methods are safe for concurrent use; the bytes
// themselves are not synchronised (concurrent writers to one range race, as
// in any shared memory).
package memory
