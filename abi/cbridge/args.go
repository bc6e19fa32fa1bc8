package cbridge

import "C"

import (
	"fmt"
	"unsafe"
)

// Null is the error for a required pointer argument, named what, that C
// passed as NULL: it wraps ErrInvalidArgument (MC_ERR_INVALID_ARGUMENT).
func Null(what string) error {
	return fmt.Errorf("%w: %s is NULL", ErrInvalidArgument, what)
}

// Char is the C char type of any cgo package (each has its own C.char, an
// int8 or a uint8 depending on the platform).
type Char interface{ ~int8 | ~uint8 }

// GoString copies the NUL-terminated C string s; NULL gives "".
func GoString[T Char](s *T) string {
	if s == nil {
		return ""
	}
	// unsafe: s is a C string of one-byte chars, whichever package's C.char
	// it is typed as; C.GoString copies it and keeps no pointer.
	return C.GoString((*C.char)(unsafe.Pointer(s)))
}
