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
// installs a snapshot, rather than left with a gap. Log.Stable(id) is the
// group's raft.StableStore, a bucket of one bbolt file (stable.db) in dir:
// terms and votes are rare writes, not worth a format of their own.
// Log.DropGroup(id) voids a deleted replica's entries and stable store,
// durably. Every method is safe for concurrent use; every raft.Log field
// is kept (Index, Term, Type, Data, Extensions, AppendedAt to the
// nanosecond).
//
// # Group commit
//
// StoreLogs, DeleteRange and DropGroup encode their records, and under the
// Log's mutex check them against the group, update the in-memory index and
// queue the bytes at the end of the active segment. Then the caller waits
// until its records are synced. A caller that finds queued bytes and no
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
// synced, concurrently; nodelog (one Log) against a raft-wal WAL per group.
// fsyncs per StoreLogs counted by the Log and checked with strace -c (a WAL
// does one fsync per StoreLogs). A 2-vCPU VM with a virtual disk whose
// sync latency swung 0.25–1.5 ms between runs, shared with other builds
// (load average 6–10); -benchtime 2s, two or three runs each, in two
// sessions a few minutes apart (where two ranges are given: the later
// session; the earlier one):
//
//	G=1   nodelog  990–1000 entries/s  1 fsync/StoreLogs
//	      raft-wal 880–920             1
//	G=8   nodelog  3.4k–4.2k; 8.9k–10.9k   0.22 (4.5 entries a sync)
//	      raft-wal 4.8k–5.3k; 5.8k–6.6k    1
//	G=64  nodelog  29.7k–32.4k; 28k–35k    0.031 (32 entries a sync)
//	      raft-wal 9.9k–11.4k; 7.1k–8.4k   1
//
// So: at 64 groups three to four times the entries with a thirtieth of the
// syncs; at 8 groups a quarter of the syncs, and between 0.7× and 1.7× the
// entries: this disk overlaps concurrent syncs, which eight WALs use and
// one commit stream does not (with 8 writers each commit carries about
// half of them, the others queued for the next). SyncsInFlight 2 let two
// commits sync at once but split the batches further: 6.7k–7.9k at G=8
// where one commit stream made 8.9k–10.9k in the same session, the same at
// G=64 with 1.7× the syncs; hence 1 by default. Take the figures with
// go test -run '^$' -bench StoreLogs -benchtime 2s ./nodelog/.
package nodelog
