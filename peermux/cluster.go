package peermux

import (
	"net"
	"time"
)

// clusterGate is the mux's knowledge of its cluster ID; guarded by Mux.mu.
type clusterGate struct {
	id       string    // "" while unknown
	waiting  bool      // unknown, and refuse every connection until learned
	loggedAt time.Time // when a refusal was last logged
}

// ClusterID is the cluster ID the mux writes in its headers ("" if none).
func (m *Mux) ClusterID() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cluster.id
}

// WaitingForClusterID reports whether the mux refuses every connection
// until the node learns its cluster's ID.
func (m *Mux) WaitingForClusterID() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cluster.waiting
}

// SetClusterID sets what the mux knows of its cluster: an ID (or "" for
// none: admit any dialer), or, with waiting and no ID, nothing yet: refuse
// every connection. A mux that knows an ID writes it in the header of every
// connection it dials, and refuses a connection whose header carries
// another ID, or none, before any of the channel's bytes are read.
func (m *Mux) SetClusterID(id string, waiting bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cluster.id, m.cluster.waiting = id, waiting && id == ""
}

// clusterAdmits reports whether a dialer of cluster (its header's ID, ""
// for none) may use channel ch, and logs a refusal (at most once a second).
func (m *Mux) clusterAdmits(c net.Conn, ch uint64, cluster string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	g := &m.cluster
	var reason string
	switch {
	case g.waiting:
		reason = "this node has not learned its cluster's ID yet"
	case g.id == "" || cluster == g.id:
		return true
	case cluster == "":
		reason = "the dialer sent no cluster ID"
	default:
		reason = "the dialer belongs to another cluster"
	}
	m.stats.otherCluster.Add(1)
	if now := time.Now(); now.Sub(g.loggedAt) >= time.Second {
		g.loggedAt = now
		m.log.Warn("refused a peer connection: "+reason, "remote", c.RemoteAddr(), "channel", ch,
			"cluster_id", g.id, "peer_cluster_id", cluster)
	}
	return false
}
