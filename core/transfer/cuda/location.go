package cuda

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/mooncake-go/mooncake/core/transfer"
)

// ParseLocation splits one of upstream's buffer location tags: "cuda:N"
// returns ("cuda", N), "cpu:N" returns ("cpu", N), and the wildcard "*"
// (location unknown) returns ("*", -1). Errors: transfer.ErrInvalidArgument
// (wrapped, quoting loc) for any other kind, a missing or negative index,
// or trailing text.
func ParseLocation(loc string) (kind string, index int, err error) {
	if loc == "*" {
		return "*", -1, nil
	}
	k, idx, ok := strings.Cut(loc, ":")
	if !ok || (k != "cuda" && k != "cpu") {
		return "", 0, fmt.Errorf("%w: location %q: want cpu:N, cuda:N or *", transfer.ErrInvalidArgument, loc)
	}
	n, err := strconv.Atoi(idx)
	if err != nil || n < 0 || strconv.Itoa(n) != idx {
		return "", 0, fmt.Errorf("%w: location %q: bad index %q", transfer.ErrInvalidArgument, loc, idx)
	}
	return k, n, nil
}
