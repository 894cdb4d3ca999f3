package control

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/quorate/quorate/node/internal/engine"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// MemberStatusTimeout bounds how long a member has to answer a status call:
// ClusterStatus's, and placeableNodes'.
const MemberStatusTimeout = time.Second

// placeableNodes sorts the registered nodes into those a drain, a rebalance
// or a group placed by the cluster may put replicas on — nodes that joined
// the cluster (members of the meta group's configuration: a node that was
// only pre-registered by AddNode and never started is not) and answer
// NodeStatus within MemberStatusTimeout — and the others, each with the
// reason it is left out. A replica placed on a node that cannot open it
// would never catch up, and the move would wait forever.
func (c *Controller) placeableNodes(ctx context.Context) (ok []string, left map[string]string, _ error) {
	cf := c.meta.Raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return nil, nil, fmt.Errorf("%w: reading the raft configuration: %v", engine.ErrNotProposed, err)
	}
	members := map[string]bool{}
	for _, s := range cf.Configuration().Servers {
		members[string(s.ID)] = true
	}
	left = map[string]string{}
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for _, nd := range c.meta.FSM.Nodes() {
		switch {
		case nd.ID == c.cfg.ID:
			ok = append(ok, nd.ID)
		case !members[nd.ID]:
			left[nd.ID] = "has not joined the cluster (registered, but never started with --join)"
		default:
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(ctx, MemberStatusTimeout)
				defer cancel()
				// Over the peer port, which members use between them.
				_, err := c.peerPorts.At(nd.RaftAddr).Admin.NodeStatus(ctx, connect.NewRequest(&quoratev1.NodeStatusRequest{}))
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					left[nd.ID] = fmt.Sprintf("does not answer at %s (%v)", nd.RaftAddr, err)
					return
				}
				ok = append(ok, nd.ID)
			})
		}
	}
	wg.Wait()
	slices.Sort(ok)
	return ok, left, nil
}

// describeLeftOut lists the nodes placeableNodes left out and why, for an
// error or a log line: "node5 has not joined the cluster (...); node6 does
// not answer at ...". Empty when none was.
func describeLeftOut(left map[string]string) string {
	var parts []string
	for _, id := range slices.Sorted(maps.Keys(left)) {
		parts = append(parts, id+" "+left[id])
	}
	return strings.Join(parts, "; ")
}
