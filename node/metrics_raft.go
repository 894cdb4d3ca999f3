package node

import (
	"strings"
	"sync"

	gometrics "github.com/hashicorp/go-metrics"
	"github.com/prometheus/client_golang/prometheus"
)

// hashicorp/raft's own figures (its commit time, RPC round trips, FSM and
// snapshot timings, ...) under Quorate's names. Raft emits them through the
// process-wide go-metrics global, not through anything a node is given, so
// they carry no group: each figure sums every group of the process. A
// program that runs one node per process (quorate serve) makes the sink of
// RaftMetricsSink that global; the library never touches it, since several
// nodes of one process (quorate dev, the tests) would share it.
//
// raftFamilies is the whole list: raft's camelCase keys become snake_case
// names, counters end in _total, timings are histograms in seconds, and a
// peer's ID, which raft puts in some keys, is the peer label. Raft's gauges
// are dropped: a process-wide gauge is whichever group wrote it last, and
// the per-group figures are the node's quorate_raft_*{group} series. So are
// raft.apply (quorate_group_entries_total counts the same), the legacy keys
// with a peer's ID inside them (raft.Config.NoLegacyTelemetry), and every
// key the table does not name (a log store's, a later raft's).

// raftKind is how a family records what raft emits.
type raftKind int

const (
	raftCounter raftKind = iota // a counter, raft's increments
	raftSeconds                 // a histogram of raft's timings, in milliseconds, as seconds
	raftEntries                 // a histogram of a count of entries
	raftRatio                   // a histogram of a ratio (0 to 1)
)

// raftLabel marks a label whose value raft passes as a label of its own
// (named after the prefix); any other value in raftKey.values is fixed.
const raftLabel = "raft:"

type raftFamily struct {
	name, help string
	kind       raftKind
	labels     []string
}

// raftKey is where a raft key goes: its family, and the value of each of
// the family's labels.
type raftKey struct {
	family string
	values []string
}

var raftFamilies = []raftFamily{
	{"quorate_raft_state_changes_total", "Times a replica of this process's groups became leader, follower or candidate (raft.state.*), all groups together.", raftCounter, []string{"state"}},
	{"quorate_raft_timeouts_total", "Raft timeouts of this process's replicas, all groups together: heartbeat (a follower heard no leader and stood for election), leader_lease (a leader lost touch with a quorum and stepped down).", raftCounter, []string{"timeout"}},
	{"quorate_raft_barriers_total", "Raft barriers issued by this process's replicas, all groups together.", raftCounter, nil},
	{"quorate_raft_leader_verifications_total", "Leadership verifications (VerifyLeader) by this process's replicas, all groups together.", raftCounter, nil},
	{"quorate_raft_replicated_entries_total", "Log entries this process's leaders sent to each peer in AppendEntries calls, all groups together.", raftCounter, []string{"peer"}},
	{"quorate_raft_commit_seconds", "Time from a leader's dispatch of an entry to its commit (raft.commitTime), all groups together.", raftSeconds, nil},
	{"quorate_raft_leader_dispatch_seconds", "Time a leader takes to write a batch of entries to its log before replicating it, all groups together.", raftSeconds, nil},
	{"quorate_raft_leader_quorum_contact_seconds", "Age of a leader's oldest contact with the peers that make its quorum, at each lease check, all groups together.", raftSeconds, nil},
	{"quorate_raft_replication_seconds", "Round trip of a leader's RPC to a peer (AppendEntries, Heartbeat, InstallSnapshot), all groups together.", raftSeconds, []string{"peer", "rpc"}},
	{"quorate_raft_rpc_seconds", "Time a replica takes to handle an incoming Raft RPC, all groups together.", raftSeconds, []string{"rpc"}},
	{"quorate_raft_rpc_store_seconds", "Time a follower takes to store the entries of an AppendEntries, all groups together.", raftSeconds, nil},
	{"quorate_raft_transport_seconds", "Time an incoming Raft RPC spends in the transport, by step: decode, enqueue (waiting for the replica's main loop), respond (waiting for its answer), all groups together.", raftSeconds, []string{"rpc", "step"}},
	{"quorate_raft_elect_self_seconds", "Time a candidate takes to vote for itself (vote) or pre-vote (pre_vote), all groups together.", raftSeconds, []string{"vote"}},
	{"quorate_raft_fsm_enqueue_seconds", "Time committed entries wait to be handed to the FSM, all groups together.", raftSeconds, nil},
	{"quorate_raft_fsm_apply_seconds", "Time the FSM takes to apply a batch of committed entries, all groups together.", raftSeconds, nil},
	{"quorate_raft_fsm_apply_batch_entries", "Entries in each batch the FSM applies, all groups together.", raftEntries, nil},
	{"quorate_raft_fsm_snapshot_seconds", "Time the FSM takes to capture a snapshot, all groups together.", raftSeconds, nil},
	{"quorate_raft_fsm_restore_seconds", "Time the FSM takes to restore a snapshot, all groups together.", raftSeconds, nil},
	{"quorate_raft_snapshot_seconds", "Time a replica takes to snapshot, by step: create, persist, and total (the two and compacting the log), all groups together.", raftSeconds, []string{"step"}},
	{"quorate_raft_compact_log_seconds", "Time a replica takes to compact its log after a snapshot, all groups together.", raftSeconds, nil},
	{"quorate_raft_thread_saturation_ratio", "Share of the time a replica's main or FSM goroutine was busy, sampled each second, all groups together.", raftRatio, []string{"thread"}},
}

