// Package refindex is the hash index of Quorate's compact tables: it maps a
// table's keys to refs (uint32 handles of the table's entries) in 8-byte
// cells, without storing the keys, and shrinks as the table empties. The
// FSM's bucket and state tables (fsm/internal/table) and the request-ID
// table (dedupe) find their entries through it. It owns the cells' layout
// and the hashing; the tables own their entries and compare keys.
package refindex
