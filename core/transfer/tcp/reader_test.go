package tcp

import (
	"encoding/binary"
	"math/rand/v2"
	"net"
	"testing"

	"github.com/stretchr/testify/require"
)

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
	var stream []byte
	var payloads [][]byte
	for i, l := range layouts {
		stream = binary.LittleEndian.AppendUint64(stream, statusMagic|uint64(i))
		n := 0
		for _, k := range l {
			n += k
		}
		p := make([]byte, n)
		for j := range p {
			p[j] = byte(r.Uint32())
		}
		payloads = append(payloads, p)
		stream = append(stream, p...)
	}
	stream = binary.LittleEndian.AppendUint64(stream, statusMagic|0xFF) // trailing frame

	pipes := map[string]func(t *testing.T) (net.Conn, net.Conn){
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
	for name, mk := range pipes {
		t.Run(name, func(t *testing.T) {
			rc, wc := mk(t)
			defer rc.Close()
			done := make(chan error, 1)
			go func() {
				// Dribble the stream in uneven writes so reads see partial
				// frames and payloads.
				for off := 0; off < len(stream); {
					n := min(len(stream)-off, 1+r.IntN(9000))
					if _, err := wc.Write(stream[off : off+n]); err != nil {
						done <- err
						return
					}
					off += n
				}
				done <- wc.Close()
			}()
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
