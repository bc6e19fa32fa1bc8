package trace

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"
)

// Paths of the reference traces, relative to this package.
var (
	conversationPath = filepath.Join("..", "traces", "conversation_trace.jsonl")
	syntheticPath    = filepath.Join("..", "traces", "synthetic_trace.jsonl")
)

const goodLine = `{"timestamp": 10, "input_length": 1025, "output_length": 7, "hash_ids": [0, 1, 2]}`

func TestRequestBlockTokens(t *testing.T) {
	tests := []struct {
		name string
		req  Request
		want []int // indexes -1 .. len(HashIDs)
	}{
		{"one partial block", Request{InputLength: 13, HashIDs: []uint64{0}}, []int{0, 13, 0}},
		{"one full block", Request{InputLength: 512, HashIDs: []uint64{0}}, []int{0, 512, 0}},
		{"partial last", Request{InputLength: 1025, HashIDs: []uint64{0, 1, 2}}, []int{0, 512, 512, 1, 0}},
		{"full last", Request{InputLength: 1536, HashIDs: []uint64{0, 1, 2}}, []int{0, 512, 512, 512, 0}},
		{"too few tokens (unvalidated)", Request{InputLength: 600, HashIDs: []uint64{0, 1, 2}}, []int{0, 512, 88, 0, 0}},
		{"no ids", Request{InputLength: 600}, []int{0, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for i, want := range tt.want {
				if got := tt.req.BlockTokens(i - 1); got != want {
					t.Errorf("BlockTokens(%d) = %d, want %d", i-1, got, want)
				}
			}
		})
	}
}

func TestReaderValid(t *testing.T) {
	in := goodLine + "\r\n" +
		"  {\"hash_ids\":[ 5 ],\"output_length\":0,\"input_length\":512,\"time\\u0073tamp\":10}  \n" +
		`{"timestamp": 11, "input_length": 1, "output_length": 2, "hash_ids": [18446744073709551615]}` // no final newline
	want := []Request{
		{Timestamp: 10, InputLength: 1025, OutputLength: 7, HashIDs: []uint64{0, 1, 2}},
		{Timestamp: 10, InputLength: 512, OutputLength: 0, HashIDs: []uint64{5}},
		{Timestamp: 11, InputLength: 1, OutputLength: 2, HashIDs: []uint64{1<<64 - 1}},
	}
	r := NewReader(strings.NewReader(in), "x.jsonl")
	for i, w := range want {
		got, err := r.Next()
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if !equalRequest(got, w) {
			t.Fatalf("request %d = %+v, want %+v", i, got, w)
		}
	}
	for range 2 {
		if _, err := r.Next(); err != io.EOF {
			t.Fatalf("at end: err = %v, want io.EOF", err)
		}
	}
}

