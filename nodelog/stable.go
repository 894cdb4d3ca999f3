package nodelog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
	"go.etcd.io/bbolt"
)

// stableFile is the bbolt file of every group's stable store, in the
// Log's directory: a bucket per group.
const stableFile = "stable.db"

// errStableNotFound is a missing key: Raft matches its message.
var errStableNotFound = errors.New("not found")

func openStable(path string) (*bbolt.DB, error) {
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: time.Second})
	if err != nil {
		return nil, fmt.Errorf("nodelog: open %s: %w", path, err)
	}
	return db, nil
}

func stableBucket(id uint32) []byte { return fmt.Appendf(nil, "group-%08x", id) }

func dropStable(db *bbolt.DB, id uint32) error {
	return db.Update(func(tx *bbolt.Tx) error {
		if err := tx.DeleteBucket(stableBucket(id)); err != nil && !errors.Is(err, bbolt.ErrBucketNotFound) {
			return err
		}
		return nil
	})
}

// Stable returns group id's raft.StableStore (its term and vote): a bucket
// of the Log's bbolt file, each Set a transaction of its own.
func (l *Log) Stable(id uint32) raft.StableStore {
	return &stableStore{db: l.stable, bucket: stableBucket(id)}
}

type stableStore struct {
	db     *bbolt.DB
	bucket []byte
}

func (s *stableStore) Set(key, val []byte) error {
	return s.db.Update(func(tx *bbolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(s.bucket)
		if err != nil {
			return err
		}
		return b.Put(key, val)
	})
}

func (s *stableStore) Get(key []byte) ([]byte, error) {
	var val []byte
	err := s.db.View(func(tx *bbolt.Tx) error {
		b := tx.Bucket(s.bucket)
		if b == nil {
			return errStableNotFound
		}
		v := b.Get(key)
		if v == nil {
			return errStableNotFound
		}
		val = append([]byte(nil), v...)
		return nil
	})
	return val, err
}

func (s *stableStore) SetUint64(key []byte, val uint64) error {
	return s.Set(key, binary.BigEndian.AppendUint64(nil, val))
}

func (s *stableStore) GetUint64(key []byte) (uint64, error) {
	v, err := s.Get(key)
	if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("nodelog: stable value of %q is %d bytes, not 8", key, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}
