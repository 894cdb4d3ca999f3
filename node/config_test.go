package node

import (
	"errors"
	"maps"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/quorate/quorate/fsm"
)

func TestConfigValidateNamesTheFlag(t *testing.T) {
	valid := DefaultConfig()
	valid.ID, valid.DataDir, valid.Bootstrap = "n1", t.TempDir(), true
	if err := valid.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	cases := []struct {
		flag   string
		change func(*Config)
	}{
		{"--id", func(c *Config) { c.ID = "" }},
		{"--id", func(c *Config) { c.ID = "has space" }},
		{"--data-dir", func(c *Config) { c.DataDir = "" }},
		{"--memory-limit", func(c *Config) { c.MemoryLimit = MinMemoryLimit - 1 }},
		{"--memory-limit", func(c *Config) { c.MemoryLimit = -1 }},
		{"--max-inflight-bytes", func(c *Config) { c.MaxInflightBytes = 2*DefaultMaxRequestBytes - 1 }},
		{"--max-inflight-bytes", func(c *Config) { c.MaxInflightBytes = -1 }},
		{"--api-addr", func(c *Config) { c.APIAddr = "7070" }},
		{"--raft-addr", func(c *Config) { c.RaftAddr = "localhost" }},
		{"--advertise-api-addr", func(c *Config) { c.AdvertiseAPIAddr = "0.0.0.0:7070" }},
		{"--advertise-raft-addr", func(c *Config) { c.AdvertiseRaftAddr = "10.0.0.1:0" }},
		{"--bootstrap", func(c *Config) { c.Join = "127.0.0.1:7070" }},
		{"--join", func(c *Config) { c.Bootstrap, c.Join = false, "ftp://x:1" }},
		{"--heartbeat-timeout", func(c *Config) { c.HeartbeatTimeout = 0 }},
		{"--election-timeout", func(c *Config) { c.ElectionTimeout = c.HeartbeatTimeout / 2 }},
		{"--leader-lease-timeout", func(c *Config) { c.LeaderLeaseTimeout = 2 * c.HeartbeatTimeout }},
		{"--request-timeout", func(c *Config) { c.RequestTimeout = 0 }},
		{"--snapshot-threshold", func(c *Config) { c.SnapshotThreshold = 0 }},
		{"--log-level", func(c *Config) { c.LogLevel = "loud" }},
		// (In plaintext, --insecure-plaintext, to pass the TLS rule first.)
		{"--access-file", func(c *Config) { c.APIAddr, c.InsecurePlaintext = "10.0.0.1:7070", true }},
		{"--access-file", func(c *Config) {
			c.APIAddr, c.AdvertiseAPIAddr, c.InsecurePlaintext = "0.0.0.0:7070", "127.0.0.1:7070", true
		}},
		{"--access-file", func(c *Config) { c.AdvertiseAPIAddr, c.InsecurePlaintext = "node1.example:7070", true }},
		{"--max-request-bytes", func(c *Config) { c.MaxRequestBytes = 1000 }},
		{"--max-request-bytes", func(c *Config) { c.MaxRequestBytes = 2 << 30 }},
		{"--max-peer-request-bytes", func(c *Config) { c.MaxPeerRequestBytes = 4 << 20 }},
		{"--max-peer-request-bytes", func(c *Config) { c.MaxRequestBytes, c.MaxPeerRequestBytes = 256<<20, 128<<20 }},
		{"--request-body-timeout", func(c *Config) { c.RequestBodyTimeout = time.Millisecond }},
		{"--max-feature-level", func(c *Config) { c.MaxFeatureLevel = fsm.FeatureLevel + 1 }},
		{"--migration-chunk-bytes", func(c *Config) { c.MigrationChunkBytes = 100 }},
		{"--migration-chunk-bytes", func(c *Config) { c.MigrationChunkBytes = MaxMigrationChunkBytes + 1 }},
		{"--migration-chunk-bytes", func(c *Config) { c.MigrationChunkBytes = -1 }},
		{"--migration-progress-interval", func(c *Config) { c.MigrationProgressInterval = time.Microsecond }},
		{"--migration-progress-interval", func(c *Config) { c.MigrationProgressInterval = time.Hour }},
		{"--debug-dial-map", func(c *Config) { c.DebugDialMap = map[string]string{"127.0.0.1:7170": "127.0.0.1"} }},
	}
	// 0 keeps each default.
	zero := valid
	zero.MaxFeatureLevel, zero.MigrationChunkBytes, zero.MigrationProgressInterval = 0, 0, 0
	if err := zero.Validate(); err != nil {
		t.Fatalf("defaults given as 0: %v", err)
	}
	if zero.featureLevel() != fsm.FeatureLevel || zero.migrationChunkBytes() != DefaultMigrationChunkBytes ||
		zero.migrationProgressInterval() != DefaultMigrationProgressInterval {
		t.Fatalf("defaults given as 0: level %d, chunks of %d bytes, progress every %v", zero.featureLevel(),
			zero.migrationChunkBytes(), zero.migrationProgressInterval())
	}
	for _, tc := range cases {
		cfg := valid
		tc.change(&cfg)
		before := cfg
		before.DebugDialMap = maps.Clone(cfg.DebugDialMap)
		err := cfg.Validate()
		if !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: got %v, want ErrInvalidConfig", tc.flag, err)
			continue
		}
		// The flag's name is the point of the message.
		if !strings.Contains(err.Error(), tc.flag+":") {
			t.Errorf("%s: message %q does not name the flag", tc.flag, err)
		}
		if !reflect.DeepEqual(cfg, before) {
			t.Errorf("%s: Validate changed the config", tc.flag)
		}
	}
}