var raftKeys = map[string]raftKey{
	"raft.state.leader":                    {"quorate_raft_state_changes_total", []string{"leader"}},
	"raft.state.follower":                  {"quorate_raft_state_changes_total", []string{"follower"}},
	"raft.state.candidate":                 {"quorate_raft_state_changes_total", []string{"candidate"}},
	"raft.transition.heartbeat_timeout":    {"quorate_raft_timeouts_total", []string{"heartbeat"}},
	"raft.transition.leader_lease_timeout": {"quorate_raft_timeouts_total", []string{"leader_lease"}},
	"raft.barrier":                         {"quorate_raft_barriers_total", nil},
	"raft.verify_leader":                   {"quorate_raft_leader_verifications_total", nil},
	"raft.replication.appendEntries.logs":  {"quorate_raft_replicated_entries_total", []string{raftLabel + "peer_id"}},
	"raft.commitTime":                      {"quorate_raft_commit_seconds", nil},
	"raft.leader.dispatchLog":              {"quorate_raft_leader_dispatch_seconds", nil},
	"raft.leader.lastContact":              {"quorate_raft_leader_quorum_contact_seconds", nil},
	"raft.replication.appendEntries.rpc":   {"quorate_raft_replication_seconds", []string{raftLabel + "peer_id", "AppendEntries"}},
	"raft.replication.heartbeat":           {"quorate_raft_replication_seconds", []string{raftLabel + "peer_id", "Heartbeat"}},
	"raft.replication.installSnapshot":     {"quorate_raft_replication_seconds", []string{raftLabel + "peer_id", "InstallSnapshot"}},
	"raft.rpc.appendEntries":               {"quorate_raft_rpc_seconds", []string{"AppendEntries"}},
	"raft.rpc.processHeartbeat":            {"quorate_raft_rpc_seconds", []string{"Heartbeat"}},
	"raft.rpc.requestVote":                 {"quorate_raft_rpc_seconds", []string{"RequestVote"}},
	"raft.rpc.requestPreVote":              {"quorate_raft_rpc_seconds", []string{"RequestPreVote"}},
	"raft.rpc.installSnapshot":             {"quorate_raft_rpc_seconds", []string{"InstallSnapshot"}},
	"raft.rpc.appendEntries.storeLogs":     {"quorate_raft_rpc_store_seconds", nil},
	"raft.net.rpcDecode":                   {"quorate_raft_transport_seconds", []string{raftLabel + "rpcType", "decode"}},
	"raft.net.rpcEnqueue":                  {"quorate_raft_transport_seconds", []string{raftLabel + "rpcType", "enqueue"}},
	"raft.net.rpcRespond":                  {"quorate_raft_transport_seconds", []string{raftLabel + "rpcType", "respond"}},
	"raft.candidate.electSelf":             {"quorate_raft_elect_self_seconds", []string{"vote"}},
	"raft.candidate.preElectSelf":          {"quorate_raft_elect_self_seconds", []string{"pre_vote"}},
	"raft.fsm.enqueue":                     {"quorate_raft_fsm_enqueue_seconds", nil},
	"raft.fsm.apply":                       {"quorate_raft_fsm_apply_seconds", nil},
	"raft.fsm.applyBatch":                  {"quorate_raft_fsm_apply_seconds", nil},
	"raft.fsm.applyBatchNum":               {"quorate_raft_fsm_apply_batch_entries", nil},
	"raft.fsm.snapshot":                    {"quorate_raft_fsm_snapshot_seconds", nil},
	"raft.fsm.restore":                     {"quorate_raft_fsm_restore_seconds", nil},
	"raft.snapshot.create":                 {"quorate_raft_snapshot_seconds", []string{"create"}},
	"raft.snapshot.persist":                {"quorate_raft_snapshot_seconds", []string{"persist"}},
	"raft.snapshot.takeSnapshot":           {"quorate_raft_snapshot_seconds", []string{"total"}},
	"raft.compactLogs":                     {"quorate_raft_compact_log_seconds", nil},
	"raft.thread.main.saturation":          {"quorate_raft_thread_saturation_ratio", []string{"main"}},
	"raft.thread.fsm.saturation":           {"quorate_raft_thread_saturation_ratio", []string{"fsm"}},
}

