package replica

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
)

// stableFileName is the node's stable store, under its data directory:
// one raft-boltdb file holding every replica's term and vote (raft's
// StableStore), each replica's keys prefixed with its group ID.
const stableFileName = "stable.db"

// errStableDamaged is wrapped by the error of a stable store bbolt cannot
// read.
var errStableDamaged = errors.New("damaged")

// openStable checks the stable store at path, then opens it (creating it
// when missing). raft-boltdb commits, and bbolt fsyncs, every Set before
// it returns (Options.NoSync stays false): raft persists a vote before it
// answers the RequestVote that asked for it, and a term before it acts in
// it, so a restarted replica never votes twice in a term.
func openStable(path string) (_ *raftboltdb.BoltStore, err error) {
	if err := checkStable(path); err != nil {
		return nil, err
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%s is %w: opening it failed: %v", path, errStableDamaged, r)
		}
	}()
	s, err := raftboltdb.New(raftboltdb.Options{Path: path, BoltOptions: &bbolt.Options{Timeout: time.Second}})
	if err != nil {
		return nil, fmt.Errorf("opening %s (is another node using it?): %w", path, err)
	}
	return s, nil
}

// checkStable reads every page of the bbolt file at path before it is
// opened for writing. bbolt meets some damage (a truncated file, a page
// overwritten) with a panic, or with a fault reading past the end of its
// mapping, instead of an error, and the panic names no file; opening the
// file writable may rebuild its freelist on a goroutine of bbolt's, where a
// panic could not be recovered, so the pages must be known good first.
func checkStable(path string) (err error) {
	if fi, err := os.Stat(path); errors.Is(err, os.ErrNotExist) || err == nil && fi.Size() == 0 {
		return nil // new, or created by a process that stopped at once: bbolt initializes it
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%s is %w: reading it failed: %v", path, errStableDamaged, r)
		}
	}()
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: time.Second})
	switch {
	case errors.Is(err, bbolt.ErrTimeout):
		return fmt.Errorf("opening %s (is another node using it?): %w", path, err)
	case err != nil:
		return fmt.Errorf("%s is %w: opening it failed: %v", path, errStableDamaged, err)
	}
	defer db.Close()
	err = db.View(func(tx *bbolt.Tx) error {
		if fi, err := os.Stat(path); err == nil && tx.Size() > fi.Size() {
			return fmt.Errorf("it is %d bytes long, its pages need %d", fi.Size(), tx.Size())
		}
		return tx.ForEach(func(_ []byte, b *bbolt.Bucket) error { readBucket(b); return nil })
	})
	if err != nil {
		return fmt.Errorf("%s is %w: %v", path, errStableDamaged, err)
	}
	return nil
}

// readBucket reads every key and nested bucket of b: every page under it.
func readBucket(b *bbolt.Bucket) {
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if v == nil {
			if nb := b.Bucket(k); nb != nil {
				readBucket(nb)
			}
		}
	}
}

// replicaStable is one replica's raft.StableStore: its keys in the node's
// stable store, each prefixed with the group ID (4 bytes, big-endian).
type replicaStable struct {
	store *raftboltdb.BoltStore
	group uint32
}

var _ raft.StableStore = replicaStable{}

func (s replicaStable) key(k []byte) []byte {
	return append(binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(k)), s.group), k...)
}

// Set implements raft.StableStore.
func (s replicaStable) Set(k, v []byte) error { return s.store.Set(s.key(k), v) }

// Get implements raft.StableStore; a missing key is raft-boltdb's
// ErrKeyNotFound, whose message raft matches.
func (s replicaStable) Get(k []byte) ([]byte, error) { return s.store.Get(s.key(k)) }

// SetUint64 implements raft.StableStore.
func (s replicaStable) SetUint64(k []byte, v uint64) error { return s.store.SetUint64(s.key(k), v) }

// GetUint64 implements raft.StableStore.
func (s replicaStable) GetUint64(k []byte) (uint64, error) { return s.store.GetUint64(s.key(k)) }

// raftTermKeys are the keys raft keeps a term in: its current term and the
// term of its last vote (the vote's candidate, LastVoteCand, counts only
// in that term).
var raftTermKeys = [][]byte{[]byte("CurrentTerm"), []byte("LastVoteTerm")}

// forget durably sets the replica's terms back to 0, as a replica that
// never ran has them (raft takes a current term of 0 for no state): a new
// replica of the group starts from there. raft-boltdb cannot delete a key.
func (s replicaStable) forget() error {
	for _, k := range raftTermKeys {
		if err := s.SetUint64(k, 0); err != nil {
			return err
		}
	}
	return nil
}