func TestDataDirRemembersItsNode(t *testing.T) {
	dir := t.TempDir()
	if err := claimDataDir(dir, "a"); err != nil {
		t.Fatal(err)
	}
	if err := claimDataDir(dir, "a"); err != nil {
		t.Fatalf("same id again: %v", err)
	}
	if err := claimDataDir(dir, "b"); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("other id: got %v, want ErrInvalidConfig", err)
	}
}

func TestJoinURL(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:7070":         "http://127.0.0.1:7070",
		"http://10.0.0.5:7070/x": "http://10.0.0.5:7070",
		"https://q.example:443":  "https://q.example:443",
	} {
		got, err := joinURL(in)
		if err != nil || got != want {
			t.Errorf("joinURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"ftp://x:1", "http://"} {
		if _, err := joinURL(in); err == nil {
			t.Errorf("joinURL(%q): no error", in)
		}
	}
}

// A node that is closed without ever running releases its ports and its
// data directory: the same directory and addresses open again at once.
func TestCloseWithoutRunReleasesPortsAndDataDir(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ID, cfg.DataDir, cfg.Bootstrap = "n1", t.TempDir(), true
	cfg.APIAddr, cfg.RaftAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.LogLevel = "error"
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.APIAddr, cfg.RaftAddr = n.APIAddr(), n.RaftAddr()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	n2, err := New(cfg)
	if err != nil {
		t.Fatalf("reopening the same dir and ports: %v", err)
	}
	if err := n2.Close(); err != nil {
		t.Fatal(err)
	}
	// Another node may not take a directory that is in use.
	n3, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n3.Close()
	other := cfg
	other.APIAddr, other.RaftAddr = "127.0.0.1:0", "127.0.0.1:0"
	if n4, err := New(other); err == nil {
		n4.Close()
		t.Fatal("a second node opened a data dir in use")
	}
}

// Open mode (no access file) is for loopback only; with an access file any
// address will do.
func TestConfigOpenModeOnLoopbackOnly(t *testing.T) {
	c := DefaultConfig()
	c.ID, c.DataDir, c.Bootstrap = "n1", t.TempDir(), true
	for _, addr := range []string{"127.0.0.1:0", "[::1]:7070", "localhost:7070"} {
		c.APIAddr = addr
		if err := c.Validate(); err != nil {
			t.Errorf("open mode on %s: %v", addr, err)
		}
	}
	c.APIAddr, c.InsecurePlaintext = "10.0.0.1:7070", true // past the TLS rule, to this one
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--access-file") {
		t.Errorf("open mode on %s: %v, want an error naming --access-file", c.APIAddr, err)
	}
	c.AccessFile = "access.yaml"
	if err := c.Validate(); err != nil {
		t.Errorf("with an access file on %s: %v", c.APIAddr, err)
	}
}
