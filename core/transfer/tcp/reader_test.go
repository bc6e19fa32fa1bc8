package tcp

import (
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"testing"

	"github.com/stretchr/testify/require"
)

// readerPipes are the connections the frameReader tests read through: a
// real TCP socket (the readv path) and net.Pipe (plain reads). Each
// returns the reading end, then the writing end.
var readerPipes = map[string]func(t *testing.T) (net.Conn, net.Conn){
	"tcp": func(t *testing.T) (net.Conn, net.Conn) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer l.Close()
		c, err := net.Dial("tcp", l.Addr().String())
		require.NoError(t, err)
		s, err := l.Accept()
		require.NoError(t, err)
		return c, s
	},
	"pipe": func(t *testing.T) (net.Conn, net.Conn) { return net.Pipe() },
}

// framedStream returns a stream of 8-byte status frames (statusMagic|i)
// each followed by a random payload of sizes[i] bytes, and a trailing
// frame statusMagic|0xFF; and the payloads.
func framedStream(r *rand.Rand, sizes []int) (stream []byte, payloads [][]byte) {
	for i, n := range sizes {
		stream = binary.LittleEndian.AppendUint64(stream, statusMagic|uint64(i))
		p := make([]byte, n)
		for j := range p {
			p[j] = byte(r.Uint32())
		}
		payloads = append(payloads, p)
		stream = append(stream, p...)
	}
	return binary.LittleEndian.AppendUint64(stream, statusMagic|0xFF), payloads
}

// dribble writes stream to wc in uneven writes of 1 to most bytes, so
// reads see partial frames and payloads, then closes wc; the channel
// gets the first write error or Close's result.
func dribble(wc net.Conn, stream []byte, r *rand.Rand, most int) <-chan error {
	done := make(chan error, 1)
	go func() {
		for off := 0; off < len(stream); {
			n := min(len(stream)-off, 1+r.IntN(most))
			if _, err := wc.Write(stream[off : off+n]); err != nil {
				done <- err
				return
			}
			off += n
		}
		done <- wc.Close()
	}()
	return done
}

// TestReadFullV streams status frames each followed by a payload and
// reads them as the initiator's reader does (next for the frame,
// readFullV for the payload) into scatter lists of tiny, odd and large
// buffers, more of them than one readv takes, over a real TCP socket
// (readv path) and over net.Pipe (plain reads).
func TestReadFullV(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	// Payload layouts: buffer lengths of one frame's payload.
	layouts := [][]int{
		{1}, {3, 5}, {4096}, {7, 70000, 1}, {64 << 10}, {2, 2, 2, 2, 2},
	}
	var many []int // more buffers than maxReadIOV
	for range 3*maxReadIOV + 7 {
		many = append(many, 1+r.IntN(40))
	}
	layouts = append(layouts, many)
	var sizes []int
	for _, l := range layouts {
		n := 0
		for _, k := range l {
			n += k
		}
		sizes = append(sizes, n)
	}
	stream, payloads := framedStream(r, sizes)

	for name, mk := range readerPipes {
		t.Run(name, func(t *testing.T) {
			rc, wc := mk(t)
			defer rc.Close()
			done := dribble(wc, stream, r, 9000)
			fr := newFrameReader(rc, clientReadBuffer, statusLen)
			for i, l := range layouts {
				st, err := fr.next(statusLen)
				require.NoError(t, err, "frame %d", i)
				require.Equal(t, statusMagic|uint64(i), binary.LittleEndian.Uint64(st), "frame %d", i)
				var dst [][]byte
				for _, k := range l {
					dst = append(dst, make([]byte, k))
				}
				require.NoError(t, fr.readFullV(dst), "payload %d", i)
				var got []byte
				for _, d := range dst {
					got = append(got, d...)
				}
				require.Equal(t, payloads[i], got, "payload %d", i)
			}
			st, err := fr.next(statusLen)
			require.NoError(t, err)
			require.Equal(t, statusMagic|0xFF, binary.LittleEndian.Uint64(st))
			require.NoError(t, <-done)
		})
	}
}

// TestReadTarget streams WRITE-like frames (a header, then a payload) and
// reads them as the server does (next for the header, readTarget for the
// payload) into destinations at odd offsets of a larger buffer, over a
// real TCP socket (the bounce-buffer path for payloads of at least
// streamMin bytes) and over net.Pipe (plain reads): every payload arrives
// whole, nothing around a destination is written, and the header after a
// payload (read ahead with its last chunk) is intact. A stream that ends
// inside a payload is io.ErrUnexpectedEOF, at a payload's start io.EOF.
func TestReadTarget(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	sizes := []int{1, 100, streamMin - 1, streamMin, streamMin + 1, 3*bounceSize + 5, 1 << 20, 2*bounceSize - 1}
	stream, payloads := framedStream(r, sizes)
	stream = append(stream, make([]byte, 1000)...) // then a payload that ends early

	for name, mk := range readerPipes {
		t.Run(name, func(t *testing.T) {
			rc, wc := mk(t)
			defer rc.Close()
			done := dribble(wc, stream, r, 90000)
			fr := newFrameReader(rc, serverReadBuffer, statusLen)
			for i, n := range sizes {
				st, err := fr.next(statusLen)
				require.NoError(t, err, "frame %d", i)
				require.Equal(t, statusMagic|uint64(i), binary.LittleEndian.Uint64(st), "frame %d", i)
				region := make([]byte, n+200)
				for j := range region {
					region[j] = 0xEE
				}
				at := 1 + i*13%64 // odd destination alignments
				require.NoError(t, fr.readTarget(region[at:at+n]), "payload %d", i)
				require.Equal(t, payloads[i], region[at:at+n], "payload %d", i)
				for j, b := range region {
					if j < at || j >= at+n {
						require.Equal(t, byte(0xEE), b, "payload %d: byte %d outside the destination written", i, j-at)
					}
				}
			}
			st, err := fr.next(statusLen)
			require.NoError(t, err)
			require.Equal(t, statusMagic|0xFF, binary.LittleEndian.Uint64(st))
			// 1000 bytes left of a payload announced larger: short.
			err = fr.readTarget(make([]byte, 3*bounceSize))
			require.True(t, errors.Is(err, io.ErrUnexpectedEOF), "short payload: %v", err)
			require.NoError(t, <-done)
			// Nothing left: a payload that never starts is io.EOF.
			require.ErrorIs(t, fr.readTarget(make([]byte, streamMin)), io.EOF)
		})
	}
}
