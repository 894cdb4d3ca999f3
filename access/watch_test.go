package access

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

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

// replace writes content to path through a rename, as editors and
// configuration management do.
func replace(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

const (
	rulesA   = "callers:\n  - {caller: ops, roles: [admin]}\n"
	rulesB   = "callers:\n  - {caller: ops, roles: [admin]}\n  - {caller: gw, roles: [client]}\n"
	rulesBad = "callers:\n  - {caller: ops, roles: [admin]}\n  - {caller: gw, roles: [client], policies: []}\n"
)

func has(w *Watcher[*Rules], caller string) bool {
	_, ok := w.Current().Lookup(caller)
	return ok
}

func TestWatchRulesReloads(t *testing.T) {
	path := writeFile(t, t.TempDir(), "access.yaml", rulesA)
	w, err := WatchRules(path, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	first := w.Status()
	if !has(w, "ops") || has(w, "gw") || first.Err != nil || first.Path != path || first.SHA256 != HashToken(rulesA) || first.LoadedAt.IsZero() {
		t.Fatalf("first load: %+v", first)
	}

	replace(t, path, rulesB)
	waitFor(t, "the new caller", func() bool { return has(w, "gw") })
	loadedB := w.Status()
	if loadedB.Err != nil || loadedB.SHA256 != HashToken(rulesB) {
		t.Fatalf("after the change: %+v", loadedB)
	}

	// A bad file keeps the good one in use and says why.
	replace(t, path, rulesBad)
	waitFor(t, "the parse error", func() bool { w.Current(); return w.Status().Err != nil })
	st := w.Status()
	var fe *FileError
	if !errors.As(st.Err, &fe) || fe.Field != "policies" || fe.Index != 1 || !strings.Contains(st.Err.Error(), "policies: empty list") {
		t.Fatalf("Status().Err = %v, want the policies error", st.Err)
	}
	if !has(w, "gw") || st.SHA256 != loadedB.SHA256 || !st.LoadedAt.Equal(loadedB.LoadedAt) {
		t.Fatalf("the bad file half-applied: %+v", st)
	}
	if err := w.Check(); err != st.Err {
		t.Fatalf("Check() = %v, want the same error", err)
	}

	// Back to the content in use: no error, nothing reloaded.
	replace(t, path, rulesB)
	waitFor(t, "the error to clear", func() bool { w.Current(); return w.Status().Err == nil })
	if st := w.Status(); st.SHA256 != loadedB.SHA256 || !st.LoadedAt.Equal(loadedB.LoadedAt) {
		t.Fatalf("the same content was loaded again: %+v", st)
	}

	// A vanished file keeps its content; its return is loaded.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the missing file", func() bool { w.Current(); return errors.Is(w.Status().Err, os.ErrNotExist) })
	if !has(w, "gw") {
		t.Fatal("a missing file dropped the rules")
	}
	writeFile(t, filepath.Dir(path), filepath.Base(path), rulesA) // in place, not renamed
	waitFor(t, "the file's return", func() bool { return !has(w, "gw") })
	if st := w.Status(); st.Err != nil || st.SHA256 != HashToken(rulesA) {
		t.Fatalf("after the file's return: %+v", st)
	}
}

func TestWatchRevertsToBadContent(t *testing.T) {
	// A file that was bad, vanished and came back bad again still reports
	// its parse error, not the stale "not found".
	path := writeFile(t, t.TempDir(), "access.yaml", rulesA)
	w, err := WatchRules(path, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	replace(t, path, rulesBad)
	if err := w.Check(); err == nil {
		t.Fatal("bad file: no error")
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := w.Check(); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("removed: %v", err)
	}
	replace(t, path, rulesBad)
	var fe *FileError
	if err := w.Check(); !errors.As(err, &fe) || fe.Field != "policies" {
		t.Fatalf("bad again: %v", err)
	}
	if !has(w, "ops") || has(w, "gw") {
		t.Fatal("rules changed")
	}
}

func TestWatchChecksAtMostOncePerInterval(t *testing.T) {
	path := writeFile(t, t.TempDir(), "access.yaml", rulesA)
	w, err := WatchRules(path, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	checked := w.Status().CheckedAt
	replace(t, path, rulesB)
	for range 100 {
		if has(w, "gw") {
			t.Fatal("reloaded before the interval passed")
		}
	}
	if !w.Status().CheckedAt.Equal(checked) {
		t.Fatal("looked at the file before the interval passed")
	}
	if err := w.Check(); err != nil || !has(w, "gw") {
		t.Fatalf("Check() = %v; gw loaded: %v", err, has(w, "gw"))
	}
}

func TestWatchStatGate(t *testing.T) {
	path := writeFile(t, t.TempDir(), "access.yaml", rulesA)
	old := time.Now().Add(-time.Hour).Truncate(time.Second)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	w, err := WatchRules(path, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// Same file, size and modification time, read long after that time:
	// not read again.
	same := strings.Replace(rulesA, "ops", "sre", 1)
	if err := os.WriteFile(path, []byte(same), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	if err := w.Check(); err != nil || !has(w, "ops") {
		t.Fatalf("an unchanged stat was read again: %v", err)
	}
	// A new modification time is.
	if err := os.Chtimes(path, old, old.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := w.Check(); err != nil || !has(w, "sre") {
		t.Fatalf("a new modification time was not read: %v", err)
	}
}

func TestWatchRacyWrite(t *testing.T) {
	// A write that keeps size and modification time, right after a read
	// (a coarse file system clock): read again at the next check.
	path := writeFile(t, t.TempDir(), "access.yaml", rulesA)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := WatchRules(path, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(rulesA, "ops", "sre", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if err := w.Check(); err != nil || !has(w, "sre") {
		t.Fatalf("the racy write was missed: %v", err)
	}
}

func TestWatchTokens(t *testing.T) {
	dir := t.TempDir()
	if _, err := WatchTokens(filepath.Join(dir, "absent.yaml"), 0); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("absent file: %v", err)
	}
	var fe *FileError
	if _, err := WatchTokens(writeFile(t, dir, "bad.yaml", "tokens: []\n"), 0); !errors.As(err, &fe) {
		t.Fatalf("bad file: %v", err)
	}
	one, two := NewToken(), NewToken()
	path := writeFile(t, dir, "tokens.yaml", "tokens:\n  - {caller: gw, sha256: "+HashToken(one)+"}\n")
	w, err := WatchTokens(path, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := w.Current().Lookup(one); !ok || c != "gw" {
		t.Fatalf("Lookup = %q, %v", c, ok)
	}
	replace(t, path, "tokens:\n  - {caller: gw, sha256: "+HashToken(two)+"}\n") // rotated
	waitFor(t, "the rotated token", func() bool { _, ok := w.Current().Lookup(two); return ok })
	if _, ok := w.Current().Lookup(one); ok {
		t.Fatal("the old token still works")
	}
}

func TestWatchConcurrentUse(t *testing.T) {
	path := writeFile(t, t.TempDir(), "access.yaml", rulesA)
	w, err := WatchRules(path, time.Microsecond)
	if err != nil {
		t.Fatal(err)
	}
	a := Enforce(w.Current)
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
				r := w.Current()
				if _, ok := r.Lookup("ops"); !ok {
					t.Error("ops missing: a half-applied file")
					return
				}
				_ = a.Authorize(Identity{Caller: "gw", Source: SourceToken}, ActionAdmit, nil)
				_ = w.Status()
			}
		})
	}
	for i := range 50 {
		replace(t, path, []string{rulesA, rulesB, rulesBad}[i%3])
	}
	replace(t, path, rulesB)
	waitFor(t, "the last content", func() bool { return has(w, "gw") && w.Status().Err == nil })
	close(stop)
	wg.Wait()
}
