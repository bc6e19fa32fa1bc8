package kvpool_test

import (
	"github.com/mooncake-go/mooncake/core/kvpool"
	"github.com/mooncake-go/mooncake/core/store/client"
)

// The store client is the production Exister.
var _ kvpool.Exister = (*client.Client)(nil)
