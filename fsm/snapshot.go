package fsm

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/dedupe"
	"github.com/quorate/quorate/fsm/internal/table"
	"github.com/quorate/quorate/lease"

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

type snapshot struct {
	lastNow  int64
	policies []PolicyVersion
	nodes    []Node
	buckets  []table.BucketRecord
	sems     []table.Record[lease.Semaphore]
	reserved []table.Record[reservation]
	dedupe   []dedupe.Entry
	lastTerm uint64
	route    routeState
	frozen   []*raftcmdv1.FreezeSlots
	imports  []*raftcmdv1.ImportProgress
	plans    []*raftcmdv1.Plan
	// clusterID is in the header: a reader that predates it skips it.
	clusterID string
}

var _ raft.FSMSnapshot = (*snapshot)(nil)

// Persist writes the snapshot: magic, header, then policies by name, nodes by
// ID, buckets by key, request-ID entries by (caller, request ID) and
// semaphores by key, each a uvarint length and a protobuf record.
func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	if err := s.writeTo(sink); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s *snapshot) writeTo(w io.Writer) error {
	slices.SortFunc(s.buckets, func(a, b table.BucketRecord) int { return cmp.Compare(a.Key, b.Key) })
	slices.SortFunc(s.dedupe, dedupe.Compare)
	slices.SortFunc(s.sems, func(a, b table.Record[lease.Semaphore]) int { return cmp.Compare(a.Key, b.Key) })
	slices.SortFunc(s.reserved, func(a, b table.Record[reservation]) int { return cmp.Compare(a.Key, b.Key) })
	bw := bufio.NewWriterSize(w, 64<<10)
	enc := recordWriter{w: bw}
	if _, err := bw.WriteString(snapshotMagic); err != nil {
		return err
	}
	enc.write(&raftcmdv1.SnapshotHeader{
		Version:           SnapshotVersion,
		LastNowUnixNano:   s.lastNow,
		PolicyCount:       uint64(len(s.policies)),
		NodeCount:         uint64(len(s.nodes)),
		BucketCount:       uint64(len(s.buckets)),
		DedupeCount:       uint64(len(s.dedupe)),
		SemaphoreCount:    uint64(len(s.sems)),
		LastTerm:          s.lastTerm,
		ReservationCount:  uint64(len(s.reserved)),
		ShardMap:          s.route.shardMap,
		Ownership:         s.route.ownership,
		PoliciesMetaIndex: s.route.policiesMetaIndex,
		Frozen:            s.frozen,
		Imports:           s.imports,
		Plans:             s.plans,
		ClusterId:         s.clusterID,
	})
	for _, p := range s.policies {
		enc.write(&raftcmdv1.PolicyRecord{Policy: PolicyToProto(p.Policy), Version: p.Version})
	}
	for _, n := range s.nodes {
		enc.write(&raftcmdv1.RegisterNode{Id: n.ID, RaftAddr: n.RaftAddr, ApiAddr: n.APIAddr, FeatureLevel: n.FeatureLevel})
	}
	var rec raftcmdv1.BucketRecord
	for _, b := range s.buckets {
		bucketToRecord(&rec, b)
		enc.write(&rec)
	}
	var drec raftcmdv1.DedupeRecord
	for _, e := range s.dedupe {
		drec.Caller, drec.RequestId, drec.Fingerprint = e.Key.Caller, e.Key.RequestID, e.Fingerprint[:]
		drec.Result, drec.ExpiresAtUnixNano, drec.Kind = e.Result, e.ExpiresAt, uint32(e.Kind)
		drec.SlotPlusOne = 0
		if e.Slot != dedupe.NoSlot {
			drec.SlotPlusOne = uint32(e.Slot) + 1
		}
		enc.write(&drec)
	}
	var srec raftcmdv1.SemaphoreRecord
	for _, r := range s.sems {
		semToRecord(&srec, r)
		enc.write(&srec)
	}
	var rrec raftcmdv1.ReservationRecord
	for _, r := range s.reserved {
		reservationToRecord(&rrec, r)
		enc.write(&rrec)
	}
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
	s := &snapshot{lastNow: h.GetLastNowUnixNano(), lastTerm: h.GetLastTerm(), route: routeState{
		shardMap: h.GetShardMap(), ownership: h.GetOwnership(), policiesMetaIndex: h.GetPoliciesMetaIndex()},
		frozen: h.GetFrozen(), imports: h.GetImports(), plans: h.GetPlans(), clusterID: h.GetClusterId()}
	for range h.GetPolicyCount() {
		var p raftcmdv1.PolicyRecord
		if err := dec.read(&p); err != nil {
			return nil, err
		}
		s.policies = append(s.policies, PolicyVersion{Policy: PolicyFromProto(p.GetPolicy()), Version: p.GetVersion()})
	}
	for range h.GetNodeCount() {
		var n raftcmdv1.RegisterNode
		if err := dec.read(&n); err != nil {
			return nil, err
		}
		s.nodes = append(s.nodes, Node{ID: n.GetId(), RaftAddr: n.GetRaftAddr(), APIAddr: n.GetApiAddr(), FeatureLevel: n.GetFeatureLevel()})
	}
	var rec raftcmdv1.BucketRecord
	for range h.GetBucketCount() {
		if err := dec.read(&rec); err != nil {
			return nil, err
		}
		s.buckets = append(s.buckets, bucketFromRecord(&rec))
	}
	for range h.GetDedupeCount() {
		var d raftcmdv1.DedupeRecord
		if err := dec.read(&d); err != nil {
			return nil, err
		}
		e, err := dedupeFromRecord(&d)
		if err != nil {
			return nil, err
		}
		if err := proto.Unmarshal(d.GetResult(), &raftcmdv1.AdmitRecord{}); err != nil {
			return nil, fmt.Errorf("%w: dedupe record %q/%q: result: %v", ErrBadSnapshot, d.GetCaller(), d.GetRequestId(), err)
		}
		s.dedupe = append(s.dedupe, e)
	}
	for range h.GetSemaphoreCount() {
		var r raftcmdv1.SemaphoreRecord
		if err := dec.read(&r); err != nil {
			return nil, err
		}
		s.sems = append(s.sems, semFromRecord(&r))
	}
	for range h.GetReservationCount() {
		var r raftcmdv1.ReservationRecord
		if err := dec.read(&r); err != nil {
			return nil, err
		}
		s.reserved = append(s.reserved, reservationFromRecord(&r))
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

func sortedNodes(m map[string]Node) []Node {
	out := make([]Node, 0, len(m))
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
	return table.BucketRecord{Key: rec.GetKey(), State: st, ExpiresAt: rec.GetExpiresAtUnixNano()}
}
