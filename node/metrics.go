package node

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
	"github.com/quorate/quorate/shard"
)

// The node's Prometheus metrics, served at /metrics on the API port (and
// on the admin listener with Config.AdminAddr). Each Node has a registry of
// its own: several nodes in one process (the tests) never share a series.
//
// Labels are bounded: a policy name (the policy table's, and at most
// maxPolicyLabels of them; the rest are "(other)", names the table does not
// have "(unknown)"), a result, a group ID (the shard map's), an RPC name, a
// plan state. Never a key, a caller, a tenant, an address or a request ID:
// /metrics needs no role, like the health check, and shows nothing a
// request carries but its policy name.

// maxPolicyLabels bounds the policy names that get series of their own.
const maxPolicyLabels = 200

// The policy label of names that have no series of their own. A policy
// name cannot hold parentheses, so neither is ever a policy's.
const (
	policyOther   = "(other)"
	policyUnknown = "(unknown)"
)

// The result label of a decision, besides the Connect code of an error
// ("resource_exhausted", "unavailable", ...).
const (
	resultAllowed      = "allowed"
	resultDenied       = "denied"
	resultShadowDenied = "shadow_denied" // allowed, but a shadow policy would have denied it
	resultDuplicate    = "duplicate"     // a repeated request ID, answered from its record
)

// metrics is a node's registry and the series the request path updates;
// the rest are read at scrape time (metrics_collect.go).
type metrics struct {
	n   *Node
	reg *prometheus.Registry

	decisions        *prometheus.CounterVec   // policy, result
	decisionSeconds  *prometheus.HistogramVec // rpc
	proposeSeconds   *prometheus.HistogramVec // group
	entries          *prometheus.CounterVec   // group
	entryCommands    *prometheus.HistogramVec // group
	leaderChanges    *prometheus.CounterVec   // group
	fsyncSeconds     prometheus.Histogram
	pacingSeconds    *prometheus.HistogramVec // policy, kind
	pacing           pacingQueue
	mu               sync.Mutex
	policiesLabelled map[string]bool
	raftSinkState    // raft's own figures, where RaftMetricsSink is asked for (metrics_raft.go)
}

// latencyBuckets spans 100 µs to about 6.5 s.
var latencyBuckets = prometheus.ExponentialBuckets(0.0001, 2, 17)

func newMetrics(n *Node) *metrics {
	m := &metrics{n: n, reg: prometheus.NewRegistry(), policiesLabelled: map[string]bool{}}
	m.decisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "quorate_decisions_total",
		Help: "Decisions answered by this node's API (Admit, AdmitBatch items, AcquireLease, ShouldRateLimit), by policy and result: allowed, denied, shadow_denied, duplicate, or the error's code.",
	}, []string{"policy", "result"})
	m.decisionSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "quorate_decision_duration_seconds",
		Help:    "Time from a decision call's arrival at this node's API to its answer, forwarding included, by RPC.",
		Buckets: latencyBuckets,
	}, []string{"rpc"})
	for _, rpc := range []string{"Admit", "AdmitBatch", "AcquireLease"} {
		m.decisionSeconds.WithLabelValues(rpc)
	}
	m.proposeSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "quorate_group_propose_apply_seconds",
		Help:    "Time from proposing an entry as a group's leader to its being committed and applied here, by group.",
		Buckets: latencyBuckets,
	}, []string{"group"})
	m.entries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "quorate_group_entries_total",
		Help: "Entries this node proposed as a group's leader, by group.",
	}, []string{"group"})
	m.entryCommands = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "quorate_group_entry_commands",
		Help:    "Commands (decisions) per entry this node proposed as a group's leader, by group.",
		Buckets: prometheus.ExponentialBuckets(1, 2, 10),
	}, []string{"group"})
	m.leaderChanges = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "quorate_group_leader_changes_total",
		Help: "Changes of leader this node's replica of a group observed, by group.",
	}, []string{"group"})
	m.fsyncSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "quorate_log_fsync_seconds",
		Help:    "Duration of the shared Raft log's fdatasync calls.",
		Buckets: prometheus.ExponentialBuckets(0.00005, 2, 16),
	})
	m.pacingSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "quorate_pacing_wait_seconds",
		Help:    "Calls with max_wait answered by this node's API, by policy and kind: admit (the wait an admitted Admit was given, 0 when admitted at once), lease (the time an AcquireLease waited for a slot).",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 17),
	}, []string{"policy", "kind"})
	m.reg.MustRegister(m.decisions, m.decisionSeconds, m.proposeSeconds, m.entries, m.entryCommands,
		m.leaderChanges, m.fsyncSeconds, m.pacingSeconds, &m.pacing, groupCollector{m}, healthCollector{m}, decisionsCollector{m},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry is the node's Prometheus registry, which /metrics serves. A
// program embedding a node may register its own collectors in it.
func (n *Node) Registry() *prometheus.Registry { return n.metrics.reg }

// serve adds /metrics to the mux of the API and admin servers (kind),
// promhttp's errors going to log.
func (m *metrics) serve(mux *http.ServeMux, kind serverKind, log *slog.Logger) {
	if kind == servePeer {
		return
	}
	h := promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorLog:            slogPrinter{log},
		MaxRequestsInFlight: 4,
		Timeout:             10 * time.Second,
	})
	mux.Handle("GET /metrics", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.prime()
		h.ServeHTTP(w, r)
	}))
}

