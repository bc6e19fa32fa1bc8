package trace

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
)

// BlockTokens is the number of prompt tokens covered by one hash id:
// every block of a request holds BlockTokens tokens except possibly the
// last, which holds the remainder of input_length.
const BlockTokens = 512

// MaxLineBytes is the longest line, in bytes and excluding the newline,
// that a Reader accepts. Longer lines are reported as a *LineError.
const MaxLineBytes = 64 << 20

// initialBufferBytes is the Reader's starting line buffer; it grows up to
// MaxLineBytes on demand.
const initialBufferBytes = 1 << 20

// ErrMalformed is matched (with errors.Is) by every *LineError.
var ErrMalformed = errors.New("trace: malformed line")

// Request is one line of a trace.
type Request struct {
	// Timestamp is the arrival time in milliseconds, relative to the
	// start of the trace.
	Timestamp int64
	// InputLength is the prompt length in tokens; always > 0 when parsed.
	InputLength int
	// OutputLength is the number of tokens to generate.
	OutputLength int
	// HashIDs holds one chained prefix hash per BlockTokens-token block
	// of the prompt, in order; len(HashIDs) == ceil(InputLength/BlockTokens)
	// when parsed.
	HashIDs []uint64
}

// BlockTokens returns the number of tokens, in [0, BlockTokens], held by
// block i of the request: BlockTokens for every block but the last, and
// InputLength - BlockTokens*(len(HashIDs)-1) for the last. It returns 0 when
// i is outside [0, len(HashIDs)) or the request holds fewer tokens than the
// block's start (possible only for hand-built, unvalidated requests).
func (r Request) BlockTokens(i int) int {
	if i < 0 || i >= len(r.HashIDs) {
		return 0
	}
	rest := r.InputLength - BlockTokens*i
	switch {
	case rest <= 0:
		return 0
	case rest > BlockTokens:
		return BlockTokens
	default:
		return rest
	}
}

// LineError reports a line that is not a valid trace request.
type LineError struct {
	// File is the name given to NewReader (or the path given to ReadFile).
	File string
	// Line is the 1-based line number.
	Line int
	// Reason says what is wrong, for example `missing field "hash_ids"`.
	Reason string
}

// Error returns "FILE:LINE: reason".
func (e *LineError) Error() string {
	return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Reason)
}

// Unwrap returns ErrMalformed.
func (e *LineError) Unwrap() error { return ErrMalformed }

// Reader streams requests from a trace, one line at a time.
type Reader struct {
	sc      *bufio.Scanner
	file    string
	line    int   // number of lines consumed so far
	prevTS  int64 // timestamp of the last valid line
	hasPrev bool  // whether prevTS is set
	err     error // sticky: io.EOF, a read error or a too-long line
	maxLine int   // longest accepted line in bytes
}

// NewReader returns a Reader over r. file names the source in errors; it is
// not opened. The Reader buffers r, so r should not be read by others.
func NewReader(r io.Reader, file string) *Reader {
	return newReader(r, file, MaxLineBytes)
}

// newReader is NewReader with a chosen line limit, for tests.
func newReader(r io.Reader, file string, maxLine int) *Reader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, min(initialBufferBytes, maxLine)), maxLine)
	return &Reader{sc: sc, file: file, maxLine: maxLine}
}

// Next returns the next request. At the end of input it returns io.EOF.
// A malformed line gives a *LineError; the Reader then stays usable and the
// next call continues with the following line (the timestamp order is
// checked against the last valid line). A read error from the underlying
// reader, or a line longer than MaxLineBytes (a *LineError), is returned by
// this and every later call.
func (r *Reader) Next() (Request, error) {
	if r.err != nil {
		return Request{}, r.err
	}
	if !r.sc.Scan() {
		switch err := r.sc.Err(); {
		case err == nil:
			r.err = io.EOF
		case errors.Is(err, bufio.ErrTooLong):
			r.err = r.lineErr(r.line+1, fmt.Sprintf("line longer than %d bytes", r.maxLine))
		default:
			r.err = fmt.Errorf("trace: read %s after line %d: %w", r.file, r.line, err)
		}
		return Request{}, r.err
	}
	r.line++
	req, reason := parseLine(r.sc.Bytes())
	if reason == "" && r.hasPrev && req.Timestamp < r.prevTS {
		reason = fmt.Sprintf("timestamp %d is before the previous line's timestamp %d", req.Timestamp, r.prevTS)
	}
	if reason != "" {
		return Request{}, r.lineErr(r.line, reason)
	}
	r.prevTS, r.hasPrev = req.Timestamp, true
	return req, nil
}

