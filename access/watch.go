package access

import (
	"time"

	"github.com/quorate/quorate/filewatch"
)

// DefaultInterval is how often a Watcher looks at its file when not told.
const DefaultInterval = time.Second

// Watcher holds the parsed content of a token or access file and reloads it
// when the file changes (package filewatch): Current looks at the file at
// most once per interval, only new content is parsed, and a file that
// fails to parse, or cannot be read, keeps the previous content in use and
// reports the error in Status until the file is good again. Watcher starts
// no goroutine; it is safe for concurrent use.
type Watcher[T any] struct {
	fw *filewatch.Watcher[T]
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
	fw, err := filewatch.New(filewatch.Options[T]{
		Files:    []string{path},
		Parse:    func(data [][]byte) (T, error) { return parse(path, data[0]) },
		Interval: interval,
		Read:     readFile,
	})
	if err != nil {
		return nil, err
	}
	return &Watcher[T]{fw: fw}, nil
}

// Current returns the content in use, first looking at the file if a check
// is due and no other goroutine is checking it.
func (w *Watcher[T]) Current() T { return w.fw.Current() }

// Check looks at the file now, whatever the interval (on SIGHUP, say), and
// returns Status().Err.
func (w *Watcher[T]) Check() error { return w.fw.Check() }

// Status returns the state of the file, first looking at it if a check is
// due.
func (w *Watcher[T]) Status() Status {
	st := w.fw.Status()
	out := Status{Path: st.Files[0], LoadedAt: st.LoadedAt, CheckedAt: st.CheckedAt, Err: st.Err}
	if len(st.SHA256) > 0 {
		out.SHA256 = st.SHA256[0]
	}
	return out
}