func TestReaderMalformed(t *testing.T) {
	tests := []struct {
		name   string
		lines  []string // the last one is the bad line
		reason string
	}{
		{"empty line", []string{goodLine, ""}, "empty line"},
		{"blank line", []string{"  \t"}, "empty line"},
		{"not JSON", []string{goodLine, goodLine, "hello"}, "invalid JSON at byte 1: invalid character 'h' looking for beginning of value"},
		{"truncated", []string{`{"timestamp": 1`}, "invalid JSON at byte 15: unexpected end of JSON input"},
		{"trailing data", []string{goodLine + " 5"}, "invalid JSON at byte 84: invalid character '5' after top-level value"},
		{"two objects", []string{goodLine + goodLine}, "invalid JSON at byte 83: invalid character '{' after top-level value"},
		{"trailing comma", []string{`{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [0],}`}, "invalid JSON at byte 73: invalid character '}' looking for beginning of object key string"},
		{"array", []string{`[1, 2]`}, "not a JSON object: got array [1, 2]"},
		{"number", []string{`7`}, "not a JSON object: got number 7"},
		{"null", []string{`null`}, "not a JSON object: got null"},
		{"unknown field", []string{`{"timestamp": 0, "model": "x", "input_length": 1, "output_length": 1, "hash_ids": [0]}`}, `unknown field "model"`},
		{"field case", []string{`{"Timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [0]}`}, `unknown field "Timestamp"`},
		{"duplicate field", []string{`{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [0], "timestamp": 0}`}, `duplicate field "timestamp"`},
		{"missing timestamp", []string{`{"input_length": 1, "output_length": 1, "hash_ids": [0]}`}, `missing field "timestamp"`},
		{"missing input_length", []string{`{"timestamp": 0, "output_length": 1, "hash_ids": [0]}`}, `missing field "input_length"`},
		{"missing output_length", []string{`{"timestamp": 0, "input_length": 1, "hash_ids": [0]}`}, `missing field "output_length"`},
		{"missing hash_ids", []string{`{"timestamp": 0, "input_length": 1, "output_length": 1}`}, `missing field "hash_ids"`},
		{"empty object", []string{`{}`}, `missing field "timestamp"`},
		{"timestamp string", []string{`{"timestamp": "0", "input_length": 1, "output_length": 1, "hash_ids": [0]}`}, `field "timestamp": want a non-negative integer, got string "0"`},
		{"timestamp tricky string", []string{`{"timestamp": "}]\",", "input_length": 1, "output_length": 1, "hash_ids": [0]}`}, `field "timestamp": want a non-negative integer, got string "}]\","`},
		{"escaped duplicate", []string{`{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [0], "time\u0073tamp": 0}`}, `duplicate field "timestamp"`},
		{"escaped unknown", []string{`{"a\"b": 0}`}, `unknown field "a\"b"`},
		{"timestamp null", []string{`{"timestamp": null, "input_length": 1, "output_length": 1, "hash_ids": [0]}`}, `field "timestamp": want a non-negative integer, got null`},
		{"timestamp negative", []string{`{"timestamp": -5, "input_length": 1, "output_length": 1, "hash_ids": [0]}`}, `field "timestamp": must be non-negative, got -5`},
		{"timestamp fraction", []string{`{"timestamp": 1.5, "input_length": 1, "output_length": 1, "hash_ids": [0]}`}, `field "timestamp": want an integer, got 1.5`},
		{"timestamp exponent", []string{`{"timestamp": 1e3, "input_length": 1, "output_length": 1, "hash_ids": [0]}`}, `field "timestamp": want an integer, got 1e3`},
		{"timestamp overflow", []string{`{"timestamp": 9223372036854775808, "input_length": 1, "output_length": 1, "hash_ids": [0]}`}, `field "timestamp": 9223372036854775808 is out of range`},
		{"input_length bool", []string{`{"timestamp": 0, "input_length": true, "output_length": 1, "hash_ids": [0]}`}, `field "input_length": want a non-negative integer, got boolean true`},
		{"output_length negative", []string{`{"timestamp": 0, "input_length": 1, "output_length": -1, "hash_ids": [0]}`}, `field "output_length": must be non-negative, got -1`},
		{"output_length object", []string{`{"timestamp": 0, "input_length": 1, "output_length": {"a": 1}, "hash_ids": [0]}`}, `field "output_length": want a non-negative integer, got object {"a": 1}`},
		{"hash_ids object", []string{`{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": {}}`}, `field "hash_ids": want an array of non-negative integers, got object {}`},
		{"hash_ids null", []string{`{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": null}`}, `field "hash_ids": want an array of non-negative integers, got null`},
		{"hash_ids string element", []string{`{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [0, "1"]}`}, `field "hash_ids": element 1: want a non-negative integer, got string "1"`},
		{"hash_ids negative element", []string{`{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [-1, 1]}`}, `field "hash_ids": element 0: must be non-negative, got -1`},
		{"hash_ids nested element", []string{`{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [[0], 1]}`}, `field "hash_ids": element 0: want a non-negative integer, got array [0]`},
		{"hash_ids exponent element", []string{`{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [0, 1E2]}`}, `field "hash_ids": element 1: want an integer, got 1E2`},
		{"hash_ids float element", []string{`{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [0, 1.0]}`}, `field "hash_ids": element 1: want an integer, got 1.0`},
		{"hash_ids overflow element", []string{`{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [18446744073709551616]}`}, `field "hash_ids": element 0: 18446744073709551616 is out of range`},
		{"input_length zero", []string{`{"timestamp": 0, "input_length": 0, "output_length": 1, "hash_ids": []}`}, `field "input_length" must be > 0, got 0`},
		{"too few ids", []string{`{"timestamp": 0, "input_length": 2000, "output_length": 1, "hash_ids": [0, 1, 2]}`}, `hash_ids has 3 ids but input_length 2000 needs 4`},
		{"too many ids", []string{`{"timestamp": 0, "input_length": 512, "output_length": 1, "hash_ids": [0, 1]}`}, `hash_ids has 2 ids but input_length 512 needs 1`},
		{"no ids", []string{`{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": []}`}, `hash_ids has 0 ids but input_length 1 needs 1`},
		{"timestamp decreases", []string{goodLine, goodLine, `{"timestamp": 9, "input_length": 1, "output_length": 1, "hash_ids": [0]}`}, `timestamp 9 is before the previous line's timestamp 10`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := strings.Join(tt.lines, "\n") + "\n" + goodLine + "\n"
			r := NewReader(strings.NewReader(in), "t.jsonl")
			for i := range len(tt.lines) - 1 {
				if _, err := r.Next(); err != nil {
					t.Fatalf("line %d: unexpected error %v", i+1, err)
				}
			}
			_, err := r.Next()
			var le *LineError
			if !errors.As(err, &le) {
				t.Fatalf("err = %v (%T), want *LineError", err, err)
			}
			want := LineError{File: "t.jsonl", Line: len(tt.lines), Reason: tt.reason}
			if *le != want {
				t.Fatalf("err = %#v, want %#v", *le, want)
			}
			if !errors.Is(err, ErrMalformed) {
				t.Errorf("errors.Is(err, ErrMalformed) = false")
			}
			// The reader recovers and goes on with the next line.
			if _, err := r.Next(); err != nil {
				t.Fatalf("line after the bad one: %v", err)
			}
			if _, err := r.Next(); err != io.EOF {
				t.Fatalf("at end: err = %v, want io.EOF", err)
			}
		})
	}
}

