// Package local holds budget leases (grants) for a node's callers that
// cannot hold their own — a curl, a gRPC or Connect client in another
// language, Envoy's ShouldRateLimit — and decides their hot keys' requests
// from them in memory.
//
// The grants are the Go client's (client.Holder: the same protocol, sizing
// by demand share, renewal, expiry, release and accounting), held by the
// node under its own caller name. A Decider adds what a node answering
// others needs: which keys are worth a grant (hot.go: those the node sent
// to the cluster often in the last second), and what a request ID means
// for a request decided here (answers.go: a repeat at this node gets the
// first answer). Every denial comes from the cluster: a request the grants
// cannot allow is decided through the log as before.
package local
