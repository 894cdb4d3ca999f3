package filewatch

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// racyWindow: a file read less than this after its modification time may
// change again without its size or modification time changing (coarse file
// system timestamps), so it is read again at the next check.
const racyWindow = 2 * time.Second

// Options configures a Watcher.
type Options[T any] struct {
	// Files are the files watched, one or more. A name may be given twice
	// (a certificate and its key in one file).
	Files []string
	// Parse makes the value from the files' content, data[i] being
	// Files[i]'s. An error keeps the previous value in use.
	Parse func(data [][]byte) (T, error)
	// Interval paces the checks made on use (Current, Status, Snapshot):
	// at most one per interval. Zero or negative: none; the files are
	// looked at again only by Check and Reload.
	Interval time.Duration
	// Read reads one file; nil means os.ReadFile. (Its errors are reported
	// as they are.)
	Read func(name string) ([]byte, error)
	// OnChange, when set, is called after a check that loaded a new value,
	// after one that found the files back to the value in use following a
	// failure (Status.Err nil), and after a failed one whose error differs
	// from the previous failure's (or follows none). It is given the value
	// in use and the Status that check left. It runs on the goroutine that
	// made the check, never under the Watcher's locks. The first load (New)
	// does not call it.
	OnChange func(value T, st Status)
}

// Status describes a Watcher's files and its last check. Its slices are
// shared: read them, do not modify them.
type Status struct {
	Files []string
	// SHA256 is the hex SHA-256 of each file's content in use, in the order
	// of Files.
	SHA256 []string
	// LoadedAt is when the value in use was loaded; CheckedAt when the
	// files were last looked at.
	LoadedAt, CheckedAt time.Time
	// Err is why the files as they are now are not in use (one is missing
	// or unreadable, or their content does not parse): the previous value
	// is. Nil when the value in use is the files'. A check failing as the
	// previous one did keeps the previous error value. ErrAt is when the
	// last check that failed ran.
	Err   error
	ErrAt time.Time
}

// Watcher holds the value parsed from its files and reloads it when they
// change (see the package documentation). It starts no goroutine and is
// safe for concurrent use.
type Watcher[T any] struct {
	opts Options[T]

	cur    atomic.Pointer[snapshot[T]]
	next   atomic.Int64 // Unix nanoseconds of the next check due on use
	closed atomic.Bool

	mu     sync.Mutex    // one check at a time; guards what follows
	seen   []os.FileInfo // the files as last read; nil before a read
	readAt time.Time     // when they were
}

// snapshot is what a Watcher serves, swapped whole.
type snapshot[T any] struct {
	value  T
	status Status
}

// New loads the files and returns a Watcher serving what they hold. They
// must load (there is no previous value to fall back on): their error is
// returned.
func New[T any](opts Options[T]) (*Watcher[T], error) {
	if len(opts.Files) == 0 {
		return nil, errors.New("filewatch: no file to watch")
	}
	if opts.Parse == nil {
		return nil, errors.New("filewatch: no Parse function")
	}
	if opts.Read == nil {
		opts.Read = os.ReadFile
	}
	opts.Files = slices.Clone(opts.Files)
	w := &Watcher[T]{opts: opts}
	w.cur.Store(&snapshot[T]{status: Status{Files: opts.Files}})
	w.mu.Lock()
	s, _ := w.checkLocked(false)
	w.mu.Unlock()
	if s.status.Err != nil {
		return nil, s.status.Err
	}
	return w, nil
}

// Current returns the value in use, first checking the files if a check is
// due and no other goroutine is checking them.
func (w *Watcher[T]) Current() T { return w.load().value }

// Status returns the state of the files, first checking them if a check is
// due, so that it is fresh.
func (w *Watcher[T]) Status() Status { return w.load().status }

// Snapshot returns the value in use and its Status together, as Current and
// Status would.
func (w *Watcher[T]) Snapshot() (T, Status) {
	s := w.load()
	return s.value, s.status
}

