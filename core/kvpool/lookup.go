package kvpool

import (
	"context"
	"fmt"
)

// Exister answers, in one batched call, which keys hold a readable object.
// The store client (core/store/client.Client) satisfies it.
type Exister interface {
	BatchIsExist(ctx context.Context, keys []string) ([]bool, error)
}

// LongestPrefix returns how many of keys, counted from the first, are
// present: the index of the first miss, or len(keys) when all hit. keys are
// the chained-hash keys of consecutive blocks, so a block past a miss is
// useless even when present. It makes exactly one BatchIsExist call (none
// for empty keys). Errors: the call's error, wrapped; or a reply whose
// length differs from len(keys).
func LongestPrefix(ctx context.Context, ex Exister, keys []string) (int, error) {
	if len(keys) == 0 {
		return 0, nil
	}
	found, err := ex.BatchIsExist(ctx, keys)
	if err != nil {
		return 0, fmt.Errorf("kvpool: existence check of %d keys from %q: %w", len(keys), keys[0], err)
	}
	if len(found) != len(keys) {
		return 0, fmt.Errorf("kvpool: existence check of %d keys from %q answered %d", len(keys), keys[0], len(found))
	}
	for i, ok := range found {
		if !ok {
			return i, nil
		}
	}
	return len(keys), nil
}
