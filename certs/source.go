package certs

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"time"

	"github.com/quorate/quorate/filewatch"
)

// DefaultInterval is how often, at most, a Source checks its files when
// Options.Interval is 0.
const DefaultInterval = 5 * time.Second

// Errors a load or reload wraps.
var (
	ErrExpired     = errors.New("certificate has expired")
	ErrNotYetValid = errors.New("certificate is not yet valid")
	ErrEmptyCA     = errors.New("CA bundle holds no certificate")
	ErrTruncated   = errors.New("PEM block not terminated (file half-written?)")
)

// Options configures a Source. CertFile and KeyFile are given together or not
// at all; at least one of them or CAFile is given.
type Options struct {
	// CertFile is the PEM certificate, leaf first, then any intermediates.
	CertFile string
	// KeyFile is the PEM private key of CertFile's leaf. It may be CertFile
	// itself (one file holding both), which makes a rotation by rename
	// atomic on disk too.
	KeyFile string
	// CAFile is the PEM bundle of CA certificates that peers' and callers'
	// certificates are verified against. During a CA rotation it holds the
	// old and the new CA.
	CAFile string

	// Interval paces the checks for changes, made on use (a handshake,
	// Leaf, Status, Err): at most one per interval, stat first (identity,
	// size and modification time), then a hash of the content. 0 means
	// DefaultInterval; a negative interval makes none: the files are read
	// again only when Reload is called.
	Interval time.Duration

	// CheckOwnChain refuses a certificate that does not chain to CAFile's
	// bundle. Set it for the peer port, whose certificate other nodes
	// verify against the same CA; leave it unset for an API certificate
	// from another CA than the one that signs callers' certificates.
	CheckOwnChain bool

	// CheckLeaf, when set, must accept the leaf certificate of every load,
	// the first and each reload: a reload whose certificate it refuses
	// fails, and the previous material stays served (a node checks that a
	// rotated certificate still names it).
	CheckLeaf func(*x509.Certificate) error

	// OnReload, when set, is called after a reload that loaded new material
	// or found the files back to what is served after a failure (Status.Err
	// nil), and after a failed one whose error differs from the previous
	// failure's. It runs on the goroutine whose use made the check (a
	// handshake, Status, Err, Reload), never under the Source's locks.
	OnReload func(Status)

	// Now is the clock validity is checked against; nil means time.Now.
	Now func() time.Time
}

// Status is what a Source serves and how its last reload went.
type Status struct {
	// Serial (hex), Subject, NotBefore and NotAfter are the served leaf
	// certificate's; empty without CertFile.
	Serial              string
	Subject             string
	NotBefore, NotAfter time.Time
	// CACount is the number of certificates in the served CA bundle, and
	// CANotAfter the earliest of their expiries.
	CACount    int
	CANotAfter time.Time
	// LoadedAt is when the served material was loaded.
	LoadedAt time.Time
	// Err is why the files on disk are not what is served (the last check
	// failed), nil when they are; ErrAt is when that check ran.
	Err   error
	ErrAt time.Time
}

// material is one consistent set of what a Source serves: the key pair and
// the CA pool are always swapped together.
type material struct {
	cert     *tls.Certificate // nil without CertFile
	pool     *x509.CertPool   // nil without CAFile
	cas      []*x509.Certificate
	loadedAt time.Time
}

// Source loads a certificate, its key and a CA bundle from PEM files and
// reloads them when the files change (package filewatch), keeping the
// previous good material when the new files do not load. Its Config
// builders hand out tls.Configs that read the current material at every
// handshake; a handshake, Leaf, Status or Err checks the files first when a
// check is due. It starts no goroutine.
type Source struct {
	opts Options
	w    *filewatch.Watcher[*material]
}

// NewSource loads the files, which must load: there is no previous material
// to fall back on. Unless opts.Interval is negative, they are checked again
// on use, at most once per interval, until Close.
func NewSource(opts Options) (*Source, error) {
	if (opts.CertFile == "") != (opts.KeyFile == "") {
		return nil, errors.New("certs: CertFile and KeyFile are given together")
	}
	if opts.CertFile == "" && opts.CAFile == "" {
		return nil, errors.New("certs: no file to load")
	}
	if opts.Interval == 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s := &Source{opts: opts}
	var files []string
	for _, name := range s.files() {
		if name != "" {
			files = append(files, name)
		}
	}
	fo := filewatch.Options[*material]{Files: files, Parse: s.parseFiles, Interval: opts.Interval}
	if opts.OnReload != nil {
		fo.OnChange = func(m *material, st filewatch.Status) { opts.OnReload(statusOf(m, st)) }
	}
	w, err := filewatch.New(fo)
	if err != nil {
		return nil, err
	}
	s.w = w
	return s, nil
}

// Close ends the file checks. The tls.Configs handed out keep serving the
// last loaded material.
func (s *Source) Close() error {
	s.w.Close()
	return nil
}

// current is the material served, checked first when a check is due.
func (s *Source) current() *material { return s.w.Current() }

// Reload reads the files now, whether or not they look changed (for a SIGHUP
// or a status page's button), and returns why they did not load, nil when
// what they hold is served.
func (s *Source) Reload() error { return s.w.Reload() }

// Status reports the served material and the last check's failure,
// checking the files first when a check is due.
func (s *Source) Status() Status { return statusOf(s.w.Snapshot()) }

