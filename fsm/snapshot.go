package fsm

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/fsm/internal/table"

	raftcmdv1 "github.com/quorate/quorate/proto/quorate/raftcmd/v1"
)

// snapshotMagic starts every snapshot; the header that follows carries the
// format version.
const snapshotMagic = "QUORATE\x00"

// SnapshotVersion is the snapshot format this binary writes and reads.
const SnapshotVersion = 1

// maxRecordBytes bounds one snapshot record, so a corrupt length cannot make
// Restore allocate without limit.
const maxRecordBytes = 1 << 20

// snapshot is a copy of the FSM's state: the shared part (time, term,
// policies) and the parts of metaState and dataState, each of which writes
// and reads its own header fields and records.
type snapshot struct {
	lastNow  int64
	lastTerm uint64
	policies []PolicyVersion // by name
	meta     metaSnapshot
	data     dataSnapshot
}

var _ raft.FSMSnapshot = (*snapshot)(nil)

// Persist writes the snapshot: magic, header, then policies by name, nodes by
// ID, buckets by key, request-ID entries by (caller, request ID),
// semaphores by key, reservations by ID and the meta group's audit records
// by log index, each a uvarint length and a protobuf record.
func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	if err := s.writeTo(sink); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s *snapshot) writeTo(w io.Writer) error {
	s.data.sort()
	bw := bufio.NewWriterSize(w, 64<<10)
	enc := recordWriter{w: bw}
	if _, err := bw.WriteString(snapshotMagic); err != nil {
		return err
	}
	h := &raftcmdv1.SnapshotHeader{
		Version:         SnapshotVersion,
		LastNowUnixNano: s.lastNow,
		PolicyCount:     uint64(len(s.policies)),
		LastTerm:        s.lastTerm,
	}
	s.meta.header(h)
	s.data.header(h)
	enc.write(h)
	for _, p := range s.policies {
		enc.write(&raftcmdv1.PolicyRecord{Policy: PolicyToProto(p.Policy), Version: p.Version})
	}
	s.meta.writeRecords(&enc)
	s.data.writeRecords(&enc)
	s.meta.writeAudit(&enc)
	if enc.err != nil {
		return enc.err
	}
	return bw.Flush()
}

func (s *snapshot) Release() {}

type recordWriter struct {
	w   *bufio.Writer
	buf []byte
	err error
}

func (r *recordWriter) write(m proto.Message) {
	if r.err != nil {
		return
	}
	var err error
	r.buf = binary.AppendUvarint(r.buf[:0], uint64(proto.Size(m)))
	r.buf, err = proto.MarshalOptions{Deterministic: true}.MarshalAppend(r.buf, m)
	if err != nil {
		r.err = err
		return
	}
	_, r.err = r.w.Write(r.buf)
}

func readSnapshot(r io.Reader) (*snapshot, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	magic := make([]byte, len(snapshotMagic))
	if _, err := io.ReadFull(br, magic); err != nil || string(magic) != snapshotMagic {
		return nil, fmt.Errorf("%w: missing magic", ErrBadSnapshot)
	}
	dec := recordReader{r: br}
	var h raftcmdv1.SnapshotHeader
	if err := dec.read(&h); err != nil {
		return nil, err
	}
	if h.GetVersion() != SnapshotVersion {
		return nil, fmt.Errorf("%w: format version %d, this binary reads %d", ErrBadSnapshot, h.GetVersion(), SnapshotVersion)
	}
	s := &snapshot{lastNow: h.GetLastNowUnixNano(), lastTerm: h.GetLastTerm()}
	for range h.GetPolicyCount() {
		var p raftcmdv1.PolicyRecord
		if err := dec.read(&p); err != nil {
			return nil, err
		}
		s.policies = append(s.policies, PolicyVersion{Policy: PolicyFromProto(p.GetPolicy()), Version: p.GetVersion()})
	}
	var err error
	if s.meta, err = readMetaSnapshot(&h, &dec); err != nil {
		return nil, err
	}
	if s.data, err = readDataSnapshot(&h, &dec); err != nil {
		return nil, err
	}
	if err := s.meta.readAudit(&h, &dec); err != nil {
		return nil, err
	}
	if _, err := br.ReadByte(); err != io.EOF {
		return nil, fmt.Errorf("%w: trailing data", ErrBadSnapshot)
	}
	return s, nil
}

type recordReader struct {
	r   *bufio.Reader
	buf []byte
}

func (r *recordReader) read(m proto.Message) error {
	n, err := binary.ReadUvarint(r.r)
	if err != nil {
		return fmt.Errorf("%w: record length: %v", ErrBadSnapshot, err)
	}
	if n > maxRecordBytes {
		return fmt.Errorf("%w: record of %d bytes", ErrBadSnapshot, n)
	}
	r.buf = slices.Grow(r.buf[:0], int(n))[:n]
	if _, err := io.ReadFull(r.r, r.buf); err != nil {
		return fmt.Errorf("%w: record: %v", ErrBadSnapshot, err)
	}
	if err := proto.Unmarshal(r.buf, m); err != nil {
		return fmt.Errorf("%w: record: %v", ErrBadSnapshot, err)
	}
	return nil
}

func sortedPolicies(m map[string]PolicyVersion) []PolicyVersion {
	out := make([]PolicyVersion, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, m[k])
	}
	return out
}

// bucketToRecord fills rec (reused between calls) from b.
func bucketToRecord(rec *raftcmdv1.BucketRecord, b table.BucketRecord) {
	st := b.State
	rec.Key, rec.Kind, rec.TatUnixNano = b.Key, uint32(st.Kind), st.TAT
	rec.WindowStartUnixNano, rec.Count, rec.PrevCount = st.Start, st.Count, st.Prev
	rec.ExpiresAtUnixNano = b.ExpiresAt
	rec.Log = rec.Log[:0]
	for _, e := range st.Log {
		rec.Log = append(rec.Log, &raftcmdv1.LogEntry{AtUnixNano: e.At, Cost: e.Cost})
	}
	rec.ShiftedNanos, rec.ForgottenUntilUnixNano = st.Shifted, st.Forgotten
	rec.Refunds = rec.Refunds[:0]
	for _, m := range st.Refunds {
		rec.Refunds = append(rec.Refunds, &raftcmdv1.RefundMark{EndUnixNano: m.End, ShiftNanos: m.Shift, UntilUnixNano: m.Until})
	}
}

func bucketFromRecord(rec *raftcmdv1.BucketRecord) table.BucketRecord {
	st := admission.State{
		Kind:  admission.Kind(rec.GetKind()),
		TAT:   rec.GetTatUnixNano(),
		Start: rec.GetWindowStartUnixNano(),
		Count: rec.GetCount(),
		Prev:  rec.GetPrevCount(),
	}
	if n := len(rec.GetLog()); n > 0 {
		st.Log = make([]admission.LogEntry, n)
		for i, e := range rec.GetLog() {
			st.Log[i] = admission.LogEntry{At: e.GetAtUnixNano(), Cost: e.GetCost()}
		}
	}
	st.Shifted, st.Forgotten = rec.GetShiftedNanos(), rec.GetForgottenUntilUnixNano()
	if n := len(rec.GetRefunds()); n > 0 {
		st.Refunds = make([]admission.RefundMark, n)
		for i, m := range rec.GetRefunds() {
			st.Refunds[i] = admission.RefundMark{End: m.GetEndUnixNano(), Shift: m.GetShiftNanos(), Until: m.GetUntilUnixNano()}
		}
	}
	return table.BucketRecord{Key: rec.GetKey(), State: st, ExpiresAt: rec.GetExpiresAtUnixNano()}
}
