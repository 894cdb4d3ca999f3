// Command gateway is a small HTTP service protected by Quorate's middleware,
// to run against `make run`'s cluster:
//
//	make run                        # in one terminal: 3 nodes, API on 127.0.0.1:7070-7072
//	go run ./examples/gateway       # in another: the service on 127.0.0.1:8080
//	curl -i -H 'Authorization: Bearer alice' http://127.0.0.1:8080/items/42
//
// Every request spends from two limits decided together in one atomic
// check: "per-client" (policy api-free: 20 at once, 60 a minute, per
// client; a write costs 5) and "per-route" (policy search: 100 a minute per
// client and route template). The client is the bearer token's user, or
// else the client's address (its /64 for IPv6), read from X-Forwarded-For
// only when the peer is one of --trusted-proxy. Both policies have local
// decisions (budget leases): once a key is busy, its requests are decided
// in the gateway's memory, exactly, from units the cluster granted it, and
// only a request that finds a lease short goes to the cluster. Answers carry
// RateLimit-Policy and RateLimit (for a request decided from leases, the
// keys' remaining as the gateway knows them); a denial is 429 with
// Retry-After and Quorate-Denied-By naming the limit. When the cluster
// cannot decide and no lease holds the request's cost, the client applies
// the policies' on_unavailable (search's is deny, the default, so requests
// are answered 503) and the service logs every decision made without the
// cluster.
//
// The bearer "authentication" here trusts any token as a user name: it only
// shows where a real authentication middleware puts the principal.
package main