// Check looks at the files now, whatever the interval, and returns
// Status().Err. Files whose stat says they are unchanged since a read are
// not read again (unless the last check failed).
func (w *Watcher[T]) Check() error { return w.check(false) }

// Reload reads the files now, whatever the interval and whether or not
// their stat says they changed, and returns Status().Err.
func (w *Watcher[T]) Reload() error { return w.check(true) }

// Close ends the checks made on use: Current and Status serve the last
// value from then on. Check and Reload still look at the files.
func (w *Watcher[T]) Close() { w.closed.Store(true) }

// due reports whether a check on use is due at now.
func (w *Watcher[T]) due(now time.Time) bool {
	return w.opts.Interval > 0 && !w.closed.Load() && now.UnixNano() >= w.next.Load()
}

// load checks the files when a check is due and no other goroutine is
// checking them, and returns what is in use.
func (w *Watcher[T]) load() *snapshot[T] {
	if now := time.Now(); w.due(now) && w.mu.TryLock() {
		var s *snapshot[T]
		news := false
		if w.due(now) { // not checked meanwhile
			s, news = w.checkLocked(false)
		}
		w.mu.Unlock()
		if news {
			w.notify(s)
		}
	}
	return w.cur.Load()
}

func (w *Watcher[T]) check(force bool) error {
	w.mu.Lock()
	s, news := w.checkLocked(force)
	w.mu.Unlock()
	if news {
		w.notify(s)
	}
	return s.status.Err
}

func (w *Watcher[T]) notify(s *snapshot[T]) {
	if w.opts.OnChange != nil {
		w.opts.OnChange(s.value, s.status)
	}
}

// checkLocked looks at the files and loads them if they changed (or if
// forced, or while the last check failed). It returns what it left in use
// and whether OnChange is to hear of it. Called with w.mu held.
func (w *Watcher[T]) checkLocked(force bool) (*snapshot[T], bool) {
	now := time.Now()
	w.next.Store(now.Add(w.opts.Interval).UnixNano())
	old := w.cur.Load()
	keep := func(err error) *snapshot[T] {
		st := old.status
		st.CheckedAt, st.Err, st.ErrAt = now, err, time.Time{}
		if err != nil {
			st.ErrAt = now
		}
		s := &snapshot[T]{value: old.value, status: st}
		w.cur.Store(s)
		return s
	}
	fail := func(err error) (*snapshot[T], bool) {
		if old.status.Err != nil && old.status.Err.Error() == err.Error() {
			return keep(old.status.Err), false // the same failure: not news
		}
		return keep(err), true
	}

	infos := make([]os.FileInfo, len(w.opts.Files))
	unchanged := !force && old.status.Err == nil && w.seen != nil
	for i, name := range w.opts.Files {
		fi, err := os.Stat(name)
		if err != nil {
			return fail(err)
		}
		infos[i] = fi
		if unchanged {
			s := w.seen[i]
			unchanged = os.SameFile(fi, s) && fi.Size() == s.Size() &&
				fi.ModTime().Equal(s.ModTime()) && w.readAt.Sub(fi.ModTime()) >= racyWindow
		}
	}
	if unchanged { // since a read that was not racy
		return keep(nil), false
	}

	readAt := time.Now()
	data := make([][]byte, len(w.opts.Files))
	sums := make([]string, len(w.opts.Files))
	for i, name := range w.opts.Files {
		b, err := w.opts.Read(name)
		if err != nil {
			return fail(err)
		}
		h := sha256.Sum256(b)
		data[i], sums[i] = b, hex.EncodeToString(h[:])
	}
	// What was read may be newer than infos; a later stat then differs and
	// the next check reads again.
	w.seen, w.readAt = infos, readAt
	if slices.Equal(sums, old.status.SHA256) { // the content in use (again)
		return keep(nil), old.status.Err != nil
	}
	v, err := w.opts.Parse(data)
	if err != nil {
		return fail(err)
	}
	s := &snapshot[T]{value: v, status: Status{Files: w.opts.Files, SHA256: sums, LoadedAt: now, CheckedAt: now}}
	w.cur.Store(s)
	return s, true
}
