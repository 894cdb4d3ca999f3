// Package nodelog is one node's Raft log, shared by every Raft group the
// node hosts: the groups' appends that arrive together share one write and
// one fdatasync, where a log store per group pays a sync stream per group.
//
// # API
//
// Open(dir, Options) replays the log in dir. Log.Group(id) is group id's
// raft.LogStore (and raft.MonotonicLogStore): FirstIndex and LastIndex are
// 0 while the group is empty, GetLog of an index outside them returns
// raft.ErrLogNotFound, StoreLogs appends entries that follow the group's
// last one (any index while it is empty), and DeleteRange voids a head
// (compaction after a snapshot), a tail (a conflicting suffix) or all of
// it; a range with entries left on both sides is refused
// (ErrMiddleDelete). Being monotonic, the log is emptied by Raft after it
// installs a snapshot, rather than left with a gap. Log.DropGroup(id) voids
// a deleted replica's entries, durably. The groups' terms and votes
// (raft.StableStore) are not here: rare writes, not worth a format of their
// own, they are in one raft-boltdb file of the node's (package node).
// Every method is safe for concurrent use; every raft.Log field is kept
// (Index, Term, Type, Data, Extensions, AppendedAt to the nanosecond).
//
// # Group commit
//
// StoreLogs, DeleteRange and DropGroup encode their records, and under the
// Log's mutex check them against the group, update the in-memory index and
// queue the bytes at the end of the active segment. Then the caller waits
// until its records are synced (meanwhile LastIndex already counts them,
// and a GetLog of one waits until it is written). A caller that finds queued bytes and no
// commit it must wait for becomes the committer: it takes everything
// queued, writes it with one write and one fdatasync, marks it durable,
// and returns once its own records are; writes queued meanwhile are
// committed by one of their own callers the same way. There is no timer
// and no goroutine: a lone writer never waits for a batch to fill, and
// under load batches grow by themselves. Options.SyncsInFlight (1 by
// default) lets that many commits sync at once, written in order and
// acknowledged in order; on the disks measured it did not pay (see the
// figures below).
//
// # Format
//
// The log is a directory of segment files, 00000001.seg, 00000002.seg, …,
// each zero-filled to Options.SegmentBytes (16 MiB) so that an append's
// fdatasync has only data to flush, never a size or a block allocation.
// The next segment is zero-filled ahead (next-segment.tmp, by a committer
// after its commit once the active segment is half full) and renamed into
// place when needed, so a rollover does not stall every group's appends. Records follow one another from offset 0; zeros after the
// last record are the unused rest. A new segment is started when a
// commit's records would not fit (one StoreLogs call's records are never
// split, so a segment may end larger). Every record, little-endian:
//
//	length  uint32  the whole record, header included
//	crc     uint32  CRC-32C (Castagnoli) over the record but this field
//	kind    uint8   1 checkpoint, 2 entry, 3 head truncated, 4 tail truncated, 5 group dropped
//	type    uint8   the entry's raft.LogType
//	group   uint32
//	index   uint64  entry: its index; head: entries <= index void; tail: entries > index void
//	term    uint64
//	payload         entry: AppendedAt (int64 ns, MinInt64 for zero), len(Data) uint32,
//	                Data, Extensions (the rest); checkpoint: n uint32, then n of
//	                (group uint32, first uint64, last uint64); others: none
//
// Each segment starts with a checkpoint: every non-empty group's first and
// last index when the segment was started. A checkpoint is authoritative:
// replay makes each listed group's range exactly what it says, and a group
// it does not list empty. So deleting an older segment loses nothing the
// records in it said: their effect on ranges is in the next checkpoint.
//
// Memory: per group, a slice of (segment, offset, length) of each live
// entry, 12 bytes an entry; no payload is kept. GetLog reads the record
// with ReadAt and checks its checksum, kind, group and index; a mismatch is
// a *DamagedError naming the file and offset.
//
// # Space
//
// Each segment counts its live entries. A segment is deleted once it has
// none (heads truncated past it, groups dropped), the record that made it
// so is synced, and it is older than a synced checkpoint; never the active
// segment. The log's size is bounded by the groups' live entries plus the
// segments they share.
//
// # Open and damage
//
// Open replays every segment in order. In the last segment, a record that
// is incomplete or fails its checksum, with no valid record after it, is a
// torn tail: writes never acknowledged (an acknowledged record was synced,
// and each segment is synced before the next is started). It is zeroed and
// logged. Anything else is a *DamagedError naming the file and offset: a
// bad record in an older segment or followed by valid ones, a segment not
// opening with a checkpoint, an entry out of sequence, or a live entry
// whose record is in no segment (a file removed). Its message says how to
// recover: wipe the node's replica data and let the node rejoin; its
// replicas are restored from their peers. Open never drops an acknowledged
// entry silently. Each Open starts a new segment with a checkpoint, then
// deletes the segments left without live entries.
//
// A write or sync that fails makes the Log refuse every later write: the
// in-memory index may be ahead of the disk, and Raft stops on such an
// error anyway. Reopen to recover.
//
// On a power loss (not a process crash), the pages of the last unsynced
// write may reach the disk out of order, leaving valid records after a
// hole in the last segment; Open then reports damage rather than guess
// that the records after the hole were never acknowledged.
//
// # Figures
//
// BenchmarkStoreLogs: G groups each storing 1-entry batches of 200 bytes,
// synced, concurrently; measured when this package was written, against a
// raft-wal WAL per group (the store replicas of earlier builds had; the
// benchmark now measures nodelog alone). fsyncs per StoreLogs are counted
// by the Log and were checked with strace -c, which also showed raft-wal's
// one fsync per StoreLogs. A 2-vCPU VM with a virtual disk whose
// sync latency swung between 0.2 and 1.5 ms from minute to minute, shared
// with other builds (load average 4–8); -benchtime 2s, three runs
// alternating the two stores:
//
//	        nodelog entries/s   fsyncs/StoreLogs   raft-wal entries/s
//	G=1     4.2k  2.2k  4.9k    1                  4.3k  4.7k  4.8k
//	G=8     8.4k 13.0k  5.0k    0.225 (4.4 a sync)  11.2k  8.1k  8.0k
//	G=64    74k   45k   53k     0.032 (31 a sync)   10.1k  7.5k  9.7k
//
// So: one group as fast as its own WAL; eight groups about as fast as
// eight WALs (0.6× to 1.6×, the disk's mood) with a quarter of the syncs;
// 64 groups five to seven times as fast with a thirtieth of them. At G=8
// the disk overlaps eight WALs' concurrent syncs, and one commit stream
// carries only about half the writers each time (the others queue for the
// next). SyncsInFlight 2 lets two commits sync at once but splits the
// batches further: in one session 6.3k and 3.5k at G=8 where 1 made 8.4k
// and 5.4k, and at G=64 35k and 31k against 43k and 32k with twice the
// syncs; hence 1 by default. Take the figures with
// go test -run '^$' -bench StoreLogs -benchtime 2s ./nodelog/.
package nodelog
