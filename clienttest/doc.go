// Package clienttest holds the tests of the Go client and middleware
// against real clusters: each starts real nodes (package node, nodetest)
// over TCP, which the client's own module must not import, so these tests
// live in the server's module and use the client only through its exported
// API. The package has no code of its own.
package clienttest
