package certs

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// What a development CA directory holds and names. Every key is ECDSA P-256
// in a PKCS #8 "PRIVATE KEY" PEM file of mode 0600; certificates are 0644.
const (
	// DevCAFile and DevCAKeyFile are the CA's certificate and key.
	DevCAFile    = "ca.pem"
	DevCAKeyFile = "ca-key.pem"
	// DevValidity is how long a development certificate is valid by default.
	DevValidity = 7 * 24 * time.Hour
	// DevAdminName and DevClientName are the file names (<name>.pem,
	// <name>-key.pem) of the two callers' certificates NewDevCA issues, and
	// DevAdminIdentity and DevClientIdentity their identities (their one
	// URI SAN, which CallerIdentity returns; their CN is the file name).
	DevAdminName      = "admin"
	DevClientName     = "client"
	DevAdminIdentity  = "spiffe://quorate-dev/admin"
	DevClientIdentity = "spiffe://quorate-dev/client"
)

// DevNodeName is the file name (<name>.pem, <name>-key.pem) of node id's
// certificate in a development CA directory: node-<id>.
func DevNodeName(id string) string { return "node-" + id }

// KeyPair is an issued certificate's files and what a status page shows of it.
type KeyPair struct {
	CertFile, KeyFile string
	Serial            *big.Int
	NotAfter          time.Time
}

// DevCA is a throwaway CA for `quorate dev --tls` and tests, written to Dir.
type DevCA struct {
	Dir       string
	CAFile    string // Dir/ca.pem: the bundle every Source's CAFile names
	CAKeyFile string // Dir/ca-key.pem
	// Nodes holds each node's certificate (node-<id>.pem): client and
	// server usage, URI SAN quorate://node/<id> and SANs 127.0.0.1,
	// localhost and the hosts given to NewDevCA.
	Nodes map[string]KeyPair
	// Admin (admin.pem, DevAdminIdentity) and Client (client.pem,
	// DevClientIdentity) are callers' certificates, client usage only.
	Admin, Client KeyPair
}

