package ha

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/mooncake-go/mooncake/core/store/master"
)

// loadPage is how many oplog keys Load reads per request.
const loadPage = 256

// LoadStats describes what Load restored.
type LoadStats struct {
	SnapshotSeq uint64 // sequence number the snapshot covers; 0 = none
	Replayed    int    // log events applied after the snapshot
	LastSeq     uint64 // last event restored; the next leader's first is LastSeq+1
	Objects     int    // objects in the table afterwards
	Segments    int    // segments mounted afterwards
}

// Load rebuilds clusterID's replicated table in m, a fresh master: the
// latest snapshot, then every logged event after it, in order, through
// m's Restore methods (m's observer, if any, hears nothing). A new leader
// calls it before it serves; since the old leader's writes are fenced by
// its election key, the log is complete once this master's own key leads.
// Errors: ErrCorrupt (undecodable data, or an event that does not apply:
// m is then partly restored and must be discarded); etcd's.
func Load(ctx context.Context, cli *clientv3.Client, clusterID string, m *master.Master) (LoadStats, error) {
	var ls LoadStats
	k := keysFor(clusterID)
	resp, err := cli.Get(ctx, k.snapshot())
	if err != nil {
		return ls, fmt.Errorf("ha: reading the snapshot manifest: %w", err)
	}
	if len(resp.Kvs) == 1 {
		var man wireManifest
		if err := json.Unmarshal(resp.Kvs[0].Value, &man); err != nil {
			return ls, fmt.Errorf("%w: snapshot manifest: %v", ErrCorrupt, err)
		}
		cr, err := cli.Get(ctx, k.snapshotDir(man.Seq), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
		if err != nil {
			return ls, fmt.Errorf("ha: reading snapshot %d: %w", man.Seq, err)
		}
		if len(cr.Kvs) != man.Chunks {
			return ls, fmt.Errorf("%w: snapshot %d has %d chunks, manifest says %d", ErrCorrupt, man.Seq, len(cr.Kvs), man.Chunks)
		}
		var data strings.Builder
		for _, kv := range cr.Kvs {
			data.Write(kv.Value)
		}
		var snap wireSnapshot
		if err := json.Unmarshal([]byte(data.String()), &snap); err != nil {
			return ls, fmt.Errorf("%w: snapshot %d: %v", ErrCorrupt, man.Seq, err)
		}
		st, err := snap.state()
		if err != nil {
			return ls, fmt.Errorf("snapshot %d: %w", man.Seq, err)
		}
		if err := m.Restore(st); err != nil {
			return ls, fmt.Errorf("%w: restoring snapshot %d: %w", ErrCorrupt, man.Seq, err)
		}
		ls.SnapshotSeq, ls.LastSeq = snap.Seq, snap.Seq
	}
	from, end := k.oplog(), clientv3.GetPrefixRangeEnd(k.oplog())
	for {
		page, err := cli.Get(ctx, from, clientv3.WithRange(end), clientv3.WithLimit(loadPage),
			clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
		if err != nil {
			return ls, fmt.Errorf("ha: reading the oplog from %s: %w", from, err)
		}
		for _, kv := range page.Kvs {
			first, err := k.oplogSeq(string(kv.Key))
			if err != nil {
				return ls, err
			}
			es, err := decodeBatch(string(kv.Key), kv.Value)
			if err != nil {
				return ls, err
			}
			for i, e := range es {
				seq := first + uint64(i)
				if seq <= ls.LastSeq {
					continue // covered by the snapshot
				}
				if err := apply(m, e); err != nil {
					return ls, fmt.Errorf("event %d: %w", seq, err)
				}
				ls.LastSeq = seq
				ls.Replayed++
			}
		}
		if !page.More || len(page.Kvs) == 0 {
			break
		}
		from = string(page.Kvs[len(page.Kvs)-1].Key) + "\x00"
	}
	st := m.Stats()
	ls.Objects, ls.Segments = st.Objects, st.Segments
	return ls, nil
}