func TestLineErrorFormat(t *testing.T) {
	e := &LineError{File: "a/b.jsonl", Line: 42, Reason: `missing field "hash_ids"`}
	if got, want := e.Error(), `a/b.jsonl:42: missing field "hash_ids"`; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
}

func TestReaderLongLine(t *testing.T) {
	long := `{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [0]}` + strings.Repeat(" ", 200)
	tests := []struct {
		name    string
		maxLine int
		wantErr string
	}{
		{"fits", 512, ""},
		{"too long", 128, "t.jsonl:2: line longer than 128 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newReader(strings.NewReader("{\"timestamp\":0,\"input_length\":1,\"output_length\":1,\"hash_ids\":[0]}\n"+long+"\n"), "t.jsonl", tt.maxLine)
			if _, err := r.Next(); err != nil {
				t.Fatal(err)
			}
			_, err := r.Next()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || err.Error() != tt.wantErr {
				t.Fatalf("err = %v, want %q", err, tt.wantErr)
			}
			if _, err2 := r.Next(); err2 != err {
				t.Fatalf("error not sticky: %v then %v", err, err2)
			}
		})
	}
}

func TestReaderReadError(t *testing.T) {
	boom := errors.New("boom")
	r := NewReader(io.MultiReader(strings.NewReader(goodLine+"\n"), iotest.ErrReader(boom)), "t.jsonl")
	if _, err := r.Next(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		_, err := r.Next()
		if !errors.Is(err, boom) || errors.Is(err, ErrMalformed) {
			t.Fatalf("err = %v, want wrapped boom", err)
		}
	}
}

func TestReadFileErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := ReadFile(filepath.Join(dir, "missing.jsonl"), 0); err == nil || !strings.Contains(err.Error(), "missing.jsonl") {
		t.Fatalf("missing file: err = %v", err)
	}
}

