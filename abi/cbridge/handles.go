package cbridge

import (
	"fmt"
	"sync"
)

// Handle is what C holds for a Go object: an integer key into a Table,
// passed to C as the value of an opaque pointer type. It is never a Go
// pointer, so C keeps no Go pointer and the garbage collector needs no pins.
// 0 is never a handle (it is NULL in C).
type Handle uint64

// Table maps handles to Go objects. Handles are never reused (a uint64
// counter), so a stale handle is reported instead of reaching a new object.
// Safe for concurrent use.
type Table struct {
	mu struct {
		sync.RWMutex
		next Handle         // last handle given out
		objs map[Handle]any // live objects
	}
}

// NewTable returns an empty table.
func NewTable() *Table {
	t := &Table{}
	t.mu.objs = map[Handle]any{}
	return t
}

// Handles is the process-wide table every adapter's exports use, so a handle
// of one kind passed where another is expected is caught by Lookup's type
// check. It is the one piece of global state the project allows (STYLE.md).
var Handles = NewTable()

// Add stores v and returns its new handle.
func (t *Table) Add(v any) Handle {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.mu.next++
	h := t.mu.next
	t.mu.objs[h] = v
	return h
}

// Len is the number of live handles.
func (t *Table) Len() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.mu.objs)
}

// Lookup returns the object of handle h, which must be a T. Errors:
// ErrInvalidArgument for 0 (NULL); ErrInvalidHandle for a handle unknown,
// released, or holding another type. what names the argument in the error.
func Lookup[T any](t *Table, h Handle, what string) (T, error) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return lookupLocked[T](t, h, what)
}

// Take is Lookup that also removes the handle, so exactly one of several
// concurrent Takes of the same handle succeeds. A handle of another type is
// left in place.
func Take[T any](t *Table, h Handle, what string) (T, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	o, err := lookupLocked[T](t, h, what)
	if err == nil {
		delete(t.mu.objs, h)
	}
	return o, err
}

// lookupLocked is Lookup with t.mu held (read or write).
func lookupLocked[T any](t *Table, h Handle, what string) (T, error) {
	var zero T
	if h == 0 {
		return zero, Null(what)
	}
	v, ok := t.mu.objs[h]
	if !ok {
		return zero, fmt.Errorf("%w: %s %#x is unknown or was released", ErrInvalidHandle, what, uint64(h))
	}
	o, ok := v.(T)
	if !ok {
		return zero, fmt.Errorf("%w: %s %#x is a %T, not a %T", ErrInvalidHandle, what, uint64(h), v, zero)
	}
	return o, nil
}
