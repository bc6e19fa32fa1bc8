package metadata_test

import (
	"testing"

	"github.com/mooncake-go/mooncake/core/metadata"
)

func TestSegmentKey(t *testing.T) {
	tests := []struct {
		name, cluster, segment, want string
	}{
		{"plain", "", "node-1", "mooncake/ram/node-1"},
		{"host:port", "", "10.0.0.1:15000", "mooncake/ram/10.0.0.1:15000"},
		{"cluster", "c1", "node-1", "mooncake/c1/ram/node-1"},
		{"cluster with trailing slash", "c1/", "node-1", "mooncake/c1/ram/node-1"},
		{"nested cluster", "team/c1", "node-1", "mooncake/team/c1/ram/node-1"},
		{"name with slash is verbatim", "", "nvmeof/node-1", "mooncake/nvmeof/node-1"},
		{"name with slash under cluster", "c1", "nvmeof/node-1", "mooncake/c1/nvmeof/node-1"},
		{"name with leading slash", "", "/abs", "mooncake//abs"},
		{"empty name is the ram directory", "", "", "mooncake/ram/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := metadata.SegmentKey(tt.cluster, tt.segment); got != tt.want {
				t.Errorf("SegmentKey(%q, %q) = %q, want %q", tt.cluster, tt.segment, got, tt.want)
			}
		})
	}
}

func TestRPCMetaKey(t *testing.T) {
	tests := []struct {
		name, cluster, server, want string
	}{
		{"plain", "", "node-1", "mooncake/rpc_meta/node-1"},
		{"host:port", "", "10.0.0.1:15000", "mooncake/rpc_meta/10.0.0.1:15000"},
		{"cluster", "c1", "node-1", "mooncake/c1/rpc_meta/node-1"},
		{"cluster with trailing slash", "c1/", "node-1", "mooncake/c1/rpc_meta/node-1"},
		{"name with slash stays under rpc_meta", "", "a/b", "mooncake/rpc_meta/a/b"},
		{"name with slash under cluster", "c1", "a/b", "mooncake/c1/rpc_meta/a/b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := metadata.RPCMetaKey(tt.cluster, tt.server); got != tt.want {
				t.Errorf("RPCMetaKey(%q, %q) = %q, want %q", tt.cluster, tt.server, got, tt.want)
			}
		})
	}
}

func TestClusterPrefix(t *testing.T) {
	for cluster, want := range map[string]string{
		"":      "mooncake/",
		"c1":    "mooncake/c1/",
		"c1/":   "mooncake/c1/",
		"a/b":   "mooncake/a/b/",
		"a/b//": "mooncake/a/b//",
	} {
		if got := metadata.ClusterPrefix(cluster); got != want {
			t.Errorf("ClusterPrefix(%q) = %q, want %q", cluster, got, want)
		}
	}
}
