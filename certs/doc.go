// Package certs is Quorate's TLS material: it loads a node's certificate, key
// and CA bundle from PEM files, reloads them when the files change, builds the
// tls.Configs of the API listener and of the peer port (mutual TLS between
// nodes), names the node or the caller a certificate authenticates, and makes
// a throwaway CA for `quorate dev --tls` and tests. It depends only on the
// standard library and package filewatch; package node and cmd/quorate
// wire it in.
//
// # Source and reloads
//
// A Source (NewSource) serves one consistent set of material: a certificate
// with its key, and a CA bundle. It reloads them with package filewatch and
// starts no goroutine: a handshake, Leaf, Status or Err checks the files
// first when a check is due (at most once per Options.Interval). A check
// stats the files; when one may have changed it reads all of them, and
// when their content hash differs from what is served it parses them.
// New material replaces the old in one atomic swap (certificate, key and
// bundle together) and is what every later handshake sees; open connections
// keep the material they were made with. A reload that fails — a PEM block
// cut short (a half-written file), a key that is not the certificate's, an
// empty or unparsable CA bundle, a certificate expired or not yet valid, or
// with Options.CheckOwnChain a certificate the bundle does not sign — keeps
// the previous material, is reported by Status, Err and Options.OnReload,
// and is retried at every check until the files load. Reload reads the
// files at once; Leaf is the served certificate, for the node to check that
// it names the node's own ID. A served certificate that expires while the
// files stay unchanged is not replaced: Status.NotAfter shows it coming.
// Writing each file by a rename (WriteFileAtomic), key before
// certificate, or keeping key and certificate in one file, avoids even the
// transient failure of a half-replaced pair.
//
// # Configs
//
// ServerConfig is the API listener's: TLS 1.2 or later, caller
// certificates not asked for, optional (verified when given, so a caller
// may use a certificate or a bearer token) or required. PeerServerConfig
// and PeerClientConfig are the peer port's: TLS 1.3, certificates required
// and verified both ways at every handshake against the CA bundle current
// at that moment, and a hook (PeerOptions.AllowNode) refusing a peer whose
// certificate names no node the cluster knows. ClientConfig is a caller's
// (a node calling another node's API, the CLI).
//
// # Names
//
// A node certificate names its node by exactly one URI SAN
// quorate://node/<id> (NodeURI, NodeID), the ID being what
// `quorate serve --id` accepts; its CN and DNS/IP SANs are for host name
// checks only. Which caller a client certificate authenticates is package
// access's to say (access.IdentityFromCertificate).
//
// # Development CA
//
// NewDevCA writes to a directory ca.pem and ca-key.pem, node-<id>.pem and
// node-<id>-key.pem for each node, and admin.pem/admin-key.pem and
// client.pem/client-key.pem for two callers (identities DevAdminIdentity
// and DevClientIdentity): ECDSA P-256, valid 7 days, keys mode 0600.
// IssueDevCert issues one more certificate from that CA (a rotation in
// tests).
package certs
