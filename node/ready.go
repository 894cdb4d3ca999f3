package node

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"github.com/hashicorp/raft"

	"github.com/quorate/quorate/node/internal/replica"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
	"github.com/quorate/quorate/shard"
)

// Health and readiness. Every node answers, on its API port and on its admin
// port when it has one, without authentication (load balancers and
// orchestrators call them) and revealing nothing but whether and, in a few
// words, why not:
//
//   - GET /healthz: 200 "ok" while the process serves HTTP at all (liveness).
//   - GET /readyz: 200 "ready", or 503 with a one-line reason (readiness).
//   - grpc.health.v1.Health/Check and Watch (package grpchealth): SERVING
//     or NOT_SERVING by the same test, for the whole node ("") and for each
//     service the port serves; NotFound for any other service.
//
// A node is ready when it is not stopping, its addresses are in its own
// replica of the registry (Registered: the meta replica has caught up at
// least to this node's registration), and every replica it hosts — the
// meta group's and each data group's — knows a leader and has applied its
// log to within readyMaxApplyLag entries of its commit index. A node that
// lost quorum (its peers stopped or partitioned away) sees its replicas'
// leaders go once the election timeout passes, and is not ready until a
// leader is elected again. A replica stopped for damaged files does not
// make the node unready: the node still answers its keys by forwarding to
// the group's leader, and admin status reports the damage. Nor does a data
// replica on its way out (the shard map no longer places it here, or it
// was removed from its group and stopped): it is closed within moments.

// readyMaxApplyLag is how far, in log entries, a hosted replica's applied
// index may trail its commit index before the node is not ready. Applying
// runs right behind commit (an entry is a batch of up to 512 decisions),
// so a lag this large means a replica replaying its log or restoring a
// snapshot after a restart, or an FSM that cannot keep up.
const readyMaxApplyLag = 1024

// readyWatchInterval is how often a health Watch stream re-checks the node.
const readyWatchInterval = 500 * time.Millisecond

// health is the node's answer to probes (/healthz, /readyz, the gRPC
// health service). Made in New, before the servers.
type health struct {
	self       string                    // this node's ID
	stopping   *atomic.Bool              // set once Run begins to stop
	registered <-chan struct{}           // closed once the registry has this node (Node.Registered)
	shardMap   func() (shard.Map, bool)  // the meta replica's
	hosted     func() []*replica.Replica // the replicas hosted here, the meta group's first
}

// notReady says in a few words why the node should not be sent traffic, or
// "" when it is ready. The words name groups by ID and nothing else.
func (h *health) notReady() string {
	if h.stopping.Load() {
		return "stopping"
	}
	select {
	case <-h.registered:
	default:
		return "not registered in the cluster yet"
	}
	m, hasMap := h.shardMap()
	for _, g := range h.hosted() {
		if g.ID != shard.MetaGroup && (g.Raft.State() == raft.Shutdown ||
			hasMap && !placedOn(m, g.ID, h.self)) {
			continue // being closed: moved away, or removed from its group
		}
		if g.LeaderID() == "" {
			return groupWords(g.ID) + " has no leader"
		}
		if commit, applied := g.Raft.CommitIndex(), g.Raft.AppliedIndex(); commit > applied && commit-applied > readyMaxApplyLag {
			return fmt.Sprintf("%s replica is %d entries behind", groupWords(g.ID), commit-applied)
		}
	}
	return ""
}

// placedOn reports whether map m places a replica of group id on node.
func placedOn(m shard.Map, id shard.GroupID, node string) bool {
	sg, ok := m.Group(id)
	return ok && slices.Contains(sg.Replicas, node)
}

// groupWords names group id in a readiness reason.
func groupWords(id shard.GroupID) string {
	if id == shard.MetaGroup {
		return "meta group"
	}
	return fmt.Sprintf("group %d", id)
}

// register serves /healthz, /readyz and the gRPC health service on the
// mux of a server of kind (on the peer port's, the gRPC service only: nodes
// do not probe each other's readiness there).
func (h *health) register(mux *http.ServeMux, kind serverKind, opts connect.HandlerOption) {
	services := []string{quoratev1connect.AdminServiceName}
	if kind != serveAdmin {
		services = append(services, quoratev1connect.AdmissionServiceName, quoratev1connect.LeaseServiceName)
	}
	mux.Handle(grpchealth.NewHandler(&readiness{h: h, services: services}, opts))
	if kind == servePeer {
		return
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeProbe(w, http.StatusOK, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if why := h.notReady(); why != "" {
			writeProbe(w, http.StatusServiceUnavailable, "not ready: "+why)
			return
		}
		writeProbe(w, http.StatusOK, "ready")
	})
}

func writeProbe(w http.ResponseWriter, code int, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(body + "\n"))
}

// readiness is the node's grpchealth.Checker and Watcher.
type readiness struct {
	h        *health
	services []string
}

var _ grpchealth.Watcher = (*readiness)(nil)

func (r *readiness) Check(_ context.Context, req *grpchealth.CheckRequest) (*grpchealth.CheckResponse, error) {
	if err := r.known(req.Service); err != nil {
		return nil, err
	}
	if r.h.notReady() != "" {
		return &grpchealth.CheckResponse{Status: grpchealth.StatusNotServing}, nil
	}
	return &grpchealth.CheckResponse{Status: grpchealth.StatusServing}, nil
}

// Watch has the stream re-check the node every readyWatchInterval; the
// handler sends a status only when it changed.
func (r *readiness) Watch(_ context.Context, req *grpchealth.CheckRequest, onChange func()) (func(), error) {
	if err := r.known(req.Service); err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(readyWatchInterval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				onChange()
			}
		}
	}()
	return func() { close(done) }, nil
}

func (r *readiness) known(service string) error {
	if service == "" {
		return nil
	}
	for _, s := range r.services {
		if s == service {
			return nil
		}
	}
	return connect.NewError(connect.CodeNotFound, errors.New("service: unknown service "+service))
}
