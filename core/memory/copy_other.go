//go:build !amd64

package memory

// hasNT is false: Copy is the built-in copy on this architecture.
const hasNT = false

func stream(d, s []byte, prefetch bool, next []byte) { copy(d, s) }

func fence() {}