// prime creates the series of the label values known now, before a
// scrape: each hosted group's, and each policy's (as many as get labels),
// so that a series exists, at zero, before its first use.
func (m *metrics) prime() {
	n := m.n
	if n.meta == nil || n.meta.FSM == nil {
		return
	}
	for _, g := range n.engine.Hosted() {
		l := groupLabel(g.ID)
		m.entries.WithLabelValues(l)
		m.entryCommands.WithLabelValues(l)
		m.proposeSeconds.WithLabelValues(l)
		m.leaderChanges.WithLabelValues(l)
	}
	for i, pv := range n.meta.FSM.Policies() {
		if i == maxPolicyLabels {
			break
		}
		l := m.policyLabel(pv.Policy.Name)
		m.decisions.WithLabelValues(l, resultAllowed)
		m.decisions.WithLabelValues(l, resultDenied)
		if kind := pacingKind(pv.Policy.Algorithm); kind != "" {
			m.pacingSeconds.WithLabelValues(l, kind)
			m.pacing.prime(l, kind)
		}
	}
}

// slogPrinter passes promhttp's errors to the node's log.
type slogPrinter struct{ log *slog.Logger }

func (p slogPrinter) Println(v ...any) { p.log.Warn("metrics", "err", v) }

// groupLabel is the group label of id.
func groupLabel(id shard.GroupID) string { return strconv.FormatUint(uint64(id), 10) }

