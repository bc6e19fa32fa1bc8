package metadata_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/mooncake-go/mooncake/core/metadata"
	"github.com/mooncake-go/mooncake/core/metadata/memmeta"
)

func TestDescriptorJSONFieldNames(t *testing.T) {
	tests := []struct {
		name string
		v    any
		want string
	}{
		{
			name: "tcp segment",
			v: metadata.SegmentDesc{
				Name:            "node-1",
				Protocol:        "tcp",
				TCPDataPort:     15001,
				TCPProtoVersion: 2,
				Timestamp:       "2025-01-02 03:04:05",
				Buffers: []metadata.BufferDesc{
					{Name: "cpu:0", Addr: 140737488355328, Length: 1 << 20},
					{Name: "cuda:1", Addr: 18446744073709551615, Length: 4096},
				},
			},
			want: `{"name":"node-1","protocol":"tcp","tcp_data_port":15001,"tcp_proto_version":2,` +
				`"timestamp":"2025-01-02 03:04:05","buffers":[` +
				`{"name":"cpu:0","addr":140737488355328,"length":1048576},` +
				`{"name":"cuda:1","addr":18446744073709551615,"length":4096}]}`,
		},
		{
			name: "optional fields omitted, nil buffers as []",
			v:    metadata.SegmentDesc{Name: "n", Protocol: "rdma"},
			want: `{"name":"n","protocol":"rdma","buffers":[]}`,
		},
		{
			name: "pointer encodes the same",
			v:    &metadata.SegmentDesc{Name: "n", Protocol: "tcp", Buffers: []metadata.BufferDesc{}},
			want: `{"name":"n","protocol":"tcp","buffers":[]}`,
		},
		{
			name: "rpc meta",
			v:    metadata.RPCMeta{IPOrHostName: "10.0.0.1", RPCPort: 15000},
			want: `{"ip_or_host_name":"10.0.0.1","rpc_port":15000}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := json.Marshal(tt.v)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("json.Marshal =\n  %s\nwant\n  %s", got, tt.want)
			}
		})
	}
}

// upstreamRDMASegment is shaped like upstream's encodeSegmentDesc output for
// an RDMA segment: transport-specific fields must be ignored, not rejected.
const upstreamRDMASegment = `{
  "name": "10.0.0.1:15000",
  "protocol": "rdma",
  "tcp_data_port": 0,
  "tcp_proto_version": 2,
  "timestamp": "2025-06-01 10:00:00.123",
  "rdma_server_name": "node-1",
  "devices": [{"name": "mlx5_0", "lid": 0, "gid": "fe80::1"}],
  "priority_matrix": {"cpu:0": [["mlx5_0"], []]},
  "buffers": [{"name": "cpu:0", "addr": 139637976727552, "length": 1073741824, "rkey": [1234], "lkey": [5678]}]
}`

func TestSegmentDescDecodesUpstreamDocument(t *testing.T) {
	var got metadata.SegmentDesc
	if err := json.Unmarshal([]byte(upstreamRDMASegment), &got); err != nil {
		t.Fatal(err)
	}
	want := metadata.SegmentDesc{
		Name:            "10.0.0.1:15000",
		Protocol:        "rdma",
		TCPProtoVersion: 2,
		Timestamp:       "2025-06-01 10:00:00.123",
		Buffers:         []metadata.BufferDesc{{Name: "cpu:0", Addr: 139637976727552, Length: 1 << 30}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("decoded %+v, want %+v", got, want)
	}
}

func TestSegmentHelpers(t *testing.T) {
	ctx := context.Background()
	s := memmeta.New()
	desc := metadata.SegmentDesc{
		Name:        "node-1",
		Protocol:    "tcp",
		TCPDataPort: 15001,
		Buffers:     []metadata.BufferDesc{{Name: "cpu:0", Addr: 0x7f0000000000, Length: 4096}},
	}
	if err := metadata.PutSegment(ctx, s, "c1", desc); err != nil {
		t.Fatal(err)
	}
	raw, err := s.Get(ctx, "mooncake/c1/ram/node-1")
	if err != nil {
		t.Fatalf("descriptor not at the upstream key: %v", err)
	}
	wantRaw := `{"name":"node-1","protocol":"tcp","tcp_data_port":15001,"buffers":[{"name":"cpu:0","addr":139637976727552,"length":4096}]}`
	if string(raw) != wantRaw {
		t.Errorf("stored %s, want %s", raw, wantRaw)
	}
	got, err := metadata.GetSegment(ctx, s, "c1", "node-1")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(*got, desc) {
		t.Errorf("GetSegment = %+v, want %+v", *got, desc)
	}
	// Another cluster does not see it.
	if _, err := metadata.GetSegment(ctx, s, "c2", "node-1"); !errors.Is(err, metadata.ErrNotFound) {
		t.Errorf("GetSegment in other cluster: err = %v, want ErrNotFound", err)
	}
	if err := metadata.DeleteSegment(ctx, s, "c1", "node-1"); err != nil {
		t.Fatal(err)
	}
	_, err = metadata.GetSegment(ctx, s, "c1", "node-1")
	if !errors.Is(err, metadata.ErrNotFound) {
		t.Fatalf("GetSegment after delete: err = %v, want ErrNotFound", err)
	}
	if !strings.Contains(err.Error(), "mooncake/c1/ram/node-1") {
		t.Errorf("error %q does not name the key", err)
	}
	if err := metadata.DeleteSegment(ctx, s, "c1", "node-1"); !errors.Is(err, metadata.ErrNotFound) {
		t.Errorf("second DeleteSegment: err = %v, want ErrNotFound", err)
	}
}

func TestGetSegmentMalformed(t *testing.T) {
	ctx := context.Background()
	s := memmeta.New()
	for name, doc := range map[string]string{
		"not json":             `{"name":`,
		"multi-protocol array": `{"name":"n","protocol":["tcp","hip"],"buffers":[]}`,
		"negative addr":        `{"name":"n","protocol":"tcp","buffers":[{"name":"cpu:0","addr":-1,"length":1}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			if err := s.Put(ctx, metadata.SegmentKey("", "n"), []byte(doc)); err != nil {
				t.Fatal(err)
			}
			_, err := metadata.GetSegment(ctx, s, "", "n")
			if err == nil {
				t.Fatal("GetSegment succeeded on a malformed document")
			}
			if errors.Is(err, metadata.ErrNotFound) {
				t.Errorf("malformed document reported as not found: %v", err)
			}
			if !strings.Contains(err.Error(), "mooncake/ram/n") {
				t.Errorf("error %q does not name the key", err)
			}
		})
	}
}

func TestRPCMetaHelpers(t *testing.T) {
	ctx := context.Background()
	s := memmeta.New()
	meta := metadata.RPCMeta{IPOrHostName: "10.0.0.1", RPCPort: 15000}
	if err := metadata.PutRPCMeta(ctx, s, "", "node-1", meta); err != nil {
		t.Fatal(err)
	}
	raw, err := s.Get(ctx, "mooncake/rpc_meta/node-1")
	if err != nil {
		t.Fatalf("record not at the upstream key: %v", err)
	}
	if want := `{"ip_or_host_name":"10.0.0.1","rpc_port":15000}`; string(raw) != want {
		t.Errorf("stored %s, want %s", raw, want)
	}
	got, err := metadata.GetRPCMeta(ctx, s, "", "node-1")
	if err != nil || got != meta {
		t.Fatalf("GetRPCMeta = %+v, %v; want %+v", got, err, meta)
	}
	if err := metadata.DeleteRPCMeta(ctx, s, "", "node-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := metadata.GetRPCMeta(ctx, s, "", "node-1"); !errors.Is(err, metadata.ErrNotFound) {
		t.Fatalf("GetRPCMeta after delete: err = %v, want ErrNotFound", err)
	}
}

func TestHelpersRejectEmptyNames(t *testing.T) {
	ctx := context.Background()
	s := memmeta.New()
	calls := map[string]error{
		"PutSegment":    metadata.PutSegment(ctx, s, "c1", metadata.SegmentDesc{Protocol: "tcp"}),
		"DeleteSegment": metadata.DeleteSegment(ctx, s, "c1", ""),
		"PutRPCMeta":    metadata.PutRPCMeta(ctx, s, "c1", "", metadata.RPCMeta{}),
		"DeleteRPCMeta": metadata.DeleteRPCMeta(ctx, s, "c1", ""),
	}
	_, calls["GetSegment"] = metadata.GetSegment(ctx, s, "c1", "")
	_, calls["GetRPCMeta"] = metadata.GetRPCMeta(ctx, s, "c1", "")
	for name, err := range calls {
		if !errors.Is(err, metadata.ErrInvalidKey) {
			t.Errorf("%s with empty name: err = %v, want ErrInvalidKey", name, err)
		}
	}
	if n := s.Len(); n != 0 {
		t.Errorf("store has %d keys after rejected calls, want 0", n)
	}
}
