package metadata_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/mooncake-go/mooncake/core/metadata"
)

func TestParseConnString(t *testing.T) {
	tests := []struct {
		in         string
		kind       string
		target     string
		wantErr    bool
		errMention string // besides the input, which every error must name
	}{
		{in: "P2PHANDSHAKE", kind: metadata.KindP2P},
		{in: "http://10.0.0.1:8080/metadata", kind: metadata.KindHTTP, target: "http://10.0.0.1:8080/metadata"},
		{in: "https://meta.example:8443/metadata?x=1", kind: metadata.KindHTTP, target: "https://meta.example:8443/metadata?x=1"},
		{in: "http://[::1]:8080/metadata", kind: metadata.KindHTTP, target: "http://[::1]:8080/metadata"},
		{in: "etcd://10.0.0.1:2379", kind: metadata.KindEtcd, target: "10.0.0.1:2379"},
		{in: "etcd://h1:2379,h2:2379", kind: metadata.KindEtcd, target: "h1:2379,h2:2379"},
		{in: "10.0.0.1:2379", kind: metadata.KindEtcd, target: "10.0.0.1:2379"},
		{in: "h1:2379,h2:2379,h3:2379", kind: metadata.KindEtcd, target: "h1:2379,h2:2379,h3:2379"},
		{in: "[::1]:2379", kind: metadata.KindEtcd, target: "[::1]:2379"},
		{in: "redis://10.0.0.1:6379", kind: metadata.KindRedis, target: "10.0.0.1:6379"},

		{in: "", wantErr: true, errMention: "empty"},
		{in: "p2phandshake", wantErr: true},
		{in: "P2PHANDSHAKE ", wantErr: true},
		{in: "zk://h:2181", wantErr: true, errMention: `"zk"`},
		{in: "HTTP://h:8080/metadata", wantErr: true, errMention: `"HTTP"`},
		{in: "://h:1", wantErr: true},
		{in: "etcd://", wantErr: true},
		{in: "etcd://h1:2379,", wantErr: true},
		{in: "etcd://h1", wantErr: true},
		{in: "etcd://:2379", wantErr: true},
		{in: "etcd://h1:0", wantErr: true},
		{in: "etcd://h1:65536", wantErr: true},
		{in: "etcd://h1:port", wantErr: true},
		{in: "localhost", wantErr: true},
		{in: " h1:2379", wantErr: true},
		{in: "h1:2379/path", wantErr: true},
		{in: "redis://", wantErr: true},
		{in: "redis://h1:6379,h2:6379", wantErr: true},
		{in: "redis://user:pw@h:6379", wantErr: true},
		{in: "http://", wantErr: true},
		{in: "http:///metadata", wantErr: true},
		{in: "http://h:8080/%zz", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			kind, target, err := metadata.ParseConnString(tt.in)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("ParseConnString(%q) = (%q, %q, nil), want error", tt.in, kind, target)
				}
				if !errors.Is(err, metadata.ErrInvalidConnString) {
					t.Errorf("error %v does not wrap ErrInvalidConnString", err)
				}
				if !strings.Contains(err.Error(), strconv.Quote(tt.in)) {
					t.Errorf("error %q does not name the input %q", err, tt.in)
				}
				if tt.errMention != "" && !strings.Contains(err.Error(), tt.errMention) {
					t.Errorf("error %q does not mention %s", err, tt.errMention)
				}
				if kind != "" || target != "" {
					t.Errorf("on error got (%q, %q), want empty results", kind, target)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseConnString(%q): %v", tt.in, err)
			}
			if kind != tt.kind || target != tt.target {
				t.Errorf("ParseConnString(%q) = (%q, %q), want (%q, %q)", tt.in, kind, target, tt.kind, tt.target)
			}
		})
	}
}
