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

// GoStringN copies the n bytes at s, any bytes (NUL included), after
// checking [s, s+n) with CheckRange (errors name what and wrap
// ErrInvalidArgument: NULL, zero length, past the end of the address
// space). It is how a key given as pointer and length crosses.
func GoStringN[T Char](what string, s *T, n uintptr) (string, error) {
	// unsafe: reads s's address to validate the range.
	if err := CheckRange(what, uintptr(unsafe.Pointer(s)), n); err != nil {
		return "", err
	}
	// unsafe: [s, s+n) is C memory of one-byte chars the caller keeps
	// valid for the call; the bytes are copied and no pointer is kept.
	return string(unsafe.Slice((*byte)(unsafe.Pointer(s)), n)), nil
}
