package node

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// The frame layout of a WAL segment file: a 32-byte file header, then
// frames, each an 8-byte header (type, 3 zero bytes, then a little-endian
// length, or for a commit frame the CRC-32C of every byte written since the
// previous commit frame, the file header included for the first) and its
// payload padded to 8 bytes. Zeros follow the last frame written (the file
// is preallocated).
const (
	walFileHeaderLen  = 32
	walFrameHeaderLen = 8
	walFrameEntry     = 1
	walFrameIndex     = 2
	walFrameCommit    = 3
)

// walFrame decodes the frame header at off in b: its type and length (or
// CRC), and ok false when it is not a frame header. end reports zeros: the
// end of what was written.
func walFrame(b []byte, off int) (typ byte, n uint32, ok, end bool) {
	if off+walFrameHeaderLen > len(b) {
		return 0, 0, false, true
	}
	h := b[off : off+walFrameHeaderLen]
	typ, n = h[0], binary.LittleEndian.Uint32(h[4:])
	if typ == 0 && n == 0 && h[1]|h[2]|h[3] == 0 {
		return 0, 0, false, true
	}
	if typ < walFrameEntry || typ > walFrameCommit || h[1]|h[2]|h[3] != 0 {
		return 0, 0, false, false
	}
	if typ != walFrameCommit && uint64(off)+walFrameHeaderLen+uint64(n) > uint64(len(b)) {
		return 0, 0, false, false
	}
	return typ, n, true, false
}

// walFrameSize is the length of a frame with an n-byte payload.
func walFrameSize(n uint32) int { return walFrameHeaderLen + (int(n)+7)&^7 }

// scanSegment reads a WAL segment file's frames through and checks every
// batch against its commit frame, returning the payloads of the entry
// frames of the batches that check, in order. A crash during an append can
// leave the last batch written torn: unreadable frames or a checksum that
// fails, followed by nothing that checks. The WAL drops such a batch when
// it opens (it was never acknowledged: its fsync had not returned), so that
// is not damage. A batch that fails followed by a later one that checks is
// damage in the middle of the file, which the WAL would take for a torn
// tail and silently cut the log at: then scanSegment says what is wrong.
func scanSegment(b []byte) (entries [][]byte, detail string) {
	var batch [][]byte
	off, start := walFileHeaderLen, 0
	for {
		typ, n, ok, end := walFrame(b, off)
		switch {
		case end:
			// Zeros end what was written, unless a frame header was
			// damaged into them, or a length into pointing at them.
			return entries, laterBatch(b, off+walFrameHeaderLen, fmt.Sprintf("the frames stop at offset %d", off))
		case !ok:
			return entries, laterBatch(b, off+walFrameHeaderLen, fmt.Sprintf("the frame at offset %d is unreadable", off))
		case typ == walFrameCommit:
			if crc32.Checksum(b[start:off], castagnoli) != n {
				return entries, laterBatch(b, off+walFrameHeaderLen,
					fmt.Sprintf("the entries written at offsets %d-%d fail their checksum", start, off))
			}
			entries, batch = append(entries, batch...), batch[:0]
			off += walFrameHeaderLen
			start = off
		default:
			if typ == walFrameEntry {
				batch = append(batch, b[off+walFrameHeaderLen:off+walFrameHeaderLen+int(n)])
			}
			off += walFrameSize(n)
		}
	}
}

// laterBatch looks for a batch that checks at or after from, reporting
// what (the damage found before it) when there is one.
func laterBatch(b []byte, from int, what string) string {
	for p := from; p+walFrameHeaderLen <= len(b); p += walFrameHeaderLen {
		if batchChecks(b, p) {
			return fmt.Sprintf("%s, and entries written after them, at offset %d, are whole: the file is damaged "+
				"in the middle, not cut short by a crash", what, p)
		}
	}
	return ""
}

// batchChecks reports whether the bytes at p are frames ending in a commit
// frame whose checksum matches them.
func batchChecks(b []byte, p int) bool {
	for off := p; ; {
		typ, n, ok, _ := walFrame(b, off)
		switch {
		case !ok:
			return false
		case typ == walFrameCommit:
			return off > p && crc32.Checksum(b[p:off], castagnoli) == n
		default:
			off += walFrameSize(n)
		}
	}
}
