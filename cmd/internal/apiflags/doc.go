// Package apiflags owns the flags by which a Quorate command reaches a
// cluster's API, shared by the quorate and quorate-bench commands: the
// --server list (and $QUORATE_SERVER), the client's TLS files (--tls-ca,
// --tls-cert, --tls-key) and the bearer token of --token-file (or
// $QUORATE_TOKEN), which every call of the command sends.
//
// Secrets — bearer tokens, the node token — are never taken as command
// line arguments: every local user reads a process's arguments (ps,
// /proc/PID/cmdline), and so does whoever reaches a node's profiling
// endpoint (/debug/pprof/cmdline). They are read from a file or the
// environment (SecretFromFileOrEnv); the old flags stay registered,
// hidden, to refuse them with an error that names the flag to use instead,
// without ever echoing the value (RefuseSecretFlag).
package apiflags