func statusOf(m *material, fs filewatch.Status) Status {
	st := Status{LoadedAt: m.loadedAt, CACount: len(m.cas), Err: fs.Err, ErrAt: fs.ErrAt}
	if m.cert != nil {
		leaf := m.cert.Leaf
		st.Serial = leaf.SerialNumber.Text(16)
		st.Subject = leaf.Subject.String()
		st.NotBefore, st.NotAfter = leaf.NotBefore, leaf.NotAfter
	}
	for _, ca := range m.cas {
		if st.CANotAfter.IsZero() || ca.NotAfter.Before(st.CANotAfter) {
			st.CANotAfter = ca.NotAfter
		}
	}
	return st
}

// Leaf is the served certificate (nil without CertFile), for the node to
// check at start that it names the node's own ID (NodeID).
func (s *Source) Leaf() *x509.Certificate {
	if c := s.current().cert; c != nil {
		return c.Leaf
	}
	return nil
}

// Err is the last check's failure, nil when the files on disk are served;
// the files are checked first when a check is due.
func (s *Source) Err() error { return s.w.Status().Err }

func (s *Source) files() [3]string {
	return [3]string{s.opts.CertFile, s.opts.KeyFile, s.opts.CAFile}
}

// parseFiles is parse for the Watcher, whose data holds only the files
// given, in the order of files().
func (s *Source) parseFiles(data [][]byte) (*material, error) {
	var raw [3][]byte
	for i, name := range s.files() {
		if name != "" {
			raw[i], data = data[0], data[1:]
		}
	}
	return s.parse(raw)
}

// parse turns the files' bytes into material, refusing a truncated PEM file,
// a key that is not the certificate's, a certificate outside its validity
// window, an empty CA bundle and (with CheckOwnChain) a certificate the
// bundle does not sign.
func (s *Source) parse(raw [3][]byte) (*material, error) {
	now := s.opts.Now()
	m := &material{loadedAt: now}
	if s.opts.CertFile != "" {
		files := s.files()
		for i, name := range files[:2] {
			if err := checkComplete(raw[i]); err != nil {
				return nil, fmt.Errorf("certs: %s: %w", name, err)
			}
		}
		pair, err := tls.X509KeyPair(raw[0], raw[1])
		if err != nil {
			return nil, fmt.Errorf("certs: %s and %s: %w", s.opts.CertFile, s.opts.KeyFile, err)
		}
		if pair.Leaf == nil {
			if pair.Leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
				return nil, fmt.Errorf("certs: %s: %w", s.opts.CertFile, err)
			}
		}
		if err := checkValidity(pair.Leaf, now); err != nil {
			return nil, fmt.Errorf("certs: %s: %w", s.opts.CertFile, err)
		}
		if s.opts.CheckLeaf != nil {
			if err := s.opts.CheckLeaf(pair.Leaf); err != nil {
				return nil, fmt.Errorf("certs: %s: %w", s.opts.CertFile, err)
			}
		}
		m.cert = &pair
	}
	if s.opts.CAFile != "" {
		cas, err := parseBundle(raw[2])
		if err != nil {
			return nil, fmt.Errorf("certs: %s: %w", s.opts.CAFile, err)
		}
		m.cas, m.pool = cas, x509.NewCertPool()
		for _, ca := range cas {
			m.pool.AddCert(ca)
		}
	}
	if s.opts.CheckOwnChain && m.cert != nil && m.pool != nil {
		opts := x509.VerifyOptions{
			Roots:         m.pool,
			Intermediates: intermediates(m.cert.Certificate[1:]),
			CurrentTime:   now,
			KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
		}
		if _, err := m.cert.Leaf.Verify(opts); err != nil {
			return nil, fmt.Errorf("certs: %s is not signed by %s: %w", s.opts.CertFile, s.opts.CAFile, err)
		}
	}
	return m, nil
}

func checkValidity(c *x509.Certificate, now time.Time) error {
	if now.Before(c.NotBefore) {
		return fmt.Errorf("%w: valid from %s", ErrNotYetValid, c.NotBefore.UTC().Format(time.RFC3339))
	}
	if now.After(c.NotAfter) {
		return fmt.Errorf("%w: valid until %s", ErrExpired, c.NotAfter.UTC().Format(time.RFC3339))
	}
	return nil
}

// checkComplete refuses PEM data whose last block has a BEGIN line and no
// END line: a file caught half-written.
func checkComplete(data []byte) error {
	rest := data
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
	}
	if bytes.Contains(rest, []byte("-----BEGIN")) {
		return ErrTruncated
	}
	return nil
}

// parseBundle parses every CERTIFICATE block of a CA bundle; text between
// blocks is ignored, another block type, a truncated block or no
// certificate at all is an error.
func parseBundle(data []byte) ([]*x509.Certificate, error) {
	if err := checkComplete(data); err != nil {
		return nil, err
	}
	var cas []*x509.Certificate
	for rest := data; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("CA bundle holds a %q PEM block", b.Type)
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("CA bundle: %w", err)
		}
		cas = append(cas, c)
	}
	if len(cas) == 0 {
		return nil, ErrEmptyCA
	}
	return cas, nil
}

func intermediates(der [][]byte) *x509.CertPool {
	pool := x509.NewCertPool()
	for _, d := range der {
		if c, err := x509.ParseCertificate(d); err == nil {
			pool.AddCert(c)
		}
	}
	return pool
}
