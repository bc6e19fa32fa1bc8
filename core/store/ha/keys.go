package ha

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// DefaultClusterID is the cluster id used when none is given (upstream
// --cluster_id default).
const DefaultClusterID = "mooncake_cluster"

// Errors of this package, matched with errors.Is; each is wrapped with
// details.
var (
	// ErrInvalidClusterID: a cluster id outside [0-9A-Za-z_.-]{1,128}.
	ErrInvalidClusterID = errors.New("ha: invalid cluster id")
	// ErrNoLeader: no master holds the leadership now.
	ErrNoLeader = errors.New("ha: no leader")
	// ErrNotLeader: a write carrying the leadership fence was refused (this
	// master's leadership ended), or the leadership could not be confirmed.
	ErrNotLeader = errors.New("ha: not the leader")
	// ErrClosed: the replicator was closed; events not yet durable never
	// will be.
	ErrClosed = errors.New("ha: replicator closed")
	// ErrCorrupt: the replicated state in etcd cannot be decoded or does not
	// apply to the table rebuilt so far.
	ErrCorrupt = errors.New("ha: replicated state corrupt")
)

var clusterIDRe = regexp.MustCompile(`^[0-9A-Za-z_.-]{1,128}$`)

// CheckClusterID reports whether id is a valid cluster id (upstream:
// [0-9A-Za-z_.-]{1,128}). Errors: ErrInvalidClusterID.
func CheckClusterID(id string) error {
	if !clusterIDRe.MatchString(id) {
		return fmt.Errorf("%w: %q (want [0-9A-Za-z_.-]{1,128})", ErrInvalidClusterID, id)
	}
	return nil
}

// keys is the etcd key layout of one cluster, all under
// "mooncake-store/<cluster_id>/":
//
//	master_view/<lease>          election keys (value: the candidate's RPC
//	                             address); the oldest is the leader
//	oplog/<seq, 20 digits>       a batch of events; the first has sequence
//	                             number seq, the next seq+1, ...
//	snapshot                     manifest of the latest snapshot
//	snapshot-data/<seq>/<chunk>  the snapshot's JSON, in chunks
type keys struct{ root string }

func keysFor(clusterID string) keys { return keys{root: "mooncake-store/" + clusterID + "/"} }

// view is the election prefix (concurrency.NewElection appends "/").
func (k keys) view() string { return k.root + "master_view" }

func (k keys) oplog() string { return k.root + "oplog/" }

func (k keys) oplogKey(seq uint64) string { return fmt.Sprintf("%s%020d", k.oplog(), seq) }

// oplogSeq parses the sequence number of an oplog key.
func (k keys) oplogSeq(key string) (uint64, error) {
	s, ok := strings.CutPrefix(key, k.oplog())
	if !ok {
		return 0, fmt.Errorf("%w: key %q is not under %q", ErrCorrupt, key, k.oplog())
	}
	seq, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: oplog key %q: %v", ErrCorrupt, key, err)
	}
	return seq, nil
}

func (k keys) snapshot() string { return k.root + "snapshot" }

func (k keys) snapshotData() string { return k.root + "snapshot-data/" }

// snapshotDir is the prefix of the chunks of the snapshot taken at seq.
func (k keys) snapshotDir(seq uint64) string { return fmt.Sprintf("%s%020d/", k.snapshotData(), seq) }

func (k keys) snapshotChunk(seq uint64, i int) string {
	return fmt.Sprintf("%s%06d", k.snapshotDir(seq), i)
}

// ViewPrefix is the etcd prefix under which the masters of clusterID
// campaign; the key with the lowest create revision holds the leader's RPC
// address.
func ViewPrefix(clusterID string) string { return keysFor(clusterID).view() + "/" }
