package filewatch

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// counter parses files by joining their content with "|", refusing content
// holding "bad", and counts its calls.
type counter struct{ calls atomic.Int64 }

func (c *counter) parse(data [][]byte) (string, error) {
	c.calls.Add(1)
	parts := make([]string, len(data))
	for i, d := range data {
		parts[i] = string(d)
	}
	s := strings.Join(parts, "|")
	if strings.Contains(s, "bad") {
		return "", errors.New("bad content: " + s)
	}
	return s, nil
}

// changes is an OnChange hook recording what it is told.
type changes struct {
	mu  sync.Mutex
	got []string // the value, or "err: " and the error
}

func (c *changes) hook(v string, st Status) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st.Err != nil {
		c.got = append(c.got, "err: "+st.Err.Error())
		return
	}
	c.got = append(c.got, v)
}

func (c *changes) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	got := c.got
	c.got = nil
	return got
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// replace writes content to path through a rename, as editors and
// configuration management do.
func replace(t *testing.T, path, content string) {
	t.Helper()
	write(t, path+".tmp", content)
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

// setMtime gives path the modification time mt.
func setMtime(t *testing.T, path string, mt time.Time) {
	t.Helper()
	if err := os.Chtimes(path, mt, mt); err != nil {
		t.Fatal(err)
	}
}

func newWatcher(t *testing.T, c *counter, ch *changes, interval time.Duration, files ...string) *Watcher[string] {
	t.Helper()
	opts := Options[string]{Files: files, Parse: c.parse, Interval: interval}
	if ch != nil {
		opts.OnChange = ch.hook
	}
	w, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// start writes "one" to a file f and watches it.
func start(t *testing.T, interval time.Duration) (string, *counter, *changes, *Watcher[string]) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "f")
	write(t, path, "one")
	c, ch := &counter{}, &changes{}
	return path, c, ch, newWatcher(t, c, ch, interval, path)
}

// waitFor polls cond until it holds, failing the test after 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

func equal(a, b []string) bool { return strings.Join(a, "\n") == strings.Join(b, "\n") }

