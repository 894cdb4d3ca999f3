package certs

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// handshakeTimeout bounds every test handshake and exchange.
const handshakeTimeout = 10 * time.Second

// accepted is what the test server saw of one connection: its state after
// the handshake, or the handshake's error, and how many application bytes it
// read.
type accepted struct {
	state tls.ConnectionState
	err   error
}

// serveTLS listens on 127.0.0.1:0 and, for each connection, runs the TLS
// handshake with cfg, reports it on the returned channel and, when it
// succeeded, echoes what it reads. A failed handshake reads no application
// byte: the connection is closed.
func serveTLS(t *testing.T, cfg *tls.Config) (string, <-chan accepted) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan accepted, 16)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer conn.Close()
				tc := tls.Server(conn, cfg)
				_ = tc.SetDeadline(time.Now().Add(handshakeTimeout))
				if err := tc.Handshake(); err != nil {
					got <- accepted{err: err}
					return
				}
				got <- accepted{state: tc.ConnectionState()}
				_ = tc.SetDeadline(time.Time{})
				_, _ = io.Copy(tc, tc)
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	return ln.Addr().String(), got
}

// dialTLS connects to addr and runs the client handshake with cfg.
func dialTLS(t *testing.T, addr string, cfg *tls.Config) (*tls.Conn, error) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, handshakeTimeout)
	if err != nil {
		t.Fatal(err)
	}
	tc := tls.Client(conn, cfg)
	t.Cleanup(func() { tc.Close() })
	_ = tc.SetDeadline(time.Now().Add(handshakeTimeout))
	if err := tc.Handshake(); err != nil {
		return nil, err
	}
	return tc, nil
}

// exchange writes a message and reads the server's echo of it. With TLS 1.3
// a client's handshake completes before the server has checked the client's
// certificate, so a refusal surfaces here, as the server's alert.
func exchange(tc *tls.Conn) error {
	_ = tc.SetDeadline(time.Now().Add(handshakeTimeout))
	msg := []byte("admit?\n")
	if _, err := tc.Write(msg); err != nil {
		return err
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(tc, buf); err != nil {
		return err
	}
	if !bytes.Equal(buf, msg) {
		return errors.New("echo differs")
	}
	return nil
}

// next is the server's report of the next connection.
func next(t *testing.T, got <-chan accepted) accepted {
	t.Helper()
	select {
	case a := <-got:
		return a
	case <-time.After(handshakeTimeout):
		t.Fatal("server saw no connection")
		return accepted{}
	}
}

// newDevCA makes a development CA with nodeIDs in a fresh directory.
func newDevCA(t *testing.T, nodeIDs ...string) *DevCA {
	t.Helper()
	ca, err := NewDevCA(t.TempDir(), nodeIDs, nil)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// newSource opens a Source closed at the test's end.
func newSource(t *testing.T, opts Options) *Source {
	t.Helper()
	s, err := NewSource(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// nodeSource is a Source of node id's certificate from ca, checking it
// against ca's bundle and checking files only on Reload.
func nodeSource(t *testing.T, ca *DevCA, id string) *Source {
	t.Helper()
	kp := ca.Nodes[id]
	return newSource(t, Options{CertFile: kp.CertFile, KeyFile: kp.KeyFile, CAFile: ca.CAFile, CheckOwnChain: true, Interval: -1})
}

// allow is an AllowNode hook that knows ids.
func allow(ids ...string) func(string) bool {
	return func(id string) bool {
		for _, k := range ids {
			if k == id {
				return true
			}
		}
		return false
	}
}

// peerSerial is the serial of the certificate the other end presented.
func peerSerial(t *testing.T, st tls.ConnectionState) *big.Int {
	t.Helper()
	if len(st.PeerCertificates) == 0 {
		t.Fatal("no peer certificate")
	}
	return st.PeerCertificates[0].SerialNumber
}

// copyFile copies src to dst (a plain write, as an operator's cp does).
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// bundle writes the concatenation of CA files to a file in dir.
func bundle(t *testing.T, dir string, cas ...string) string {
	t.Helper()
	var all []byte
	for _, c := range cas {
		b, err := os.ReadFile(c)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, b...)
	}
	name := filepath.Join(dir, "bundle.pem")
	if err := WriteFileAtomic(name, all, 0o644); err != nil {
		t.Fatal(err)
	}
	return name
}
