package server

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mooncake-go/mooncake/core/store/master"
)

// TestFreeOSMemoryRule: heap goes back to the OS once the object count
// fell by FreeOSMemoryAfter objects and to half its peak, once per drop.
func TestFreeOSMemoryRule(t *testing.T) {
	tests := []struct {
		name   string
		after  int
		counts []int
		want   int // calls
	}{
		{"growth only", 100, []int{0, 500, 1000, 5000}, 0},
		{"mass removal", 100, []int{1000, 0}, 1},
		{"halving twice", 100, []int{1000, 400, 0}, 2},
		{"small drop", 100, []int{150, 60, 55}, 0},
		{"drop not to half", 100, []int{1000, 600, 550}, 0},
		{"drop, growth, drop", 100, []int{1000, 400, 300, 2000, 900}, 2},
		{"removal in steps", 100, []int{1000, 800, 600, 500, 450, 200}, 2},
		{"disabled", -1, []int{1000, 0}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := master.New(master.Config{})
			require.NoError(t, err)
			s := New(m, Options{TickInterval: time.Hour, FreeOSMemoryAfter: tt.after})
			defer s.Close()
			calls := 0
			for _, c := range tt.counts {
				s.Do(func(*master.Master) {
					if s.massRemovalLocked(c) {
						calls++
					}
				})
			}
			assert.Equal(t, tt.want, calls)
		})
	}
	m, err := master.New(master.Config{})
	require.NoError(t, err)
	s := New(m, Options{TickInterval: time.Hour})
	defer s.Close()
	assert.Equal(t, 100_000, s.freeAfter, "default")
}

// TestFreeOSMemoryAfterRemoval: the tick loop gives memory back after the
// objects are removed.
func TestFreeOSMemoryAfterRemoval(t *testing.T) {
	m, err := master.New(master.Config{})
	require.NoError(t, err)
	freed := make(chan struct{}, 1)
	s := New(m, Options{TickInterval: time.Millisecond, FreeOSMemoryAfter: 1000, freeOS: func() {
		select {
		case freed <- struct{}{}:
		default:
		}
	}})
	defer s.Close()
	const n = 2000
	s.Do(func(m *master.Master) {
		require.NoError(t, m.MountSegment(master.Segment{ID: "a", Name: "node-a", Base: 1 << 32, Size: 1 << 30, Protocol: "tcp"}, "node"))
		for i := range n {
			k := "k" + strconv.Itoa(i)
			_, err := m.PutStart("c", k, 64, master.ReplicaConfig{ReplicaNum: 1})
			require.NoError(t, err)
			require.NoError(t, m.PutEnd("c", k))
		}
	})
	// Let a tick see the peak.
	deadline := time.Now().Add(10 * time.Second)
	for seen := false; !seen; {
		require.True(t, time.Now().Before(deadline), "tick loop never saw %d objects", n)
		s.Do(func(*master.Master) { seen = s.mu.peak >= n })
		if !seen {
			time.Sleep(time.Millisecond)
		}
	}
	select {
	case <-freed:
		t.Fatal("memory freed before any removal")
	default:
	}
	s.Do(func(m *master.Master) { require.Equal(t, n, m.RemoveAll(true)) })
	select {
	case <-freed:
	case <-time.After(10 * time.Second):
		t.Fatal("no FreeOSMemory within 10 s of removing every object")
	}
}
