package client

import (
	"slices"
	"testing"
)

func TestEtcdEndpoints(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want []string
		ok   bool
	}{
		{"127.0.0.1:50051", nil, false},
		{"etcd://h1:2379", []string{"h1:2379"}, true},
		{"etcd://h1:2379,h2:2379", []string{"h1:2379", "h2:2379"}, true},
		{"etcd://h1:2379;h2:2379; h3:2379", []string{"h1:2379", "h2:2379", "h3:2379"}, true},
		{"etcd://", nil, true},
	} {
		got, ok := etcdEndpoints(tt.in)
		if ok != tt.ok || !slices.Equal(got, tt.want) {
			t.Errorf("etcdEndpoints(%q) = %q, %v; want %q, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}