func TestNew(t *testing.T) {
	dir := t.TempDir()
	var c counter
	if _, err := New(Options[string]{Parse: c.parse}); err == nil {
		t.Error("no file: no error")
	}
	if _, err := New(Options[string]{Files: []string{filepath.Join(dir, "a")}}); err == nil {
		t.Error("no Parse: no error")
	}
	if _, err := New(Options[string]{Files: []string{filepath.Join(dir, "absent")}, Parse: c.parse}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	bad := filepath.Join(dir, "bad")
	write(t, bad, "bad")
	if _, err := New(Options[string]{Files: []string{bad}, Parse: c.parse}); err == nil || !strings.Contains(err.Error(), "bad content") {
		t.Errorf("bad file: %v", err)
	}
	a := filepath.Join(dir, "a")
	write(t, a, "one")
	ch := &changes{}
	w := newWatcher(t, &c, ch, time.Hour, a)
	v, st := w.Snapshot()
	if v != "one" || st.Err != nil || !equal(st.Files, []string{a}) || len(st.SHA256) != 1 ||
		st.SHA256[0] != "7692c3ad3540bb803c020b3aee66cd8887123234ea0c6e7143c0add73ff431ed" || st.LoadedAt.IsZero() {
		t.Errorf("first load: %q %+v", v, st)
	}
	if got := ch.take(); got != nil {
		t.Errorf("OnChange told of the first load: %q", got)
	}
}

func TestChangeSeenOnUse(t *testing.T) {
	path, _, ch, w := start(t, time.Millisecond)
	replace(t, path, "two")
	waitFor(t, "the new content", func() bool { return w.Current() == "two" })
	if got := ch.take(); !equal(got, []string{"two"}) {
		t.Errorf("OnChange heard %q, want the new value", got)
	}
	// Status checks too.
	replace(t, path, "three")
	waitFor(t, "the new content in Status", func() bool { return w.Status().SHA256[0] != "" && w.Current() == "three" })
}

func TestChecksAtMostOncePerInterval(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	write(t, path, "one")
	var c counter
	w := newWatcher(t, &c, nil, time.Hour, path)
	checked := w.Status().CheckedAt
	replace(t, path, "two")
	for range 100 {
		if w.Current() != "one" || !w.Status().CheckedAt.Equal(checked) {
			t.Fatal("looked at the file before the interval passed")
		}
	}
	if err := w.Check(); err != nil || w.Current() != "two" {
		t.Fatalf("Check() = %v; serving %q", err, w.Current())
	}

	// No interval: never on use, only when asked.
	never := newWatcher(t, &c, nil, 0, path)
	replace(t, path, "three")
	for range 100 {
		if never.Current() != "two" {
			t.Fatal("a watcher without an interval checked on use")
		}
	}
	if err := never.Check(); err != nil || never.Current() != "three" {
		t.Fatalf("Check() = %v; serving %q", err, never.Current())
	}

	// Closed: no more checks on use; Check still looks.
	closed := newWatcher(t, &c, nil, time.Nanosecond, path)
	closed.Close()
	replace(t, path, "four")
	for range 100 {
		if closed.Current() != "three" {
			t.Fatal("a closed watcher checked on use")
		}
	}
	if err := closed.Check(); err != nil || closed.Current() != "four" {
		t.Fatalf("Check() = %v; serving %q", err, closed.Current())
	}
}

func TestSameContentNotParsed(t *testing.T) {
	path, c, ch, w := start(t, time.Hour)
	loaded := w.Status().LoadedAt
	for i := range 3 {
		replace(t, path, "one") // a new file, a new modification time
		setMtime(t, path, time.Now().Add(time.Duration(i+1)*time.Second))
		if err := w.Reload(); err != nil {
			t.Fatal(err)
		}
	}
	if n := c.calls.Load(); n != 1 {
		t.Errorf("parsed %d times, want once", n)
	}
	if st := w.Status(); !st.LoadedAt.Equal(loaded) || st.Err != nil {
		t.Errorf("status after the same content: %+v", st)
	}
	if got := ch.take(); got != nil {
		t.Errorf("OnChange heard %q of the same content", got)
	}
}

func TestParseErrorKeepsPrevious(t *testing.T) {
	path, c, ch, w := start(t, time.Hour)
	good := w.Status()

	replace(t, path, "bad one")
	err := w.Check()
	if err == nil || !strings.Contains(err.Error(), "bad content") {
		t.Fatalf("Check() = %v, want the parse error", err)
	}
	st := w.Status()
	if w.Current() != "one" || st.Err != err || st.ErrAt.IsZero() || !equal(st.SHA256, good.SHA256) || !st.LoadedAt.Equal(good.LoadedAt) {
		t.Fatalf("after a bad file: %q %+v", w.Current(), st)
	}
	// The same failure again is the same error, not news.
	if err2 := w.Check(); err2 != err {
		t.Fatalf("Check() again = %v, want the same error", err2)
	}
	// Another failure is news.
	replace(t, path, "bad two")
	if err := w.Check(); err == nil || !strings.Contains(err.Error(), "bad two") {
		t.Fatalf("Check() = %v", err)
	}
	// Fixed: the error clears.
	replace(t, path, "two")
	if err := w.Check(); err != nil || w.Current() != "two" {
		t.Fatalf("Check() = %v serving %q", err, w.Current())
	}
	if st := w.Status(); st.Err != nil || !st.ErrAt.IsZero() {
		t.Fatalf("status after the fix: %+v", st)
	}
	// Bad, then back to the content in use: the error clears, nothing is
	// parsed.
	replace(t, path, "bad three")
	if err := w.Check(); err == nil {
		t.Fatal("no error")
	}
	calls := c.calls.Load()
	replace(t, path, "two")
	if err := w.Check(); err != nil || w.Current() != "two" || c.calls.Load() != calls {
		t.Fatalf("Check() = %v serving %q, %d parses", err, w.Current(), c.calls.Load()-calls)
	}
	want := []string{"err: bad content: bad one", "err: bad content: bad two", "two", "err: bad content: bad three", "two"}
	if got := ch.take(); !equal(got, want) {
		t.Errorf("OnChange heard\n%q\nwant\n%q", got, want)
	}
}

func TestMissingFile(t *testing.T) {
	path, _, ch, w := start(t, time.Hour)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := w.Check(); !errors.Is(err, os.ErrNotExist) || w.Current() != "one" {
		t.Fatalf("Check() = %v serving %q", err, w.Current())
	}
	if err := w.Check(); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Check() again = %v", err)
	}
	write(t, path, "two") // in place, not renamed
	if err := w.Check(); err != nil || w.Current() != "two" {
		t.Fatalf("Check() = %v serving %q", err, w.Current())
	}
	if got := ch.take(); len(got) != 2 || !strings.HasPrefix(got[0], "err: ") || got[1] != "two" {
		t.Errorf("OnChange heard %q", got)
	}
}

