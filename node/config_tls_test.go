package node

import (
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Validate's TLS rules: the three files together, and no plaintext on a
// non-loopback address without InsecurePlaintext. Each error names its flag.
func TestConfigValidateTLS(t *testing.T) {
	base := DefaultConfig()
	base.ID, base.DataDir, base.Bootstrap = "n1", t.TempDir(), true
	// A non-loopback API also needs an access file (the open mode is
	// loopback's only): given here, so only the TLS rules are at stake.
	base.AccessFile = "access.yaml"
	secret := filepath.Join(t.TempDir(), "peer.secret")
	if err := os.WriteFile(secret, []byte(base64.StdEncoding.EncodeToString(make([]byte, 32))), 0o600); err != nil {
		t.Fatal(err)
	}
	withTLS := func(c *Config) { c.TLSCertFile, c.TLSKeyFile, c.TLSCAFile = "n1.pem", "n1-key.pem", "ca.pem" }
	cases := []struct {
		name   string
		change func(*Config)
		flag   string // "" means valid
	}{
		{"plaintext on loopback", func(c *Config) {}, ""},
		{"plaintext on localhost", func(c *Config) { c.APIAddr = "localhost:7070" }, ""},
		{"plaintext on IPv6 loopback", func(c *Config) { c.RaftAddr = "[::1]:7170" }, ""},
		{"plaintext API on all interfaces", func(c *Config) { c.APIAddr = "0.0.0.0:7070" }, "--api-addr"},
		{"plaintext Raft on a LAN address", func(c *Config) { c.RaftAddr = "10.0.0.5:7170" }, "--raft-addr"},
		{"plaintext advertised API", func(c *Config) { c.AdvertiseAPIAddr = "node1.example:7070" }, "--advertise-api-addr"},
		{"plaintext advertised Raft", func(c *Config) { c.AdvertiseRaftAddr = "10.0.0.5:7170" }, "--advertise-raft-addr"},
		{"insecure plaintext allowed", func(c *Config) {
			c.APIAddr, c.RaftAddr, c.AdvertiseRaftAddr, c.InsecurePlaintext = "0.0.0.0:7070", "0.0.0.0:7170", "10.0.0.5:7170", true
			c.PeerSecretFile = secret // with an access file, a plaintext peer port beyond loopback needs it
		}, ""},
		{"TLS on all interfaces", func(c *Config) {
			withTLS(c)
			c.APIAddr, c.RaftAddr, c.AdvertiseAPIAddr, c.AdvertiseRaftAddr = "0.0.0.0:7070", "0.0.0.0:7170", "10.0.0.5:7070", "10.0.0.5:7170"
		}, ""},
		{"TLS without key", func(c *Config) { withTLS(c); c.TLSKeyFile = "" }, "--tls-key"},
		{"TLS without cert", func(c *Config) { withTLS(c); c.TLSCertFile = "" }, "--tls-cert"},
		{"TLS without CA", func(c *Config) { withTLS(c); c.TLSCAFile = "" }, "--tls-ca"},
		{"TLS and insecure plaintext", func(c *Config) { withTLS(c); c.InsecurePlaintext = true }, "--insecure-plaintext"},
		{"TLS joining over http", func(c *Config) { withTLS(c); c.Bootstrap, c.Join = false, "http://127.0.0.1:7070" }, "--join"},
		{"TLS joining host:port", func(c *Config) { withTLS(c); c.Bootstrap, c.Join = false, "127.0.0.1:7070" }, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			tc.change(&cfg)
			err := cfg.Validate()
			if tc.flag == "" {
				if err != nil {
					t.Fatalf("got %v, want valid", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.flag+":") {
				t.Fatalf("got %v, want an invalid config naming %s", err, tc.flag)
			}
		})
	}
	// The plaintext refusal says how to go on.
	cfg := base
	cfg.APIAddr = "0.0.0.0:7070"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "--insecure-plaintext") || !strings.Contains(err.Error(), "--tls-cert") {
		t.Fatalf("got %v, want --insecure-plaintext and --tls-cert named", err)
	}
	// host:port joins over https with TLS.
	cfg = base
	withTLS(&cfg)
	cfg.Bootstrap, cfg.Join = false, "127.0.0.1:7070"
	if u, err := cfg.joinURL(); err != nil || u != "https://127.0.0.1:7070" {
		t.Fatalf("joinURL = %q, %v; want https://127.0.0.1:7070", u, err)
	}
}