func TestReadFileFirst500(t *testing.T) {
	reqs, err := ReadFile(conversationPath, 500)
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 500 {
		t.Fatalf("got %d requests, want 500", len(reqs))
	}
	first := Request{Timestamp: 0, InputLength: 6758, OutputLength: 500, HashIDs: []uint64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}}
	if !equalRequest(reqs[0], first) {
		t.Fatalf("first request = %+v, want %+v", reqs[0], first)
	}
	for i, r := range reqs {
		if r.HashIDs[0] != 0 {
			t.Errorf("request %d starts with id %d, want the shared id 0", i, r.HashIDs[0])
		}
		sum := 0
		for b := range r.HashIDs {
			n := r.BlockTokens(b)
			if n <= 0 || n > BlockTokens || (b < len(r.HashIDs)-1 && n != BlockTokens) {
				t.Fatalf("request %d block %d holds %d tokens", i, b, n)
			}
			sum += n
		}
		if sum != r.InputLength {
			t.Fatalf("request %d: blocks hold %d tokens, input_length %d", i, sum, r.InputLength)
		}
	}
}

func TestReadFileFull(t *testing.T) {
	tests := []struct {
		path         string
		lines        int
		inputTokens  int64
		blocks       int64
		lastTS       int64
		uniqueBlocks int
	}{
		{conversationPath, 12031, 144793823, 288500, 3536999, 182790},
		{syntheticPath, 3993, 61194628, 121877, 1022025, 43924},
	}
	for _, tt := range tests {
		t.Run(filepath.Base(tt.path), func(t *testing.T) {
			reqs, err := ReadFile(tt.path, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(reqs) != tt.lines {
				t.Fatalf("got %d requests, want %d", len(reqs), tt.lines)
			}
			var tokens, blocks int64
			seen := make(map[uint64]struct{})
			for _, r := range reqs {
				tokens += int64(r.InputLength)
				blocks += int64(len(r.HashIDs))
				for _, id := range r.HashIDs {
					seen[id] = struct{}{}
				}
			}
			if tokens != tt.inputTokens || blocks != tt.blocks || len(seen) != tt.uniqueBlocks {
				t.Errorf("tokens, blocks, unique = %d, %d, %d; want %d, %d, %d",
					tokens, blocks, len(seen), tt.inputTokens, tt.blocks, tt.uniqueBlocks)
			}
			if got := reqs[len(reqs)-1].Timestamp; got != tt.lastTS {
				t.Errorf("last timestamp = %d, want %d", got, tt.lastTS)
			}
		})
	}
}

func equalRequest(a, b Request) bool {
	if a.Timestamp != b.Timestamp || a.InputLength != b.InputLength || a.OutputLength != b.OutputLength || len(a.HashIDs) != len(b.HashIDs) {
		return false
	}
	for i := range a.HashIDs {
		if a.HashIDs[i] != b.HashIDs[i] {
			return false
		}
	}
	return true
}

func BenchmarkReader(b *testing.B) {
	data, err := os.ReadFile(conversationPath)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		r := NewReader(bytes.NewReader(data), "conversation")
		for {
			_, err := r.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
		}
	}
}

// FuzzParseLine checks that parseLine never panics and that whatever it
// accepts decodes to the same request with encoding/json.
func FuzzParseLine(f *testing.F) {
	for _, s := range []string{goodLine, `{}`, `[1]`, `{"a":[{"b":"]"}]}`, `{"hash_ids":[1,2,[3]]}`, `{"time\u0073tamp": 1}`, " ", `"x"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		req, reason := parseLine(line)
		if reason != "" {
			return
		}
		var v struct {
			Timestamp    *int64    `json:"timestamp"`
			InputLength  *int      `json:"input_length"`
			OutputLength *int      `json:"output_length"`
			HashIDs      *[]uint64 `json:"hash_ids"`
		}
		if err := json.Unmarshal(line, &v); err != nil {
			t.Fatalf("accepted %q, encoding/json says %v", line, err)
		}
		if v.Timestamp == nil || v.InputLength == nil || v.OutputLength == nil || v.HashIDs == nil {
			t.Fatalf("accepted %q with a missing field", line)
		}
		want := Request{Timestamp: *v.Timestamp, InputLength: *v.InputLength, OutputLength: *v.OutputLength, HashIDs: *v.HashIDs}
		if !equalRequest(req, want) {
			t.Fatalf("parsed %q as %+v, encoding/json gives %+v", line, req, want)
		}
	})
}
