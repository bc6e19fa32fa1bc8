//go:build rdma

package rdma

import "testing"

// TestIBVAccess: the access bits reach ibv_reg_mr as the verbs flags they
// name (IBV_ACCESS_LOCAL_WRITE 1, _REMOTE_WRITE 2, _REMOTE_READ 4 in
// libibverbs' ABI), so a read-only grant carries no remote write.
func TestIBVAccess(t *testing.T) {
	for _, tc := range []struct {
		acc  access
		want int
	}{
		{0, 0},
		{accLocalWrite, 1},
		{accRemoteRead, 4},
		{accLocalWrite | accRemoteRead, 1 | 4},
		{accLocalWrite | accRemoteRead | accRemoteWrite, 1 | 2 | 4},
		{remoteAccess(false), 1 | 4},
		{remoteAccess(true), 1 | 2 | 4},
	} {
		if got := ibvAccess(tc.acc); got != tc.want {
			t.Errorf("ibvAccess(%03b) = %#x, want %#x", tc.acc, got, tc.want)
		}
	}
}