// NewDevCA creates dir (0700) if needed and writes to it a new CA valid for
// DevValidity, a certificate for each node of nodeIDs with hosts as extra
// SANs (host names or IP addresses), and the admin and client callers'
// certificates. It refuses a dir that already holds a ca.pem.
func NewDevCA(dir string, nodeIDs []string, hosts []string) (*DevCA, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	ca := &DevCA{
		Dir:       dir,
		CAFile:    filepath.Join(dir, DevCAFile),
		CAKeyFile: filepath.Join(dir, DevCAKeyFile),
		Nodes:     make(map[string]KeyPair, len(nodeIDs)),
	}
	if _, err := os.Stat(ca.CAFile); err == nil {
		return nil, fmt.Errorf("certs: %s already holds a CA", dir)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "Quorate development CA", Organization: []string{"Quorate"}},
		NotBefore:             now.Add(-5 * time.Minute),
		NotAfter:              now.Add(DevValidity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	if _, err := writeCert(tmpl, tmpl, key, key, ca.CAFile, ca.CAKeyFile); err != nil {
		return nil, err
	}
	for _, id := range nodeIDs {
		if ca.Nodes[id], err = IssueDevCert(dir, CertRequest{
			Name:   DevNodeName(id),
			NodeID: id,
			Hosts:  append([]string{"127.0.0.1", "localhost"}, hosts...),
		}); err != nil {
			return nil, err
		}
	}
	if ca.Admin, err = IssueDevCert(dir, CertRequest{Name: DevAdminName, URIs: []string{DevAdminIdentity}}); err != nil {
		return nil, err
	}
	if ca.Client, err = IssueDevCert(dir, CertRequest{Name: DevClientName, URIs: []string{DevClientIdentity}}); err != nil {
		return nil, err
	}
	return ca, nil
}

// CertRequest is one certificate for IssueDevCert to issue.
type CertRequest struct {
	// Name names the files: <Name>.pem and <Name>-key.pem in the CA's
	// directory, replaced (each by a rename) when they exist.
	Name string
	// CommonName is the Subject CN; empty means Name.
	CommonName string
	// NodeID, when set, adds the URI SAN quorate://node/<NodeID>.
	NodeID string
	// URIs are further URI SANs (a caller's SPIFFE ID).
	URIs []string
	// Hosts are DNS names and IP addresses for the SANs.
	Hosts []string
	// NotBefore is zero for five minutes ago; Validity zero for DevValidity.
	NotBefore time.Time
	Validity  time.Duration
}

// IssueDevCert issues a certificate from the development CA in dir (its
// ca.pem and ca-key.pem) with a new key and a random serial and writes it.
// The certificate has client usage, and server usage too when it names a
// node or hosts. The key file is written before the certificate file, each
// replaced by a rename.
func IssueDevCert(dir string, req CertRequest) (KeyPair, error) {
	if req.Name == "" || filepath.Base(req.Name) != req.Name {
		return KeyPair{}, fmt.Errorf("certs: certificate name %q: a file name is needed", req.Name)
	}
	caCert, caKey, err := loadDevCA(dir)
	if err != nil {
		return KeyPair{}, err
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: req.CommonName, Organization: []string{"Quorate"}},
		NotBefore:   req.NotBefore,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if tmpl.Subject.CommonName == "" {
		tmpl.Subject.CommonName = req.Name
	}
	if tmpl.NotBefore.IsZero() {
		tmpl.NotBefore = time.Now().Add(-5 * time.Minute)
	}
	validity := req.Validity
	if validity == 0 {
		validity = DevValidity
	}
	tmpl.NotAfter = tmpl.NotBefore.Add(validity)
	if req.NodeID != "" {
		u, err := NodeURI(req.NodeID)
		if err != nil {
			return KeyPair{}, fmt.Errorf("certs: %w", err)
		}
		tmpl.URIs = append(tmpl.URIs, u)
	}
	for _, s := range req.URIs {
		u, err := url.Parse(s)
		if err != nil {
			return KeyPair{}, fmt.Errorf("certs: URI SAN: %w", err)
		}
		tmpl.URIs = append(tmpl.URIs, u)
	}
	for _, h := range req.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	if req.NodeID != "" || len(req.Hosts) > 0 {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return KeyPair{}, fmt.Errorf("certs: %w", err)
	}
	return writeCert(tmpl, caCert, key, caKey,
		filepath.Join(dir, req.Name+".pem"), filepath.Join(dir, req.Name+"-key.pem"))
}

func loadDevCA(dir string) (*x509.Certificate, crypto.Signer, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, DevCAFile))
	if err != nil {
		return nil, nil, fmt.Errorf("certs: %w", err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, DevCAKeyFile))
	if err != nil {
		return nil, nil, fmt.Errorf("certs: %w", err)
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, nil, fmt.Errorf("certs: %s: no PEM CA certificate and key", dir)
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("certs: %s: %w", DevCAFile, err)
	}
	key, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("certs: %s: %w", DevCAKeyFile, err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, nil, errors.New("certs: CA key cannot sign")
	}
	return cert, signer, nil
}

// writeCert signs tmpl (with a random serial) by parent's key and writes
// the key, then the certificate.
func writeCert(tmpl, parent *x509.Certificate, key *ecdsa.PrivateKey, parentKey crypto.Signer, certFile, keyFile string) (KeyPair, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return KeyPair{}, fmt.Errorf("certs: %w", err)
	}
	tmpl.SerialNumber = serial.Add(serial, big.NewInt(1))
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		return KeyPair{}, fmt.Errorf("certs: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return KeyPair{}, fmt.Errorf("certs: %w", err)
	}
	if err := WriteFileAtomic(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return KeyPair{}, err
	}
	if err := WriteFileAtomic(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return KeyPair{}, err
	}
	return KeyPair{CertFile: certFile, KeyFile: keyFile, Serial: tmpl.SerialNumber, NotAfter: tmpl.NotAfter}, nil
}

// WriteFileAtomic writes data to name with mode perm by a rename of a
// temporary file in the same directory, so a Source never reads it
// half-written.
func WriteFileAtomic(name string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".tmp*")
	if err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	tmp := f.Name()
	err = f.Chmod(perm)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, name)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("certs: %w", err)
	}
	return nil
}
