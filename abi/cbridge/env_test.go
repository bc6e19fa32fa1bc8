package cbridge

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEnvironReadsLibc(t *testing.T) {
	// Under cgo, os.Setenv also calls libc's setenv: Environ must see it.
	t.Setenv("MC_CBRIDGE_ENV_TEST", "a=b=c")
	env := Environ()
	assert.Equal(t, "a=b=c", env["MC_CBRIDGE_ENV_TEST"], "the value keeps every '=' after the first")
	require.NoError(t, os.Unsetenv("MC_CBRIDGE_ENV_TEST"))
	_, ok := Environ()["MC_CBRIDGE_ENV_TEST"]
	assert.False(t, ok, "an unset variable is gone")
	assert.Equal(t, os.Getenv("PATH"), Environ()["PATH"])
}
