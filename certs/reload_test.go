package certs

import (
	"crypto/x509"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// liveFiles copies node id's certificate, its key and ca's bundle into a
// fresh directory, for a test to rewrite under a Source.
func liveFiles(t *testing.T, ca *DevCA, id string) Options {
	t.Helper()
	dir := t.TempDir()
	o := Options{
		CertFile: filepath.Join(dir, "node.pem"),
		KeyFile:  filepath.Join(dir, "node-key.pem"),
		CAFile:   filepath.Join(dir, "ca.pem"),
	}
	copyFile(t, ca.Nodes[id].CertFile, o.CertFile)
	copyFile(t, ca.Nodes[id].KeyFile, o.KeyFile)
	copyFile(t, ca.CAFile, o.CAFile)
	return o
}

// notifications is an OnReload hook feeding a channel; it never blocks the
// Source.
func notifications() (func(Status), <-chan Status) {
	ch := make(chan Status, 256)
	return func(st Status) {
		select {
		case ch <- st:
		default:
		}
	}, ch
}

// awaitStatus waits for a reload report ok accepts. Checks are made on
// use: it asks src for its Status (which checks the files when a check is
// due) until the report comes.
func awaitStatus(t *testing.T, src *Source, ch <-chan Status, ok func(Status) bool) Status {
	t.Helper()
	deadline := time.After(handshakeTimeout)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case st := <-ch:
			if ok(st) {
				return st
			}
		case <-tick.C:
			src.Status()
		case <-deadline:
			t.Fatal("no such reload before the deadline")
		}
	}
}

