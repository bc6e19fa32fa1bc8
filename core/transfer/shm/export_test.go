package shm

import (
	"github.com/mooncake-go/mooncake/core/memory"
	"github.com/mooncake-go/mooncake/core/transfer"
)

// PeerDone returns a channel closed once p's control connection has ended
// and p is marked gone; nil before p dialled.
func PeerDone(p transfer.Peer) <-chan struct{} {
	pp := p.(*peer)
	pp.cmu.Lock()
	defer pp.cmu.Unlock()
	if pp.cmu.ctrl == nil {
		return nil
	}
	return pp.cmu.ctrl.done
}

// PeerRegions returns the regions p has mapped, by target address.
func PeerRegions(p transfer.Peer) []*memory.Region {
	pp := p.(*peer)
	pp.mu.RLock()
	defer pp.mu.RUnlock()
	var out []*memory.Region
	for _, m := range pp.mu.maps {
		out = append(out, m.region)
	}
	return out
}

// SetServedUID makes t serve only peers running as uid, to exercise the
// SO_PEERCRED check without a second user.
func SetServedUID(t *Transport, uid int) { t.uid = uid }
