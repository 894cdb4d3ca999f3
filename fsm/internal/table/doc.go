// Package table holds the FSM's state tables: StateTable, a generic table
// of states by state key (semaphores, reservations), and BucketTable, the
// same for rate-algorithm buckets with each state stored in the smallest
// slot shape that holds it. Both find a key through a refindex.Index (an
// open-addressing hash index of 32-bit refs) and order their states by
// (expiry, key) in an expiryOrder (a binary heap), so that expired states
// are reclaimed in the same order on every replica. Nothing here reads a
// clock or iterates a map: the tables are as deterministic as the FSM that
// drives them. They are not safe for concurrent use.
package table
