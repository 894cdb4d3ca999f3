package node

import (
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A node with an access file authenticates its peers: a plaintext peer
// port beyond loopback needs the peer secret, whose file must hold enough
// of it; loopback (quorate dev), TLS, or no access file need none.
func TestConfigPeerSecret(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := file("good.secret", base64.StdEncoding.EncodeToString(make([]byte, 32))+"\n")
	valid := DefaultConfig()
	valid.ID, valid.DataDir, valid.Bootstrap = "n1", dir, true
	valid.AccessFile, valid.InsecurePlaintext = "access.yaml", true
	tests := []struct {
		name   string
		change func(*Config)
		want   []string // what the error names; nil: valid
	}{
		{"loopback peer port", func(c *Config) {}, nil},
		{"plaintext beyond loopback", func(c *Config) { c.RaftAddr = "10.0.0.1:7170" },
			[]string{"--peer-secret-file:", "--access-file", "--raft-addr 10.0.0.1:7170", "--tls-cert"}},
		{"unspecified address", func(c *Config) { c.RaftAddr, c.AdvertiseRaftAddr = "0.0.0.0:7170", "127.0.0.1:7170" },
			[]string{"--peer-secret-file:", "--raft-addr 0.0.0.0:7170"}},
		{"advertised beyond loopback", func(c *Config) { c.AdvertiseRaftAddr = "node1.example:7170" },
			[]string{"--peer-secret-file:", "--advertise-raft-addr node1.example:7170"}},
		{"with the secret", func(c *Config) { c.RaftAddr, c.PeerSecretFile = "10.0.0.1:7170", good }, nil},
		{"with TLS", func(c *Config) {
			c.RaftAddr, c.InsecurePlaintext = "10.0.0.1:7170", false
			c.TLSCertFile, c.TLSKeyFile, c.TLSCAFile = "n1.pem", "n1-key.pem", "ca.pem"
		}, nil},
		{"open mode", func(c *Config) { c.RaftAddr, c.AccessFile = "10.0.0.1:7170", "" }, nil},
		{"short secret", func(c *Config) {
			c.PeerSecretFile = file("short.secret", base64.StdEncoding.EncodeToString(make([]byte, 31)))
		}, []string{"--peer-secret-file:", "31 bytes", "at least 32"}},
		{"not base64", func(c *Config) { c.PeerSecretFile = file("hex.secret", strings.Repeat("0f!", 30)) },
			[]string{"--peer-secret-file:", "not base64"}},
		{"no such file", func(c *Config) { c.PeerSecretFile = filepath.Join(dir, "absent") },
			[]string{"--peer-secret-file:", "absent"}},
	}
	for _, tc := range tests {
		cfg := valid
		tc.change(&cfg)
		err := cfg.Validate()
		if tc.want == nil {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", tc.name, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not name %q", tc.name, err, w)
			}
		}
	}
	secret, err := readPeerSecret(file("wrapped.secret", base64.StdEncoding.EncodeToString([]byte(strings.Repeat("s", 64)))[:60]+"\n"+
		base64.StdEncoding.EncodeToString([]byte(strings.Repeat("s", 64)))[60:]+"\n"))
	if err != nil || string(secret) != strings.Repeat("s", 64) {
		t.Fatalf("a secret wrapped over two lines: %q, %v", secret, err)
	}
}