func TestRotationServesNewCertificate(t *testing.T) {
	ca := newDevCA(t, "n1", "n2")
	opts := liveFiles(t, ca, "n1")
	opts.CheckOwnChain, opts.Interval = true, 10*time.Millisecond
	var reloads <-chan Status
	opts.OnReload, reloads = notifications()
	server := newSource(t, opts)
	oldSerial := server.Status().Serial
	sc, cc := peerConfigs(t, server, nodeSource(t, ca, "n2"), nil, nil)
	addr, got := serveTLS(t, sc)

	old, err := dialTLS(t, addr, cc)
	if err != nil {
		t.Fatal(err)
	}
	if err := exchange(old); err != nil {
		t.Fatal(err)
	}
	next(t, got)

	// Rotate as an operator's tool does: a new pair, each file replaced by
	// a rename, key first.
	kp, err := IssueDevCert(ca.Dir, CertRequest{Name: "n1-next", NodeID: "n1", Hosts: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range [][2]string{{kp.KeyFile, opts.KeyFile}, {kp.CertFile, opts.CertFile}} {
		if err := WriteFileAtomic(f[1], mustRead(t, f[0]), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	// Poll: after each reload report or tick, a new handshake (which checks
	// the files when a check is due); until one presents the new serial.
	deadline := time.After(handshakeTimeout)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		tc, err := dialTLS(t, addr, cc)
		if err != nil {
			t.Fatalf("handshake during rotation: %v", err)
		}
		next(t, got)
		serial := peerSerial(t, tc.ConnectionState())
		if serial.Cmp(kp.Serial) == 0 {
			break
		}
		if serial.Text(16) != oldSerial {
			t.Fatalf("handshake presented serial %x, neither old nor new", serial)
		}
		select {
		case <-reloads:
		case <-tick.C:
		case <-deadline:
			t.Fatal("the new certificate was not served before the deadline")
		}
	}
	if st := server.Status(); st.Serial != kp.Serial.Text(16) || st.Err != nil {
		t.Errorf("status %+v, want serial %x and no error", st, kp.Serial)
	}
	// The connection made before the rotation goes on, with its old
	// certificate.
	if err := exchange(old); err != nil {
		t.Fatalf("old connection after rotation: %v", err)
	}
	if got := peerSerial(t, old.ConnectionState()).Text(16); got != oldSerial {
		t.Errorf("old connection's serial %s, want %s", got, oldSerial)
	}
}

func TestReloadKeepsGoodMaterial(t *testing.T) {
	ca := newDevCA(t, "n1")
	other := newDevCA(t, "n1")
	issue := func(t *testing.T, req CertRequest) KeyPair {
		t.Helper()
		req.Name, req.NodeID = "n1-next", "n1"
		kp, err := IssueDevCert(ca.Dir, req)
		if err != nil {
			t.Fatal(err)
		}
		return kp
	}
	read := func(t *testing.T, name string) []byte {
		t.Helper()
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	write := func(t *testing.T, name string, b []byte) {
		t.Helper()
		if err := os.WriteFile(name, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	half := func(b []byte) []byte { return b[:len(b)/2] }

	for _, tc := range []struct {
		name  string
		spoil func(t *testing.T, o Options)
		want  func(error) bool
	}{
		{"half-written certificate", func(t *testing.T, o Options) {
			kp := issue(t, CertRequest{})
			write(t, o.KeyFile, read(t, kp.KeyFile))
			write(t, o.CertFile, half(read(t, kp.CertFile)))
		}, is(ErrTruncated)},
		{"half-written key", func(t *testing.T, o Options) {
			kp := issue(t, CertRequest{})
			write(t, o.CertFile, read(t, kp.CertFile))
			write(t, o.KeyFile, half(read(t, kp.KeyFile)))
		}, is(ErrTruncated)},
		{"key of the previous certificate", func(t *testing.T, o Options) {
			write(t, o.CertFile, read(t, issue(t, CertRequest{}).CertFile))
		}, says("private key does not match")},
		{"empty CA bundle", func(t *testing.T, o Options) { write(t, o.CAFile, nil) }, is(ErrEmptyCA)},
		{"half-written CA bundle", func(t *testing.T, o Options) {
			write(t, o.CAFile, half(read(t, o.CAFile)))
		}, is(ErrTruncated)},
		{"expired certificate", func(t *testing.T, o Options) {
			kp := issue(t, CertRequest{NotBefore: time.Now().Add(-48 * time.Hour), Validity: time.Hour})
			write(t, o.KeyFile, read(t, kp.KeyFile))
			write(t, o.CertFile, read(t, kp.CertFile))
		}, is(ErrExpired)},
		{"certificate not yet valid", func(t *testing.T, o Options) {
			kp := issue(t, CertRequest{NotBefore: time.Now().Add(time.Hour)})
			write(t, o.KeyFile, read(t, kp.KeyFile))
			write(t, o.CertFile, read(t, kp.CertFile))
		}, is(ErrNotYetValid)},
		{"another CA's certificate", func(t *testing.T, o Options) {
			write(t, o.KeyFile, read(t, other.Nodes["n1"].KeyFile))
			write(t, o.CertFile, read(t, other.Nodes["n1"].CertFile))
		}, func(err error) bool { var u x509.UnknownAuthorityError; return errors.As(err, &u) }},
		{"key file removed", func(t *testing.T, o Options) {
			if err := os.Remove(o.KeyFile); err != nil {
				t.Fatal(err)
			}
		}, is(fs.ErrNotExist)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := liveFiles(t, ca, "n1")
			opts.CheckOwnChain, opts.Interval = true, -1
			good := [3][]byte{read(t, opts.CertFile), read(t, opts.KeyFile), read(t, opts.CAFile)}
			server := newSource(t, opts)
			before := server.Status()
			sc, cc := peerConfigs(t, server, nodeSource(t, ca, "n1"), nil, nil)
			addr, got := serveTLS(t, sc)

			tc.spoil(t, opts)
			err := server.Reload()
			if err == nil || !tc.want(err) {
				t.Fatalf("Reload: %v", err)
			}
			st := server.Status()
			if st.Err == nil || st.Err.Error() != err.Error() || st.ErrAt.IsZero() || server.Err() == nil {
				t.Errorf("status error %v at %v, want %v", st.Err, st.ErrAt, err)
			}
			if st.Serial != before.Serial || !st.LoadedAt.Equal(before.LoadedAt) {
				t.Errorf("status serves %s loaded at %v, want the previous %s", st.Serial, st.LoadedAt, before.Serial)
			}
			conn, err := dialTLS(t, addr, cc)
			if err != nil {
				t.Fatalf("handshake after a failed reload: %v", err)
			}
			if a := next(t, got); a.err != nil {
				t.Fatalf("server handshake after a failed reload: %v", a.err)
			}
			if s := peerSerial(t, conn.ConnectionState()).Text(16); s != before.Serial {
				t.Errorf("served serial %s, want the previous %s", s, before.Serial)
			}

			// The good files back: the error clears.
			for i, name := range []string{opts.CertFile, opts.KeyFile, opts.CAFile} {
				write(t, name, good[i])
			}
			if err := server.Reload(); err != nil || server.Err() != nil {
				t.Fatalf("Reload of the good files: %v (status %v)", err, server.Err())
			}
		})
	}
}

func is(target error) func(error) bool { return func(err error) bool { return errors.Is(err, target) } }

func says(s string) func(error) bool {
	return func(err error) bool { return strings.Contains(err.Error(), s) }
}

// TestReloadFailureReported rewrites the files under a Source checking
// them on use: a key that is not the certificate's is reported and the old
// material kept, and the matching key, when it arrives, is loaded.
func TestReloadFailureReported(t *testing.T) {
	ca := newDevCA(t, "n1")
	opts := liveFiles(t, ca, "n1")
	opts.Interval = 10 * time.Millisecond
	var reloads <-chan Status
	opts.OnReload, reloads = notifications()
	server := newSource(t, opts)
	oldSerial := server.Status().Serial

	kp, err := IssueDevCert(ca.Dir, CertRequest{Name: "n1-next", NodeID: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	copyFile(t, kp.CertFile, opts.CertFile)
	st := awaitStatus(t, server, reloads, func(st Status) bool { return st.Err != nil })
	if st.Serial != oldSerial || !strings.Contains(st.Err.Error(), "private key does not match") {
		t.Fatalf("status %+v, want the old serial %s and a key mismatch", st, oldSerial)
	}
	if s := server.Status().Serial; s != oldSerial {
		t.Fatalf("serving %s after a failed reload, want %s", s, oldSerial)
	}
	copyFile(t, kp.KeyFile, opts.KeyFile)
	st = awaitStatus(t, server, reloads, func(st Status) bool { return st.Err == nil })
	if st.Serial != kp.Serial.Text(16) {
		t.Fatalf("serving %s once the key arrived, want %x", st.Serial, kp.Serial)
	}
}

func TestCARotation(t *testing.T) {
	ca1 := newDevCA(t, "n1", "n2")
	ca2 := newDevCA(t, "n2")
	server := newSource(t, Options{
		CertFile: ca1.Nodes["n1"].CertFile, KeyFile: ca1.Nodes["n1"].KeyFile,
		CAFile: bundle(t, t.TempDir(), ca1.CAFile), CheckOwnChain: true, Interval: -1,
	})
	sc, err := server.PeerServerConfig(PeerOptions{AllowNode: allow("n1", "n2")})
	if err != nil {
		t.Fatal(err)
	}
	addr, got := serveTLS(t, sc)
	// n2 has moved to the new CA and trusts both.
	moved := newSource(t, Options{
		CertFile: ca2.Nodes["n2"].CertFile, KeyFile: ca2.Nodes["n2"].KeyFile,
		CAFile: bundle(t, t.TempDir(), ca1.CAFile, ca2.CAFile), Interval: -1,
	})
	stayed := nodeSource(t, ca1, "n2")
	handshake := func(client *Source) error {
		cc, err := client.PeerClientConfig(PeerOptions{})
		if err != nil {
			t.Fatal(err)
		}
		conn, err := dialTLS(t, addr, cc)
		if err == nil {
			err = exchange(conn)
		}
		if a := next(t, got); err == nil {
			err = a.err
		}
		return err
	}
	if err := handshake(moved); err == nil {
		t.Fatal("a certificate of a CA the server does not trust yet was accepted")
	}

	if err := WriteFileAtomic(server.opts.CAFile, mustRead(t, bundle(t, t.TempDir(), ca1.CAFile, ca2.CAFile)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := server.Reload(); err != nil {
		t.Fatal(err)
	}
	if n := server.Status().CACount; n != 2 {
		t.Fatalf("CACount %d, want 2", n)
	}
	if err := handshake(moved); err != nil {
		t.Errorf("new CA's node after the bundle rotation: %v", err)
	}
	if err := handshake(stayed); err != nil {
		t.Errorf("old CA's node after the bundle rotation: %v", err)
	}
}

func mustRead(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSourceOneFileAndStatus(t *testing.T) {
	ca := newDevCA(t, "n1")
	kp := ca.Nodes["n1"]
	both := filepath.Join(t.TempDir(), "node-and-key.pem")
	if err := os.WriteFile(both, append(mustRead(t, kp.CertFile), mustRead(t, kp.KeyFile)...), 0o600); err != nil {
		t.Fatal(err)
	}
	s := newSource(t, Options{CertFile: both, KeyFile: both, CAFile: ca.CAFile, CheckOwnChain: true})
	st := s.Status()
	if st.Serial != kp.Serial.Text(16) || st.NotAfter.Unix() != kp.NotAfter.Unix() || st.CACount != 1 ||
		st.CANotAfter.IsZero() || st.Err != nil || !strings.Contains(st.Subject, "node-n1") {
		t.Errorf("status %+v", st)
	}
	if id, err := NodeID(s.Leaf()); err != nil || id != "n1" {
		t.Errorf("Leaf names node %q (%v), want n1", id, err)
	}
	if caOnly := newSource(t, Options{CAFile: ca.CAFile, Interval: -1}); caOnly.Leaf() != nil || caOnly.Status().Serial != "" {
		t.Error("a Source without a certificate reports one")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if id, err := NodeID(s.Leaf()); err != nil || id != "n1" {
		t.Errorf("Leaf names node %q (%v), want n1", id, err)
	}
	if caOnly := newSource(t, Options{CAFile: ca.CAFile, Interval: -1}); caOnly.Leaf() != nil || caOnly.Status().Serial != "" {
		t.Error("a Source without a certificate reports one")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}
