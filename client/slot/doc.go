// Package slot computes the slot a key hashes to: xxhash64 of the key's
// hash tag, modulo Count. It is the one implementation of the slot hash;
// the client routes by it and the cluster's shard map (package shard)
// places keys by it.
//
// A key's hash tag is the part of the key inside its first {...} (as in
// Redis Cluster) when that is non-empty, else the whole key. Keys that
// share a tag share a slot, so one request may check and charge them
// atomically: "{tenant:acme}:ip:1.2.3.4" and "{tenant:acme}:route:/x" both
// hash "tenant:acme".
package slot
