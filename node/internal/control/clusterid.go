package control

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/node/internal/engine"
	"github.com/quorate/quorate/node/internal/replica"
	"github.com/quorate/quorate/peermux"
	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/shard"
)

// A cluster has an ID, 16 random bytes in hex, made by the node that
// bootstraps it. Each node records it in its data directory (the file
// cluster-id, read before any Raft state is opened) and the meta group
// records it in its state (SetClusterID, proposed by the meta leader when
// the group holds none). A node that knows its cluster's ID
//
//   - writes it in the header of every peer connection it opens, and
//     refuses a peer connection that carries another ID, or none, before
//     any Raft or forwarding byte is read (the log names both IDs);
//   - refuses a Join from a node that recorded another ID, and answers a
//     Join with its ID, which the joining node records.
//
// A node without state that joins asks its --join address for the ID
// before it joins, and refuses every peer connection until it has the
// answer; a node that knows no ID (the cluster has none yet) admits any.
// So a new cluster started on the addresses of an old one that still has a
// node running neither takes the old node's state nor gives it its own.

// clusterIDFile is the name of the file that records the cluster ID in a
// node's data directory.
const clusterIDFile = "cluster-id"

// ErrOtherCluster refuses a node or a connection of another cluster.
var ErrOtherCluster = errors.New("the node belongs to another cluster")

// newClusterID returns a new random cluster ID.
func newClusterID() string {
	b := make([]byte, peermux.ClusterIDLen)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// readClusterID returns the cluster ID recorded in dir ("" when none is).
func readClusterID(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, clusterIDFile))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("node: --data-dir: %w", err)
	}
	id := strings.TrimSpace(string(b))
	if !fsm.ValidClusterID(id) {
		return "", &ClusterIDFileError{Path: filepath.Join(dir, clusterIDFile), Holds: id}
	}
	return id, nil
}

// A ClusterIDFileError is a data directory's cluster-id file that holds no
// cluster ID: the data directory is not as a node left it.
type ClusterIDFileError struct {
	Path  string // the file
	Holds string // what it holds
}

func (e *ClusterIDFileError) Error() string {
	return fmt.Sprintf("--data-dir: %s holds %q, not a cluster ID", e.Path, e.Holds)
}

// writeClusterID records id in dir, atomically.
func writeClusterID(dir, id string) error {
	tmp := filepath.Join(dir, clusterIDFile+".tmp")
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o640); err != nil {
		return fmt.Errorf("node: --data-dir: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, clusterIDFile)); err != nil {
		return fmt.Errorf("node: --data-dir: %w", err)
	}
	return nil
}

// freshMetaGroup reports whether dataDir holds no meta group replica yet:
// its directory has no shared-log marker.
func freshMetaGroup(dataDir string) bool {
	return !replica.Exists(dataDir, shard.MetaGroup)
}

// adoptClusterID records id as this node's cluster ID (file, then mux)
// unless it already has one. It returns ErrOtherCluster when the node
// recorded another.
func (c *Controller) adoptClusterID(id, from string) error {
	if !fsm.ValidClusterID(id) {
		return fmt.Errorf("node: cluster ID %q from %s is not 32 hex digits", id, from)
	}
	c.clusterMu.Lock()
	defer c.clusterMu.Unlock()
	switch cur := c.mux.ClusterID(); cur {
	case id:
		c.mux.SetClusterID(id, false)
		return nil
	case "":
	default:
		return fmt.Errorf("%w: this node belongs to cluster %s, %s names cluster %s", ErrOtherCluster, cur, from, id)
	}
	if err := writeClusterID(c.cfg.DataDir, id); err != nil {
		return err
	}
	c.mux.SetClusterID(id, false)
	c.log.Info("recorded the cluster ID", "cluster_id", id, "from", from)
	return nil
}

// learnClusterID asks the --join address for the cluster's ID before a
// node without state joins, and records it; a cluster without one lets the
// node admit any peer.
func (c *Controller) learnClusterID(ctx context.Context, base string) error {
	resp, err := c.apiPorts.Get(base).Admin.NodeStatus(ctx, connect.NewRequest(&quoratev1.NodeStatusRequest{}))
	if err != nil {
		return err
	}
	id := resp.Msg.GetNode().GetClusterId()
	if id == "" {
		c.mux.SetClusterID("", false)
		return nil
	}
	return c.adoptClusterID(id, "--join "+base)
}

// checkJoinCluster refuses a joining node that recorded another cluster's
// ID than this one's.
func (c *Controller) checkJoinCluster(r *quoratev1.JoinRequest) error {
	mine := c.KnownClusterID()
	if theirs := r.GetClusterId(); theirs != "" && mine != "" && theirs != mine {
		return fmt.Errorf("%w: node %s has recorded cluster %s; this is cluster %s (give it an empty --data-dir to join)",
			ErrOtherCluster, r.GetId(), theirs, mine)
	}
	return nil
}

// KnownClusterID is the cluster's ID as the meta group has it, or as this
// node recorded it.
func (c *Controller) KnownClusterID() string {
	if id := c.meta.FSM.ClusterID(); id != "" {
		return id
	}
	return c.mux.ClusterID()
}

// clusterIDLoop keeps the node's record of its cluster ID in step with the
// meta group's until ctx is done: a node records the ID the meta group
// holds, and the meta leader proposes one (its own record, or a new one)
// when the group holds none.
func (c *Controller) clusterIDLoop(ctx context.Context) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	warned := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		switch id := c.meta.FSM.ClusterID(); {
		case id != "":
			if err := c.adoptClusterID(id, "the meta group"); err != nil && !warned {
				warned = true
				c.log.Error("the meta group's cluster ID is not this node's", "err", err)
			}
		case c.isLeader():
			id := c.mux.ClusterID()
			if id == "" {
				id = newClusterID()
			}
			pctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
			_, err := c.req.ProposeTo(pctx, engine.Dest{Replica: c.meta, ID: shard.MetaGroup}, &raftcmdv1.Envelope{Body: &raftcmdv1.Envelope_SetClusterId{
				SetClusterId: &raftcmdv1.SetClusterID{Id: id}}})
			cancel()
			if err != nil && ctx.Err() == nil {
				c.log.Debug("proposing the cluster ID", "err", err)
			}
		}
	}
}

// InitClusterID tells mux, before it serves, what the node knows of its
// cluster: the ID recorded in dataDir; a new one when the node bootstraps
// a new cluster (bootstrap); or, for a node without state that joins (join
// is its --join address), nothing yet (it refuses peers until it asks the
// --join address). A cluster-id file that holds no ID is a
// *ClusterIDFileError.
func InitClusterID(dataDir string, bootstrap bool, join string, mux *peermux.Mux, log *slog.Logger) error {
	id, err := readClusterID(dataDir)
	if err != nil {
		return err
	}
	fresh := freshMetaGroup(dataDir)
	if id == "" && fresh && bootstrap {
		id = newClusterID()
		if err := writeClusterID(dataDir, id); err != nil {
			return err
		}
		log.Info("bootstrapping a new cluster", "cluster_id", id)
	}
	mux.SetClusterID(id, id == "" && fresh && join != "")
	return nil
}
