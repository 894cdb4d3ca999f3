package access

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultInterval is how often a Watcher looks at its file when not told.
const DefaultInterval = time.Second

// racyWindow: a file read less than this after its modification time may
// change again without its size or modification time changing (coarse file
// system timestamps), so it is read again at the next check.
const racyWindow = 2 * time.Second

// Watcher holds the parsed content of a file and reloads it when the file
// changes. Current looks at the file at most once per interval: a stat,
// and when the size, modification time or file changed (or may have), a
// read and a SHA-256 of the content; only new content is parsed. A parse
// that fails, or a file that cannot be read, keeps the previous content in
// use and reports the error in Status until the file is good again.
// Watcher starts no goroutine; it is safe for concurrent use.
type Watcher[T any] struct {
	path     string
	interval time.Duration
	parse    func(file string, data []byte) (T, error)

	cur  atomic.Pointer[snapshot[T]]
	next atomic.Int64 // Unix nanoseconds of the next check due

	mu     sync.Mutex  // one check at a time; guards what follows
	seen   os.FileInfo // the file as last read
	readAt time.Time   // when it was
	sum    string      // hex SHA-256 of the content last read
}

// snapshot is what Current and Status return, swapped whole.
type snapshot[T any] struct {
	value  T
	status Status
}

// Status describes a Watcher's file, for node status and logs.
type Status struct {
	Path      string
	SHA256    string    // hex SHA-256 of the content in use
	LoadedAt  time.Time // when the content in use was loaded
	CheckedAt time.Time // when the file was last looked at
	// Err is why the file as it is now is not in use (it does not parse,
	// or cannot be read): the previous content is. Nil when the content in
	// use is the file's.
	Err error
}

// WatchTokens reads the token file at path and returns a Watcher that
// reloads it when it changes, looking at most once per interval
// (DefaultInterval when 0). An error reading or parsing it now is returned.
func WatchTokens(path string, interval time.Duration) (*Watcher[*Tokens], error) {
	return newWatcher(path, interval, ParseTokens)
}

// WatchRules is WatchTokens for an access file.
func WatchRules(path string, interval time.Duration) (*Watcher[*Rules], error) {
	return newWatcher(path, interval, ParseRules)
}

func newWatcher[T any](path string, interval time.Duration, parse func(string, []byte) (T, error)) (*Watcher[T], error) {
	if interval <= 0 {
		interval = DefaultInterval
	}
	w := &Watcher[T]{path: path, interval: interval, parse: parse}
	w.cur.Store(&snapshot[T]{status: Status{Path: path}})
	w.mu.Lock()
	err := w.checkLocked(time.Now())
	w.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return w, nil
}

// Current returns the content in use, first looking at the file if a check
// is due and no other goroutine is checking it.
func (w *Watcher[T]) Current() T {
	if now := time.Now(); now.UnixNano() >= w.next.Load() && w.mu.TryLock() {
		if now.UnixNano() >= w.next.Load() { // not checked meanwhile
			_ = w.checkLocked(now)
		}
		w.mu.Unlock()
	}
	return w.cur.Load().value
}

// Check looks at the file now, whatever the interval (on SIGHUP, say), and
// returns Status().Err.
func (w *Watcher[T]) Check() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.checkLocked(time.Now())
}

// Status returns the state of the file.
func (w *Watcher[T]) Status() Status { return w.cur.Load().status }

// checkLocked looks at the file and loads it if it changed; it returns the
// error now in Status. Called with w.mu held.
func (w *Watcher[T]) checkLocked(now time.Time) error {
	w.next.Store(now.Add(w.interval).UnixNano())
	old := w.cur.Load()
	keep := func(err error) error {
		st := old.status
		st.CheckedAt, st.Err = now, err
		w.cur.Store(&snapshot[T]{value: old.value, status: st})
		return err
	}
	forget := func(err error) error { // the next good read is parsed afresh
		w.seen, w.sum = nil, ""
		return keep(err)
	}
	fi, err := os.Stat(w.path)
	if err != nil {
		return forget(err)
	}
	if w.seen != nil && os.SameFile(fi, w.seen) && fi.Size() == w.seen.Size() &&
		fi.ModTime().Equal(w.seen.ModTime()) && w.readAt.Sub(fi.ModTime()) >= racyWindow {
		return keep(old.status.Err) // unchanged since a read that was not racy
	}
	readAt := time.Now()
	data, err := readFile(w.path)
	if err != nil {
		return forget(err)
	}
	// What was read may be newer than fi; a later stat then differs and
	// the next check reads again.
	w.seen, w.readAt = fi, readAt
	h := sha256.Sum256(data)
	sum := hex.EncodeToString(h[:])
	if sum == w.sum {
		return keep(old.status.Err) // same content: same outcome as last time
	}
	w.sum = sum
	if sum == old.status.SHA256 {
		return keep(nil) // back to the content in use
	}
	v, err := w.parse(w.path, data)
	if err != nil {
		return keep(err)
	}
	w.cur.Store(&snapshot[T]{value: v, status: Status{Path: w.path, SHA256: sum, LoadedAt: now, CheckedAt: now}})
	return nil
}
