//go:build !amd64

package memory

// hasNT is false: Copy is the built-in copy on this architecture.
const hasNT = false

func copyNT(d, s []byte) { copy(d, s) }
