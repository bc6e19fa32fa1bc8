package store

import (
	"bytes"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestFrames: frames of every size class read back as written, one after
// another; a length over the limit and a frame cut short (small or large)
// are errors.
func TestFrames(t *testing.T) {
	var stream []byte
	values := []string{"", "x", string(bytes.Repeat([]byte("y"), frameChunk-10)), string(bytes.Repeat([]byte("z"), 5*frameChunk+3))}
	for _, v := range values {
		var err error
		stream, err = AppendFrame(stream, wrapperspb.String(v))
		require.NoError(t, err)
	}
	r := bytes.NewReader(stream)
	for _, v := range values {
		b, err := ReadFrame(r, 1<<20)
		require.NoError(t, err)
		got := new(wrapperspb.StringValue)
		require.NoError(t, proto.Unmarshal(b, got))
		assert.Equal(t, v, got.Value)
	}
	_, err := ReadFrame(r, 1<<20)
	assert.ErrorIs(t, err, io.EOF, "after the last frame")

	_, err = ReadFrame(bytes.NewReader([]byte{0, 0, 0x20, 0}), 1<<20) // 2 MiB > 1 MiB
	assert.ErrorContains(t, err, "exceeds the 1048576-byte limit")

	big := []byte{0, 0, 0x10, 0} // announces 1 MiB, sends 100 KiB
	big = append(big, make([]byte, 100<<10)...)
	b, err := ReadFrame(bytes.NewReader(big), 1<<20)
	assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
	assert.Nil(t, b)
	_, err = ReadFrame(bytes.NewReader([]byte{5, 0, 0, 0, 1}), 1<<20)
	assert.ErrorIs(t, err, io.ErrUnexpectedEOF, "small frame cut short")
}