func (r *Reader) lineErr(line int, reason string) *LineError {
	return &LineError{File: r.file, Line: line, Reason: reason}
}

// ReadFile parses the trace at path and returns up to limit requests
// (all of them when limit <= 0). On error it returns the requests parsed
// before the failing line together with the error: a *LineError for a
// malformed line, or the open/read error.
func ReadFile(path string, limit int) ([]Request, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	defer f.Close()
	var out []Request
	rd := NewReader(f, path)
	for limit <= 0 || len(out) < limit {
		req, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return out, err
		}
		out = append(out, req)
	}
	return out, nil
}

// Field names, in the order they are checked.
const (
	fieldTimestamp    = "timestamp"
	fieldInputLength  = "input_length"
	fieldOutputLength = "output_length"
	fieldHashIDs      = "hash_ids"
)

// parseLine parses one line. It returns a non-empty reason when the line is
// malformed; the timestamp order is checked by the caller.
func parseLine(line []byte) (Request, string) {
	if len(bytes.TrimSpace(line)) == 0 {
		return Request{}, "empty line"
	}
	if !json.Valid(line) {
		var v any
		err := json.Unmarshal(line, &v)
		var se *json.SyntaxError
		if errors.As(err, &se) {
			// Offset counts the bytes read up to and including the
			// offending one, so it is that byte's 1-based position.
			return Request{}, fmt.Sprintf("invalid JSON at byte %d: %v", se.Offset, se)
		}
		return Request{}, "invalid JSON: " + err.Error()
	}
	i := skipSpace(line, 0)
	if line[i] != '{' {
		return Request{}, "not a JSON object: got " + describe(bytes.TrimSpace(line))
	}
	// json.Valid has vetted the line, so the scan below only has to find
	// the extent of each key and value; what follows the closing brace can
	// only be whitespace.
	var ts, in, out, ids []byte
	for i = skipSpace(line, i+1); line[i] != '}'; i = skipSpace(line, i) {
		if line[i] == ',' {
			i = skipSpace(line, i+1)
		}
		end := endOfString(line, i)
		key := line[i+1 : end-1]
		if bytes.IndexByte(key, '\\') >= 0 {
			var k string
			if err := json.Unmarshal(line[i:end], &k); err != nil {
				return Request{}, "invalid JSON: " + err.Error()
			}
			key = []byte(k)
		}
		i = skipSpace(line, skipSpace(line, end)+1) // past ':'
		end = endOfValue(line, i)
		var dst *[]byte
		switch string(key) {
		case fieldTimestamp:
			dst = &ts
		case fieldInputLength:
			dst = &in
		case fieldOutputLength:
			dst = &out
		case fieldHashIDs:
			dst = &ids
		default:
			return Request{}, fmt.Sprintf("unknown field %q", key)
		}
		if *dst != nil {
			return Request{}, fmt.Sprintf("duplicate field %q", key)
		}
		*dst = line[i:end]
		i = end
	}
	for _, f := range []struct {
		name string
		raw  []byte
	}{{fieldTimestamp, ts}, {fieldInputLength, in}, {fieldOutputLength, out}, {fieldHashIDs, ids}} {
		if f.raw == nil {
			return Request{}, fmt.Sprintf("missing field %q", f.name)
		}
	}

	var req Request
	var reason string
	if req.Timestamp, reason = parseInt(fieldTimestamp, ts); reason != "" {
		return Request{}, reason
	}
	n, reason := parseInt(fieldInputLength, in)
	if reason != "" {
		return Request{}, reason
	}
	if int64(int(n)) != n {
		return Request{}, fmt.Sprintf("field %q: %d is out of range", fieldInputLength, n)
	}
	req.InputLength = int(n)
	if n, reason = parseInt(fieldOutputLength, out); reason != "" {
		return Request{}, reason
	}
	if int64(int(n)) != n {
		return Request{}, fmt.Sprintf("field %q: %d is out of range", fieldOutputLength, n)
	}
	req.OutputLength = int(n)
	if req.HashIDs, reason = parseIDs(ids); reason != "" {
		return Request{}, reason
	}
	if req.InputLength == 0 {
		return Request{}, fmt.Sprintf("field %q must be > 0, got 0", fieldInputLength)
	}
	need := req.InputLength / BlockTokens
	if req.InputLength%BlockTokens != 0 {
		need++
	}
	if len(req.HashIDs) != need {
		return Request{}, fmt.Sprintf("hash_ids has %d ids but input_length %d needs %d",
			len(req.HashIDs), req.InputLength, need)
	}
	return req, ""
}

