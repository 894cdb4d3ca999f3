// Package hotkeys finds the heaviest keys of a stream in bounded memory: a
// Space-Saving top-k sketch (Metwally, Agrawal and El Abbadi, 2005).
//
// A Sketch of capacity m keeps at most m counters. A key already counted
// adds its weight to its counter; a new key takes a free counter or, when
// all m are taken, the smallest one, inheriting its count as its error.
// Every count is thus an upper bound of the key's true weight, at most
// Error above it, and any key whose true weight exceeds total/m is among
// the counters. Adding is O(log m). A Sketch is not safe for concurrent
// use: its owner locks.
package hotkeys
