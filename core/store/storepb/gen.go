// Package storepb holds the master service's protobuf messages and gRPC
// stubs, generated from master.proto (run `go generate ./core/store/storepb`
// with protoc, protoc-gen-go and protoc-gen-go-grpc on PATH).
package storepb

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative master.proto
