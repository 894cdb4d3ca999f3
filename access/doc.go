// Package access decides who a Quorate caller is and what it may do: the
// pure, file-backed half of authenticated callers and rights. It does no
// network I/O and knows nothing of RPC procedures; package node wires it in
// as Connect interceptors.
//
// # What it owns
//
//   - Identity: who a request is from, and how that was established
//     (Source: "certificate", "token" or "none"). IdentityFromCertificate
//     takes a verified client certificate's single URI SAN (such as a SPIFFE
//     ID), else its subject CN; BearerToken reads an Authorization header;
//     Authenticate combines the two with a token file.
//   - The token file (Tokens, ParseTokens, WatchTokens): callers and the
//     SHA-256 of their bearer tokens, never the tokens themselves.
//     HashToken hashes a token as the file stores it; NewToken makes one.
//     Tokens.Lookup hashes the presented token first and looks the hash up,
//     so the time it takes depends on the hash, not on how much of a secret
//     an attacker guessed. Hashing is plain SHA-256 because tokens are
//     high-entropy secrets (NewToken: 256 random bits), not passwords.
//   - The access file (Rules, Grant, ParseRules, WatchRules): which roles
//     each caller holds and, optionally, which policies its data calls may
//     use.
//     Both files are read by package yamllist; a problem in one is a
//     FileError (yamllist.Error, whose Name is the entry's caller).
//   - Reloading (Watcher, over package filewatch): a file is checked at
//     most once per interval, on use; a change is parsed whole and swapped
//     in atomically, and a file
//     that fails to parse (or vanishes) leaves the previous good content in
//     use and reports the error in Watcher.Status. A bad file never
//     half-applies.
//   - The decisions (Authorizer): Authorize(identity, action, policies) and
//     ResolveCaller(identity, requested), returning errors that wrap
//     ErrUnauthenticated or ErrPermissionDenied, which node's one error
//     table maps to Connect codes.
//   - Action: every operation the API offers, as a typed enum with its
//     Class (health, admin, data, routing), which also tells node which listener
//     serves it when the admin API has its own. Which RPC procedure is
//     which Action is node's table, not this package's; Actions lists
//     every value so that node's tests can check the table is complete.
//
// # Rights
//
// Roles are independent, least privilege: "admin" allows the admin actions
// (policies, nodes, groups, plans, cluster and node status) and no data
// action; "client" allows the data actions (admit, peek, refund, reserve,
// commit, leases, and Policies: reading the policies the caller may use,
// MayUse) and no admin action. A caller that needs both is given
// both. Either role allows routing (Routes: the shard map, group leaders and
// members' addresses), which a client needs before its data calls and
// which a caller limited to some policies may make too, and reflection (the
// API's schema, for grpcurl and the like: public, but not to anonymous
// callers of a node with an access file).
// A caller's "policies" list limits its data calls to those policies; it
// does not limit admin actions. Health checks are allowed to everyone,
// authenticated or not.
//
// The caller that namespaces request IDs for exactly-once comes from the
// identity: a request naming no caller gets the identity's, a request
// naming another is refused (ResolveCaller).
//
// # Open mode
//
// Open() is the Authorizer of a node without an access file: everything is
// allowed and the caller is whatever the request names, as before callers
// were authenticated. This package does not decide when that is safe: the
// node allows open mode only when it listens on loopback addresses, and
// requires an access file otherwise. The zero Authorizer denies everything
// but health checks.
//
// # Must not
//
// Import node, connect or raft; map RPC procedures to actions; read the
// clock except to pace file checks.
package access
