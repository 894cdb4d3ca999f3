package control

import (
	"testing"

	"github.com/quorate/quorate/access"
	"github.com/quorate/quorate/node/internal/engine"
)

// A caller proves to be a node by a certificate or token of caller
// quorate://node/<id>, or by being the node (its own call); any other
// identity proves no node.
func TestProvenNode(t *testing.T) {
	for _, tc := range []struct {
		id   access.Identity
		want string
	}{
		{access.Identity{Caller: "quorate://node/node3", Source: access.SourceCertificate}, "node3"},
		{access.Identity{Caller: "quorate://node/node3", Source: access.SourceToken}, "node3"},
		{engine.NodeIdentity("node3"), "node3"},
		{access.Identity{Caller: "ops", Source: access.SourceToken}, ""},
		{access.Identity{Caller: "node:node3", Source: access.SourceToken}, ""},
		{access.Identity{Caller: "quorate://node/node3?x=1", Source: access.SourceCertificate}, ""},
		{access.Identity{Caller: "node:", Source: engine.SourceNode}, ""},
		{access.Anonymous(), ""},
	} {
		got, ok := provenNode(tc.id)
		if ok != (tc.want != "") || got != tc.want {
			t.Errorf("%+v: node %q (%v), want %q", tc.id, got, ok, tc.want)
		}
	}
}
