package client

import "time"

// SetSealDelay sets sealDelay for a test and returns the restore.
func SetSealDelay(d time.Duration) (restore func()) {
	old := sealDelay
	sealDelay = d
	return func() { sealDelay = old }
}
