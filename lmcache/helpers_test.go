package lmcache

import (
	"testing"

	"github.com/mooncake-go/mooncake/core/testutil/leakcheck"
)

// TestMain runs the tests with a goroutine leak check.
func TestMain(m *testing.M) { leakcheck.Main(m) }