// policyLabel is the policy label of name (see maxPolicyLabels).
func (m *metrics) policyLabel(name string) string {
	if _, ok := m.n.meta.FSM.Policy(name); !ok {
		return policyUnknown
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.policiesLabelled[name] {
		if len(m.policiesLabelled) >= maxPolicyLabels {
			return policyOther
		}
		m.policiesLabelled[name] = true
	}
	return name
}

// entry counts an entry of cmds commands proposed to group id.
func (m *metrics) Entry(id shard.GroupID, cmds int) {
	g := groupLabel(id)
	m.entries.WithLabelValues(g).Inc()
	m.entryCommands.WithLabelValues(g).Observe(float64(cmds))
}

// applied times an entry proposed to group id at start, now applied.
func (m *metrics) Applied(id shard.GroupID, start time.Time) {
	m.proposeSeconds.WithLabelValues(groupLabel(id)).Observe(time.Since(start).Seconds())
}

// leaderChanged counts a change of group id's leader.
func (m *metrics) leaderChanged(id shard.GroupID) {
	m.leaderChanges.WithLabelValues(groupLabel(id)).Inc()
}

// fsynced times one fdatasync of the shared log.
func (m *metrics) fsynced(d time.Duration) { m.fsyncSeconds.Observe(d.Seconds()) }

// decided counts one decision of policy: its answer's result, or err's code.
func (m *metrics) decided(policy string, allowed, shadowDenied, duplicate bool, err error) {
	m.decisions.WithLabelValues(m.policyLabel(policy), decisionResult(allowed, shadowDenied, duplicate, err)).Inc()
}

func decisionResult(allowed, shadowDenied, duplicate bool, err error) string {
	switch {
	case err != nil:
		return connect.CodeOf(err).String()
	case duplicate:
		return resultDuplicate
	case shadowDenied:
		return resultShadowDenied
	case allowed:
		return resultAllowed
	}
	return resultDenied
}

// admitted counts the decision of an Admit answered resp or err: by the
// policy of the check that denied it, else of its first check.
func (m *metrics) admitted(req *quoratev1.AdmitRequest, resp *quoratev1.AdmitResponse, err error) {
	policy := req.GetPolicy()
	if i := resp.GetDeniedCheck(); resp != nil && resp.DeniedCheck != nil && int(i) < len(resp.GetChecks()) {
		policy = resp.GetChecks()[i].GetPolicy()
	}
	m.decided(policy, resp.GetAllowed(), resp.GetShadowDenied(), resp.GetDuplicate(), err)
	if req.GetMaxWait() != nil && resp.GetAllowed() && !resp.GetDuplicate() {
		wait := resp.GetWait().AsDuration()
		m.pacingSeconds.WithLabelValues(m.policyLabel(policy), pacingAdmit).Observe(wait.Seconds())
		if wait > 0 {
			m.pacing.paced(m.policyLabel(policy), time.Now(), wait)
		}
	}
}

// metricsInterceptor times the decision calls of the API (not those
// forwarded to this node: the peer port's server has no such interceptor,
// so each decision counts once, at the node its caller asked) and counts
// their decisions. It runs before authorization: refused calls count too,
// under their code.
type metricsInterceptor struct{ m *metrics }

func (i metricsInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		var rpc string
		switch req.Spec().Procedure {
		case quoratev1connect.AdmissionServiceAdmitProcedure:
			rpc = "Admit"
		case quoratev1connect.AdmissionServiceAdmitBatchProcedure:
			rpc = "AdmitBatch"
		case quoratev1connect.LeaseServiceAcquireLeaseProcedure:
			rpc = "AcquireLease"
		default:
			return next(ctx, req)
		}
		start := time.Now()
		if r, ok := req.Any().(*quoratev1.AcquireLeaseRequest); ok && r.GetMaxWait() != nil {
			defer i.m.pacing.parked(i.m.policyLabel(r.GetPolicy()), start)()
		}
		resp, err := next(ctx, req)
		i.m.decisionSeconds.WithLabelValues(rpc).Observe(time.Since(start).Seconds())
		i.m.counted(req.Any(), resp, err)
		return resp, err
	}
}

// counted counts the decisions of one call: req, answered resp or err.
func (m *metrics) counted(req any, resp connect.AnyResponse, err error) {
	var msg any
	if resp != nil && err == nil {
		msg = resp.Any()
	}
	switch r := req.(type) {
	case *quoratev1.AdmitRequest:
		out, _ := msg.(*quoratev1.AdmitResponse)
		m.admitted(r, out, err)
	case *quoratev1.AdmitBatchRequest:
		out, _ := msg.(*quoratev1.AdmitBatchResponse)
		for j, item := range r.GetRequests() {
			if err != nil || j >= len(out.GetResults()) {
				m.admitted(item, nil, err)
				continue
			}
			res := out.GetResults()[j]
			if e := res.GetError(); e != nil {
				m.decided(item.GetPolicy(), false, false, false, batchItemError(e))
				continue
			}
			m.admitted(item, res.GetResponse(), nil)
		}
	case *quoratev1.AcquireLeaseRequest:
		out, _ := msg.(*quoratev1.AcquireLeaseResponse)
		m.decided(r.GetPolicy(), out.GetAllowed(), false, out.GetDuplicate(), err)
		if r.GetMaxWait() != nil && out != nil && !out.GetDuplicate() {
			m.pacingSeconds.WithLabelValues(m.policyLabel(r.GetPolicy()), pacingLease).Observe(out.GetWaited().AsDuration().Seconds())
		}
	}
}

// batchItemError is the error of a failed AdmitBatch item, with its code.
func batchItemError(e *quoratev1.AdmitBatchError) error {
	var code connect.Code
	if code.UnmarshalText([]byte(e.GetCode())) != nil {
		code = connect.CodeUnknown
	}
	return connect.NewError(code, nil)
}

func (i metricsInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (i metricsInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
