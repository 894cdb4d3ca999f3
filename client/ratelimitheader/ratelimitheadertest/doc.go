// Package ratelimitheadertest reads the RateLimit-Policy and RateLimit
// header fields back, for tests: ParseList parses a field strictly as the
// structured-field List (RFC 9651) package ratelimitheader writes, and
// fails on anything else. The middleware's own tests read the fields of a
// fake cluster's decisions with it, and the server module's tests
// (clienttest) those of a real cluster's.
package ratelimitheadertest
