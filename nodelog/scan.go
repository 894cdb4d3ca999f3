package nodelog

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// segmentIDs lists the segment files in dir, oldest first.
func segmentIDs(dir string) ([]uint32, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var ids []uint32
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".seg")
		if !ok || e.IsDir() {
			continue
		}
		id, err := strconv.ParseUint(name, 16, 32)
		if err != nil || len(name) != 8 {
			continue
		}
		ids = append(ids, uint32(id))
	}
	slices.Sort(ids)
	return ids, nil
}

// replay rebuilds the groups' index from the segments, cutting a torn
// tail off the last one. Called by Open only.
func (l *Log) replay() error {
	ids, err := segmentIDs(l.dir)
	if err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(l.dir, spareFile)); err != nil && !os.IsNotExist(err) {
		return err
	}
	// A crash between creating a segment and writing its checkpoint leaves
	// it empty; the segment before it is then the torn one, if any.
	for len(ids) > 0 {
		path := filepath.Join(l.dir, segName(ids[len(ids)-1]))
		fi, err := os.Stat(path)
		if err != nil {
			return err
		}
		if fi.Size() > 0 {
			break
		}
		l.logger.Warn("nodelog: removing an empty segment left by a crash", "file", path)
		if err := os.Remove(path); err != nil {
			return err
		}
		ids = ids[:len(ids)-1]
	}
	for i, id := range ids {
		s := &segment{id: id, path: filepath.Join(l.dir, segName(id))}
		f, err := os.OpenFile(s.path, os.O_RDWR, 0)
		if err != nil {
			return err
		}
		s.f = f
		l.segs = append(l.segs, s)
		l.byID[id] = s
		if err := l.replaySegment(s, i == len(ids)-1); err != nil {
			return err
		}
	}
	for id, g := range l.groups {
		if k, ok := g.hole(); ok {
			return &DamagedError{File: l.dir, Detail: fmt.Sprintf(
				"entry %d of group %d is live by a checkpoint but its record is in no segment (a segment file is missing)", k, id)}
		}
		for _, lc := range g.locs {
			l.byID[lc.seg].live++
		}
	}
	return nil
}

// replaySegment applies the records of s in order. Only in the last
// segment may the log end torn: then the tail is cut off.
func (l *Log) replaySegment(s *segment, last bool) error {
	data, err := os.ReadFile(s.path)
	if err != nil {
		return err
	}
	size := int64(len(data))
	var off int64
	for off < size {
		h, n, detail := nextRecord(data, off)
		if detail == "" {
			// A whole record that does not fit the log is damage wherever
			// it is: it was written, so it may have been acknowledged.
			if detail = l.apply(h, data[off:off+n], s, off); detail != "" {
				return &DamagedError{File: s.path, Offset: off, Detail: detail}
			}
			off += n
			continue
		}
		end := off + nonZeroEnd(data[off:])
		if end == off {
			break // the rest of the segment's preallocated zeros
		}
		if !last || validAfter(data, off+1) {
			return &DamagedError{File: s.path, Offset: off, Detail: detail}
		}
		l.logger.Warn("nodelog: zeroing a torn tail of the last segment (records never acknowledged)",
			"file", s.path, "offset", off, "bytes", end-off, "detail", detail)
		if _, err := s.f.WriteAt(make([]byte, end-off), off); err != nil {
			return err
		}
		if err := fdatasync(s.f); err != nil {
			return err
		}
		break
	}
	s.end, s.written = off, off
	return nil
}

// nextRecord decodes the record at off in data; a non-empty detail says
// why there is none.
func nextRecord(data []byte, off int64) (header, int64, string) {
	avail := int64(len(data)) - off
	if avail < headerLen {
		return header{}, 0, fmt.Sprintf("incomplete record header (%d bytes)", avail)
	}
	n, ok := parseLength(data[off:], avail)
	if !ok {
		return header{}, 0, fmt.Sprintf("record length %d does not fit in the %d bytes left", n, avail)
	}
	h, err := decodeHeader(data[off : off+int64(n)])
	if err != nil {
		return header{}, 0, err.Error()
	}
	return h, int64(n), ""
}

// nonZeroEnd returns the length of b without its trailing zero bytes.
func nonZeroEnd(b []byte) int64 {
	n := len(b)
	for n >= 8 && binary.LittleEndian.Uint64(b[n-8:n]) == 0 {
		n -= 8
	}
	for n > 0 && b[n-1] == 0 {
		n--
	}
	return int64(n)
}

// nextNonZero returns the offset of the first non-zero byte of b from
// off on, or len(b).
func nextNonZero(b []byte, off int64) int64 {
	n := int64(len(b))
	for off+8 <= n && binary.LittleEndian.Uint64(b[off:off+8]) == 0 {
		off += 8
	}
	for off < n && b[off] == 0 {
		off++
	}
	return off
}

// validAfter reports whether a valid record starts anywhere from off on.
// A record's length is not zero, so runs of zeros are skipped.
func validAfter(data []byte, off int64) bool {
	for p := off; p+headerLen <= int64(len(data)); p++ {
		if binary.LittleEndian.Uint32(data[p:p+4]) == 0 {
			p = max(p, nextNonZero(data, p)-4)
			continue
		}
		if _, _, detail := nextRecord(data, p); detail == "" {
			return true
		}
	}
	return false
}

// apply replays one checked record at off in s; a non-empty result says
// why it does not fit the log.
func (l *Log) apply(h header, rec []byte, s *segment, off int64) string {
	nop := func(loc) {}
	g := l.groups[h.group]
	if off == 0 && h.kind != kindCheckpoint {
		return "segment does not open with a checkpoint record"
	}
	switch h.kind {
	case kindCheckpoint:
		if off != 0 {
			return "checkpoint record inside a segment"
		}
		spans := decodeCheckpoint(rec)
		keep := make(map[uint32]bool, len(spans))
		for _, sp := range spans {
			if sp.first == 0 || sp.last < sp.first {
				return fmt.Sprintf("checkpoint span [%d, %d] of group %d", sp.first, sp.last, sp.group)
			}
			keep[sp.group] = true
			gs := l.groups[sp.group]
			if gs == nil {
				gs = &groupState{}
				l.groups[sp.group] = gs
			}
			gs.setSpan(sp.first, sp.last)
		}
		for id := range l.groups {
			if !keep[id] {
				delete(l.groups, id)
			}
		}
	case kindEntry:
		if g == nil {
			g = &groupState{}
			l.groups[h.group] = g
		}
		if !g.add(h.index, loc{seg: s.id, off: uint32(off), n: uint32(len(rec))}) {
			return fmt.Sprintf("entry %d of group %d does not follow its last entry %d", h.index, h.group, g.last)
		}
	case kindHead:
		if g != nil {
			g.truncHead(h.index, nop)
		}
	case kindTail:
		if g != nil {
			g.truncTail(h.index, nop)
		}
	case kindDrop:
		delete(l.groups, h.group)
	}
	return ""
}
