package trace_test

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/mooncake-go/mooncake/core/replay/trace"
)

func ExampleReader() {
	in := `{"timestamp": 0, "input_length": 1000, "output_length": 20, "hash_ids": [0, 1]}
{"timestamp": 3000, "input_length": 2000, "output_length": 5, "hash_ids": [0, 1, 2]}
`
	r := trace.NewReader(strings.NewReader(in), "example.jsonl")
	for {
		req, err := r.Next()
		if err == io.EOF {
			break
		}
		var le *trace.LineError
		if errors.As(err, &le) {
			fmt.Println(le)
			continue
		}
		fmt.Printf("t=%dms blocks=%d last block=%d tokens\n", req.Timestamp, len(req.HashIDs), req.BlockTokens(len(req.HashIDs)-1))
	}
	// Output:
	// t=0ms blocks=2 last block=488 tokens
	// example.jsonl:2: hash_ids has 3 ids but input_length 2000 needs 4
}