// raftSink is a go-metrics sink that records raft's figures in a node's
// registry, as raftKeys says.
type raftSink struct {
	counters   map[string]*prometheus.CounterVec
	histograms map[string]raftHistogram
}

// raftHistogram is a histogram family and the factor from raft's figures
// to its unit.
type raftHistogram struct {
	vec   *prometheus.HistogramVec
	scale float64
}

var _ gometrics.MetricSink = (*raftSink)(nil)

// RaftMetricsSink returns a go-metrics sink that records hashicorp/raft's
// figures in the node's registry under Quorate's names (see raftFamilies);
// their series are registered at the first call. It expects go-metrics'
// default timer granularity (milliseconds) and neither a service name nor
// a hostname in the keys. Make it the process's go-metrics global only
// where this is the process's only node.
func (n *Node) RaftMetricsSink() gometrics.MetricSink {
	m := n.metrics
	m.raftSinkOnce.Do(func() { m.raftSink = newRaftSink(m.reg) })
	return m.raftSink
}

func newRaftSink(reg prometheus.Registerer) *raftSink {
	s := &raftSink{counters: map[string]*prometheus.CounterVec{}, histograms: map[string]raftHistogram{}}
	for _, f := range raftFamilies {
		var c prometheus.Collector
		switch f.kind {
		case raftCounter:
			v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: f.name, Help: f.help}, f.labels)
			s.counters[f.name], c = v, v
		default:
			buckets, scale := latencyBuckets, 0.001 // go-metrics' timings are in milliseconds
			switch f.kind {
			case raftEntries:
				buckets, scale = prometheus.ExponentialBuckets(1, 2, 10), 1
			case raftRatio:
				buckets, scale = prometheus.LinearBuckets(0.1, 0.1, 10), 1
			}
			v := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: f.name, Help: f.help, Buckets: buckets}, f.labels)
			s.histograms[f.name], c = raftHistogram{v, scale}, v
		}
		reg.MustRegister(c)
	}
	// The series whose labels are all fixed exist from the start.
	for _, k := range raftKeys {
		if !raftFixed(k.values) {
			continue
		}
		if v, ok := s.counters[k.family]; ok {
			v.WithLabelValues(k.values...)
		} else {
			s.histograms[k.family].vec.WithLabelValues(k.values...)
		}
	}
	return s
}

func raftFixed(values []string) bool {
	for _, v := range values {
		if strings.HasPrefix(v, raftLabel) {
			return false
		}
	}
	return true
}

// lookup is where key goes, and its label values taken from labels.
func (s *raftSink) lookup(key []string, labels []gometrics.Label) (raftKey, []string, bool) {
	var buf [96]byte
	b := buf[:0]
	for i, k := range key {
		if i > 0 {
			b = append(b, '.')
		}
		b = append(b, k...)
	}
	k, ok := raftKeys[string(b)]
	if !ok {
		return raftKey{}, nil, false
	}
	values := k.values
	if !raftFixed(values) {
		values = make([]string, len(k.values))
		for i, v := range k.values {
			values[i] = v
			if name, ok := strings.CutPrefix(v, raftLabel); ok {
				values[i] = ""
				for _, l := range labels {
					if l.Name == name {
						values[i] = l.Value
					}
				}
			}
		}
	}
	return k, values, true
}

func (s *raftSink) IncrCounter(key []string, val float32) { s.IncrCounterWithLabels(key, val, nil) }

func (s *raftSink) IncrCounterWithLabels(key []string, val float32, labels []gometrics.Label) {
	k, values, ok := s.lookup(key, labels)
	if c := s.counters[k.family]; ok && c != nil && val >= 0 {
		c.WithLabelValues(values...).Add(float64(val))
	}
}

func (s *raftSink) AddSample(key []string, val float32) { s.AddSampleWithLabels(key, val, nil) }

func (s *raftSink) AddSampleWithLabels(key []string, val float32, labels []gometrics.Label) {
	k, values, ok := s.lookup(key, labels)
	h, found := s.histograms[k.family]
	if !ok || !found {
		return
	}
	h.vec.WithLabelValues(values...).Observe(float64(val) * h.scale)
}

// Raft's gauges and keys are dropped (see raftFamilies).
func (s *raftSink) SetGauge([]string, float32)                                       {}
func (s *raftSink) SetGaugeWithLabels([]string, float32, []gometrics.Label)          {}
func (s *raftSink) EmitKey([]string, float32)                                        {}
func (s *raftSink) SetPrecisionGauge([]string, float64)                              {}
func (s *raftSink) SetPrecisionGaugeWithLabels([]string, float64, []gometrics.Label) {}

// raftSinkState is the sink of RaftMetricsSink, made once.
type raftSinkState struct {
	raftSinkOnce sync.Once
	raftSink     *raftSink
}
