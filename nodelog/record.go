package nodelog

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"time"

	"github.com/hashicorp/raft"
)

// Record kinds. The values are part of the on-disk format.
const (
	kindCheckpoint uint8 = 1 // every live group's first and last index; opens each segment
	kindEntry      uint8 = 2 // one raft.Log of a group
	kindHead       uint8 = 3 // a group's entries at or below index are void
	kindTail       uint8 = 4 // a group's entries above index are void
	kindDrop       uint8 = 5 // the group is dropped: all its entries are void
)

const (
	// headerLen is the fixed header of every record: length (4), CRC-32C
	// (4), kind (1), raft log type (1), group (4), index (8), term (8).
	headerLen = 30
	// entryFixedLen follows the header of an entry record: AppendedAt (8)
	// and the length of Data (4); Extensions take the rest of the record.
	entryFixedLen = 12
	// maxRecordLen bounds a record's length field, so that a damaged one
	// never makes the scan allocate gigabytes.
	maxRecordLen = 1 << 30
	// noTime encodes a zero AppendedAt.
	noTime = math.MinInt64
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// header is a decoded record header.
type header struct {
	length uint32
	kind   uint8
	typ    uint8
	group  uint32
	index  uint64
	term   uint64
}

// recordCRC is the checksum of rec: over its header and payload, the CRC
// field itself left out.
func recordCRC(rec []byte) uint32 {
	c := crc32.Update(0, castagnoli, rec[0:4])
	return crc32.Update(c, castagnoli, rec[8:])
}

// putHeader writes h at the start of rec; seal computes the checksum
// once the payload is in place.
func putHeader(rec []byte, h header) {
	binary.LittleEndian.PutUint32(rec[0:4], uint32(len(rec)))
	rec[8] = h.kind
	rec[9] = h.typ
	binary.LittleEndian.PutUint32(rec[10:14], h.group)
	binary.LittleEndian.PutUint64(rec[14:22], h.index)
	binary.LittleEndian.PutUint64(rec[22:30], h.term)
}

func seal(rec []byte) { binary.LittleEndian.PutUint32(rec[4:8], recordCRC(rec)) }

// appendEntry appends the record of log l of group g to buf.
func appendEntry(buf []byte, g uint32, l *raft.Log) []byte {
	n := headerLen + entryFixedLen + len(l.Data) + len(l.Extensions)
	start := len(buf)
	buf = append(buf, make([]byte, n)...)
	rec := buf[start:]
	putHeader(rec, header{kind: kindEntry, typ: uint8(l.Type), group: g, index: l.Index, term: l.Term})
	at := int64(noTime)
	if !l.AppendedAt.IsZero() {
		at = l.AppendedAt.UnixNano()
	}
	binary.LittleEndian.PutUint64(rec[30:38], uint64(at))
	binary.LittleEndian.PutUint32(rec[38:42], uint32(len(l.Data)))
	copy(rec[42:], l.Data)
	copy(rec[42+len(l.Data):], l.Extensions)
	seal(rec)
	return buf
}

// appendMark appends a record without payload (kindHead, kindTail,
// kindDrop) to buf.
func appendMark(buf []byte, kind uint8, g uint32, index uint64) []byte {
	start := len(buf)
	buf = append(buf, make([]byte, headerLen)...)
	rec := buf[start:]
	putHeader(rec, header{kind: kind, group: g, index: index})
	seal(rec)
	return buf
}

// span is a group's live range in a checkpoint.
type span struct {
	group       uint32
	first, last uint64
}

// appendCheckpoint appends a checkpoint record listing spans to buf.
func appendCheckpoint(buf []byte, spans []span) []byte {
	n := headerLen + 4 + 20*len(spans)
	start := len(buf)
	buf = append(buf, make([]byte, n)...)
	rec := buf[start:]
	putHeader(rec, header{kind: kindCheckpoint})
	binary.LittleEndian.PutUint32(rec[30:34], uint32(len(spans)))
	p := rec[34:]
	for _, s := range spans {
		binary.LittleEndian.PutUint32(p[0:4], s.group)
		binary.LittleEndian.PutUint64(p[4:12], s.first)
		binary.LittleEndian.PutUint64(p[12:20], s.last)
		p = p[20:]
	}
	seal(rec)
	return buf
}

// parseLength reads the length field of a record whose first bytes are
// b, and says whether it is plausible given avail bytes from its start.
func parseLength(b []byte, avail int64) (uint32, bool) {
	n := binary.LittleEndian.Uint32(b[0:4])
	return n, n >= headerLen && n <= maxRecordLen && int64(n) <= avail
}

// decodeHeader checks rec's checksum and kind and decodes its header.
func decodeHeader(rec []byte) (header, error) {
	if len(rec) < headerLen || binary.LittleEndian.Uint32(rec[0:4]) != uint32(len(rec)) {
		return header{}, fmt.Errorf("record length does not match")
	}
	if got, want := recordCRC(rec), binary.LittleEndian.Uint32(rec[4:8]); got != want {
		return header{}, fmt.Errorf("checksum mismatch (stored %08x, computed %08x)", want, got)
	}
	h := header{
		length: uint32(len(rec)),
		kind:   rec[8],
		typ:    rec[9],
		group:  binary.LittleEndian.Uint32(rec[10:14]),
		index:  binary.LittleEndian.Uint64(rec[14:22]),
		term:   binary.LittleEndian.Uint64(rec[22:30]),
	}
	switch h.kind {
	case kindEntry:
		if len(rec) < headerLen+entryFixedLen ||
			uint64(binary.LittleEndian.Uint32(rec[38:42])) > uint64(len(rec)-headerLen-entryFixedLen) {
			return header{}, fmt.Errorf("entry record too short")
		}
	case kindCheckpoint:
		if len(rec) < headerLen+4 || uint64(len(rec)) != headerLen+4+20*uint64(binary.LittleEndian.Uint32(rec[30:34])) {
			return header{}, fmt.Errorf("checkpoint record of the wrong length")
		}
	case kindHead, kindTail, kindDrop:
	default:
		return header{}, fmt.Errorf("unknown record kind %d", h.kind)
	}
	return h, nil
}

// decodeEntry fills l from the checked entry record rec with header h.
// Data and Extensions are copies, never aliases of rec.
func decodeEntry(rec []byte, h header, l *raft.Log) {
	l.Index, l.Term, l.Type = h.index, h.term, raft.LogType(h.typ)
	l.AppendedAt = time.Time{}
	if at := int64(binary.LittleEndian.Uint64(rec[30:38])); at != noTime {
		l.AppendedAt = time.Unix(0, at)
	}
	dn := int(binary.LittleEndian.Uint32(rec[38:42]))
	body := rec[42:]
	l.Data, l.Extensions = nil, nil
	if dn > 0 {
		l.Data = append([]byte(nil), body[:dn]...)
	}
	if len(body) > dn {
		l.Extensions = append([]byte(nil), body[dn:]...)
	}
}

// decodeCheckpoint returns the spans of the checked checkpoint record rec.
func decodeCheckpoint(rec []byte) []span {
	n := binary.LittleEndian.Uint32(rec[30:34])
	spans := make([]span, 0, n)
	p := rec[34:]
	for range n {
		spans = append(spans, span{
			group: binary.LittleEndian.Uint32(p[0:4]),
			first: binary.LittleEndian.Uint64(p[4:12]),
			last:  binary.LittleEndian.Uint64(p[12:20]),
		})
		p = p[20:]
	}
	return spans
}