// parseInt parses a JSON value that must be a non-negative integer literal
// fitting in an int64.
func parseInt(field string, raw []byte) (int64, string) {
	if r := intReason(raw); r != "" {
		return 0, fmt.Sprintf("field %q: %s", field, r)
	}
	v, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		return 0, fmt.Sprintf("field %q: %s is out of range", field, raw)
	}
	return v, ""
}

// parseIDs parses the hash_ids value: an array of non-negative integer
// literals fitting in a uint64.
func parseIDs(raw []byte) ([]uint64, string) {
	if len(raw) == 0 || raw[0] != '[' {
		return nil, fmt.Sprintf("field %q: want an array of non-negative integers, got %s", fieldHashIDs, describe(raw))
	}
	if ids, ok := parseDigitArray(raw); ok {
		return ids, ""
	}
	// Slow path, to name the offending element.
	var elems []json.RawMessage
	if err := json.Unmarshal(raw, &elems); err != nil {
		return nil, fmt.Sprintf("field %q: %v", fieldHashIDs, err)
	}
	ids := make([]uint64, len(elems))
	for i, e := range elems {
		if r := intReason(e); r != "" {
			return nil, fmt.Sprintf("field %q: element %d: %s", fieldHashIDs, i, r)
		}
		v, err := strconv.ParseUint(string(e), 10, 64)
		if err != nil {
			return nil, fmt.Sprintf("field %q: element %d: %s is out of range", fieldHashIDs, i, e)
		}
		ids[i] = v
	}
	return ids, ""
}

// parseDigitArray is the fast path of parseIDs: it parses raw, a valid
// JSON array, when every element is a plain-digit literal fitting in a
// uint64, and reports false otherwise.
func parseDigitArray(raw []byte) ([]uint64, bool) {
	n := 0
	for _, c := range raw {
		if c == ',' {
			n++
		}
	}
	ids := make([]uint64, 0, n+1)
	i := 1 // past '['
	for {
		for i < len(raw) && isSpace(raw[i]) {
			i++
		}
		if i < len(raw) && raw[i] == ']' && len(ids) == 0 {
			return ids, true
		}
		start := i
		var v uint64
		for i < len(raw) && raw[i] >= '0' && raw[i] <= '9' {
			d := uint64(raw[i] - '0')
			if v > (math.MaxUint64-d)/10 {
				return nil, false
			}
			v = v*10 + d
			i++
		}
		if i == start {
			return nil, false
		}
		ids = append(ids, v)
		for i < len(raw) && isSpace(raw[i]) {
			i++
		}
		if i >= len(raw) {
			return nil, false
		}
		switch raw[i] {
		case ',':
			i++
		case ']':
			return ids, true
		default: // fraction or exponent
			return nil, false
		}
	}
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// intReason returns why a syntactically valid JSON value is not a
// non-negative integer literal (plain digits: no sign, fraction or
// exponent), or "" when it is one.
func intReason(raw []byte) string {
	if len(raw) == 0 || !(raw[0] == '-' || (raw[0] >= '0' && raw[0] <= '9')) {
		return "want a non-negative integer, got " + describe(raw)
	}
	if raw[0] == '-' {
		return "must be non-negative, got " + string(raw)
	}
	for _, c := range raw {
		if c < '0' || c > '9' {
			return "want an integer, got " + string(raw)
		}
	}
	return ""
}

// skipSpace returns the index of the first non-whitespace byte of b at or
// after i, or len(b).
func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// endOfString returns the index just past the JSON string starting at
// b[i] (a '"'); b must be valid JSON.
func endOfString(b []byte, i int) int {
	for i++; b[i] != '"'; i++ {
		if b[i] == '\\' {
			i++
		}
	}
	return i + 1
}

// endOfValue returns the index just past the JSON value starting at b[i];
// b must be valid JSON.
func endOfValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return endOfString(b, i)
	case '{', '[':
		depth := 0
		for {
			switch b[i] {
			case '"':
				i = endOfString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
	default: // number, true, false or null
		for i < len(b) && !isSpace(b[i]) && b[i] != ',' && b[i] != '}' && b[i] != ']' {
			i++
		}
		return i
	}
}

// describe names the JSON type of a value and quotes a short form of it.
func describe(raw []byte) string {
	const max = 40
	s := string(raw)
	if len(s) > max {
		s = s[:max] + "..."
	}
	kind := "value"
	if len(raw) > 0 {
		switch raw[0] {
		case '"':
			kind = "string"
		case '{':
			kind = "object"
		case '[':
			kind = "array"
		case 't', 'f':
			kind = "boolean"
		case 'n':
			kind = "null"
		default:
			kind = "number"
		}
	}
	if kind == "null" {
		return "null"
	}
	return kind + " " + s
}