func TestStatGateAndRacyWindow(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	write(t, path, "one")
	old := time.Now().Add(-time.Hour).Truncate(time.Second)
	setMtime(t, path, old)
	var c counter
	w := newWatcher(t, &c, nil, time.Hour, path)

	// Same file, size and modification time, read long after that time:
	// Check does not read it again; Reload does.
	write(t, path, "two")
	setMtime(t, path, old)
	if err := w.Check(); err != nil || w.Current() != "one" {
		t.Fatalf("an unchanged stat was read again: %v, %q", err, w.Current())
	}
	if err := w.Reload(); err != nil || w.Current() != "two" {
		t.Fatalf("Reload did not read the file: %v, %q", err, w.Current())
	}
	// A new modification time is read.
	write(t, path, "six")
	setMtime(t, path, old.Add(time.Second))
	if err := w.Check(); err != nil || w.Current() != "six" {
		t.Fatalf("a new modification time was not read: %v, %q", err, w.Current())
	}

	// A rewrite keeping size and modification time, right after a read
	// (a coarse file system clock), is read at the next check.
	racy := filepath.Join(dir, "racy")
	write(t, racy, "one")
	fi, err := os.Stat(racy)
	if err != nil {
		t.Fatal(err)
	}
	r := newWatcher(t, &c, nil, time.Hour, racy)
	write(t, racy, "two")
	setMtime(t, racy, fi.ModTime())
	if err := r.Check(); err != nil || r.Current() != "two" {
		t.Fatalf("the racy write was missed: %v, %q", err, r.Current())
	}

	// A file replaced by another with the same size and time is read.
	write(t, path+".new", "ten")
	setMtime(t, path+".new", old.Add(time.Second))
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
	if err := w.Check(); err != nil || w.Current() != "ten" {
		t.Fatalf("a replaced file was not read: %v, %q", err, w.Current())
	}
}

func TestFailedFilesReadAgain(t *testing.T) {
	// A parse that depends on more than the content (a certificate's
	// validity on the clock) gets another try at every check while it
	// fails, though the file does not change.
	path := filepath.Join(t.TempDir(), "f")
	write(t, path, "one")
	var ready atomic.Bool
	ready.Store(true)
	calls := 0
	w, err := New(Options[string]{Files: []string{path}, Interval: time.Hour, Parse: func(d [][]byte) (string, error) {
		calls++
		if !ready.Load() {
			return "", errors.New("not yet")
		}
		return string(d[0]), nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	ready.Store(false)
	old := time.Now().Add(-time.Hour)
	write(t, path, "two")
	setMtime(t, path, old)
	if err := w.Check(); err == nil {
		t.Fatal("no error")
	}
	if err := w.Check(); err == nil || calls != 3 {
		t.Fatalf("Check() = %v after %d parses, want 3", err, calls)
	}
	ready.Store(true)
	if err := w.Check(); err != nil || w.Current() != "two" {
		t.Fatalf("Check() = %v serving %q", err, w.Current())
	}
}

func TestSeveralFiles(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	write(t, a, "one")
	write(t, b, "two")
	var c counter
	ch := &changes{}
	w := newWatcher(t, &c, ch, time.Hour, a, b, a)
	if v := w.Current(); v != "one|two|one" {
		t.Fatalf("serving %q", v)
	}
	replace(t, b, "bad")
	if err := w.Check(); err == nil || w.Current() != "one|two|one" {
		t.Fatalf("Check() = %v serving %q", err, w.Current())
	}
	replace(t, b, "three")
	if err := w.Check(); err != nil || w.Current() != "one|three|one" {
		t.Fatalf("Check() = %v serving %q", err, w.Current())
	}
	if st := w.Status(); len(st.SHA256) != 3 || st.SHA256[0] != st.SHA256[2] || st.SHA256[0] == st.SHA256[1] {
		t.Errorf("sums %q", st.SHA256)
	}
	if err := os.Remove(a); err != nil {
		t.Fatal(err)
	}
	if err := w.Check(); !errors.Is(err, os.ErrNotExist) || w.Current() != "one|three|one" {
		t.Fatalf("Check() = %v serving %q", err, w.Current())
	}
	if got := ch.take(); len(got) != 3 || got[1] != "one|three|one" {
		t.Errorf("OnChange heard %q", got)
	}
}

func TestConcurrentUse(t *testing.T) {
	path, _, _, w := start(t, time.Microsecond)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				v, st := w.Snapshot()
				if v == "" || len(st.SHA256) != 1 {
					t.Errorf("served %q %+v", v, st)
					return
				}
				_ = w.Status()
			}
		})
	}
	for i := range 50 {
		replace(t, path, []string{"one", "two", "bad"}[i%3])
	}
	replace(t, path, "last")
	waitFor(t, "the last content", func() bool { return w.Current() == "last" && w.Status().Err == nil })
	close(stop)
	wg.Wait()
}
