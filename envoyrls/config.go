package envoyrls

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/admission"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// MaxDepth bounds the nesting of descriptors in a configuration.
const MaxDepth = 16

// Config is the parsed configuration of every domain. It is immutable.
type Config struct {
	domains  map[string]*node
	policies []*quoratev1.Policy
	named    []namedLimit // every limit with a unit, in file order, until Parse names them
}

// namedLimit is a limit waiting for its policy name.
type namedLimit struct {
	l              *limit
	pol            *quoratev1.Policy
	domain         string
	path           []string
	readable, full string // policyName's readable name, and its hashed form
}

// node is one descriptor of the tree (or a domain's root, with no limit).
type node struct {
	limit     *limit
	exact     map[string]*node // key "\x00" value
	anyValue  map[string]*node // key, for descriptors without a value
	wildcards []wildcard       // values ending in '*', in file order
}

type wildcard struct {
	key, prefix string
	n           *node
}

// limit is a descriptor's rate_limit.
type limit struct {
	policy    string // the Quorate policy; "" when nothing is counted
	name      string // the rate_limit's name, or the policy's
	rpu       uint32
	unit      rlsv3.RateLimitResponse_RateLimit_Unit
	mult      uint32 // unit_multiplier; 0 when unset
	unlimited bool
	shadow    bool
}

// The file format (yaml).
type fileDomain struct {
	Domain      string           `yaml:"domain"`
	Descriptors []fileDescriptor `yaml:"descriptors"`
	// Local is Quorate's own key (the proxy never reads this file): the
	// local block of every policy of the domain, so the nodes decide its
	// hot keys from the grants they hold (policies.md, local).
	Local *fileLocal `yaml:"local"`
}

type fileDescriptor struct {
	Key            string           `yaml:"key"`
	Value          string           `yaml:"value"`
	RateLimit      *fileRateLimit   `yaml:"rate_limit"`
	Descriptors    []fileDescriptor `yaml:"descriptors"`
	ShadowMode     bool             `yaml:"shadow_mode"`
	DetailedMetric bool             `yaml:"detailed_metric"`
}

type fileRateLimit struct {
	Unit            string  `yaml:"unit"`
	RequestsPerUnit *uint32 `yaml:"requests_per_unit"`
	UnitMultiplier  *uint32 `yaml:"unit_multiplier"`
	Unlimited       bool    `yaml:"unlimited"`
	Name            string  `yaml:"name"`
}

// fileLocal is a domain's local block, as a policy file writes one.
type fileLocal struct {
	Mode         string `yaml:"mode"`
	MaxGrant     *int64 `yaml:"max_grant"`
	TTL          string `yaml:"ttl"`
	SyncInterval string `yaml:"sync_interval"`
}

// local is fl as a policy's local block; an error names the field.
func (fl *fileLocal) local() (*quoratev1.LocalDecisions, error) {
	if fl == nil {
		return nil, nil
	}
	out := &quoratev1.LocalDecisions{Mode: fl.Mode, MaxGrant: fl.MaxGrant}
	switch fl.Mode {
	case string(admission.LocalGrant), string(admission.LocalSync):
	default:
		return nil, fmt.Errorf("local.mode: must be grant or sync (got %q)", fl.Mode)
	}
	for _, d := range []struct {
		field, value string
		set          func(*durationpb.Duration)
	}{{"ttl", fl.TTL, func(d *durationpb.Duration) { out.Ttl = d }},
		{"sync_interval", fl.SyncInterval, func(d *durationpb.Duration) { out.SyncInterval = d }}} {
		if d.value == "" {
			continue
		}
		v, err := time.ParseDuration(d.value)
		if err != nil {
			return nil, fmt.Errorf("local.%s: %q is not a duration such as 10s", d.field, d.value)
		}
		d.set(durationpb.New(v))
	}
	return out, nil
}

// Parse reads the configuration files, data[i] being the i-th file's
// content; a file holds one domain per YAML document. An error names the
// file (by index when names is shorter) and the field at fault.
func Parse(names []string, data [][]byte) (*Config, error) {
	c := &Config{domains: map[string]*node{}}
	for i, d := range data {
		file := fmt.Sprintf("file %d", i)
		if i < len(names) {
			file = names[i]
		}
		dec := yaml.NewDecoder(bytes.NewReader(d))
		dec.KnownFields(true)
		for doc := 0; ; doc++ {
			var fd fileDomain
			err := dec.Decode(&fd)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("envoy config %s: %w", file, err)
			}
			if err := c.addDomain(&fd); err != nil {
				return nil, fmt.Errorf("envoy config %s (document %d): %w", file, doc+1, err)
			}
		}
	}
	c.nameLimits()
	return c, nil
}

func (c *Config) addDomain(fd *fileDomain) error {
	if fd.Domain == "" {
		return errors.New("domain: must not be empty")
	}
	if _, dup := c.domains[fd.Domain]; dup {
		return fmt.Errorf("domain: %q is configured twice", fd.Domain)
	}
	local, err := fd.Local.local()
	if err != nil {
		return err
	}
	root := &node{}
	first := len(c.named)
	if err := c.addDescriptors(fd.Domain, root, fd.Descriptors, "descriptors", nil, 1); err != nil {
		return err
	}
	if local != nil {
		for _, nl := range c.named[first:] {
			nl.pol.Local = proto.Clone(local).(*quoratev1.LocalDecisions)
		}
	}
	c.domains[fd.Domain] = root
	return nil
}

func (c *Config) addDescriptors(domain string, parent *node, ds []fileDescriptor, field string, path []string, depth int) error {
	if depth > MaxDepth {
		return fmt.Errorf("%s: descriptors nest at most %d deep", field, MaxDepth)
	}
	for i := range ds {
		d := &ds[i]
		at := fmt.Sprintf("%s[%d]", field, i)
		if d.Key == "" {
			return fmt.Errorf("%s.key: must not be empty", at)
		}
		n := &node{}
		switch {
		case d.Value == "":
			if parent.anyValue == nil {
				parent.anyValue = map[string]*node{}
			}
			if _, dup := parent.anyValue[d.Key]; dup {
				return fmt.Errorf("%s: key %q without a value is configured twice at this level", at, d.Key)
			}
			parent.anyValue[d.Key] = n
		case strings.HasSuffix(d.Value, "*"):
			for _, w := range parent.wildcards {
				if w.key == d.Key && w.prefix == strings.TrimSuffix(d.Value, "*") {
					return fmt.Errorf("%s: key %q value %q is configured twice at this level", at, d.Key, d.Value)
				}
			}
			parent.wildcards = append(parent.wildcards, wildcard{key: d.Key, prefix: strings.TrimSuffix(d.Value, "*"), n: n})
		default:
			if parent.exact == nil {
				parent.exact = map[string]*node{}
			}
			k := d.Key + "\x00" + d.Value
			if _, dup := parent.exact[k]; dup {
				return fmt.Errorf("%s: key %q value %q is configured twice at this level", at, d.Key, d.Value)
			}
			parent.exact[k] = n
		}
		p := append(path[:len(path):len(path)], d.Key, d.Value)
		if d.RateLimit != nil {
			l, pol, err := newLimit(d)
			if err != nil {
				return fmt.Errorf("%s.rate_limit.%w", at, err)
			}
			n.limit = l
			if pol != nil {
				c.named = append(c.named, namedLimit{l: l, pol: pol, domain: domain, path: p})
			}
		} else if d.ShadowMode {
			return fmt.Errorf("%s.shadow_mode: needs a rate_limit", at)
		}
		if err := c.addDescriptors(domain, n, d.Descriptors, at+".descriptors", p, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// units maps the file's unit names onto the response's.
var units = map[string]rlsv3.RateLimitResponse_RateLimit_Unit{
	"second": rlsv3.RateLimitResponse_RateLimit_SECOND,
	"minute": rlsv3.RateLimitResponse_RateLimit_MINUTE,
	"hour":   rlsv3.RateLimitResponse_RateLimit_HOUR,
	"day":    rlsv3.RateLimitResponse_RateLimit_DAY,
	"week":   rlsv3.RateLimitResponse_RateLimit_WEEK,
	"month":  rlsv3.RateLimitResponse_RateLimit_MONTH,
	"year":   rlsv3.RateLimitResponse_RateLimit_YEAR,
}

var unitPeriods = map[rlsv3.RateLimitResponse_RateLimit_Unit]time.Duration{
	rlsv3.RateLimitResponse_RateLimit_SECOND: time.Second,
	rlsv3.RateLimitResponse_RateLimit_MINUTE: time.Minute,
	rlsv3.RateLimitResponse_RateLimit_HOUR:   time.Hour,
	rlsv3.RateLimitResponse_RateLimit_DAY:    24 * time.Hour,
}

var unitCalendars = map[rlsv3.RateLimitResponse_RateLimit_Unit]string{
	rlsv3.RateLimitResponse_RateLimit_WEEK:  "week",
	rlsv3.RateLimitResponse_RateLimit_MONTH: "month",
	rlsv3.RateLimitResponse_RateLimit_YEAR:  "year",
}

// maxRequestsPerUnit is Quorate's largest policy limit.
const maxRequestsPerUnit = 1_000_000_000

// newLimit checks d's rate_limit and returns it with its policy, nil when
// it is unlimited; the policy is named, and the limit counted (rpu above
// 0), by nameLimits. An error starts with the field within rate_limit.
func newLimit(d *fileDescriptor) (*limit, *quoratev1.Policy, error) {
	rl := d.RateLimit
	l := &limit{unlimited: rl.Unlimited, shadow: d.ShadowMode, name: rl.Name}
	for i := 0; i < len(rl.Name); i++ {
		if rl.Name[i] < 0x20 || rl.Name[i] > 0x7e {
			return nil, nil, errors.New("name: must be printable ASCII")
		}
	}
	if rl.Unlimited {
		if rl.Unit != "" || rl.RequestsPerUnit != nil || rl.UnitMultiplier != nil {
			return nil, nil, errors.New("unlimited: excludes unit, requests_per_unit and unit_multiplier")
		}
		return l, nil, nil
	}
	u, ok := units[strings.ToLower(rl.Unit)]
	if !ok {
		return nil, nil, fmt.Errorf("unit: must be one of second, minute, hour, day, week, month, year (got %q)", rl.Unit)
	}
	l.unit = u
	if rl.RequestsPerUnit == nil {
		return nil, nil, errors.New("requests_per_unit: is required")
	}
	l.rpu = *rl.RequestsPerUnit
	if l.rpu > maxRequestsPerUnit {
		return nil, nil, fmt.Errorf("requests_per_unit: must be at most %d (got %d)", maxRequestsPerUnit, l.rpu)
	}
	mult := uint32(1)
	if rl.UnitMultiplier != nil {
		mult, l.mult = *rl.UnitMultiplier, *rl.UnitMultiplier
		if mult < 1 {
			return nil, nil, errors.New("unit_multiplier: must be at least 1")
		}
	}
	pol := &quoratev1.Policy{Limit: int64(l.rpu), Shadow: d.ShadowMode}
	if per, ok := unitPeriods[u]; ok {
		if time.Duration(mult) > 366*24*time.Hour/per {
			return nil, nil, fmt.Errorf("unit_multiplier: %d %ss exceed 366 days", mult, rl.Unit)
		}
		pol.Algorithm = "fixed_window"
		pol.Period = durationpb.New(time.Duration(mult) * per)
	} else {
		if mult != 1 {
			return nil, nil, fmt.Errorf("unit_multiplier: must be 1 for unit %s", rl.Unit)
		}
		pol.Algorithm = "quota"
		pol.Calendar = unitCalendars[u]
	}
	return l, pol, nil
}

// nameLimits gives each limit with a unit its policy name (policyName), in
// file order: the readable one, or its hashed form when the readable one is
// too long or another descriptor of the configuration reads the same (each
// of those takes its hashed form, so no name depends on which came first).
// A rate_limit without a name of its own is named as its policy; one with
// requests_per_unit above 0 is counted under the policy.
func (c *Config) nameLimits() {
	seen := make(map[string]int, len(c.named))
	for i := range c.named {
		nl := &c.named[i]
		nl.readable, nl.full = policyName(nl.domain, nl.path)
		seen[nl.readable]++
	}
	for _, nl := range c.named {
		name := nl.readable
		if seen[name] > 1 {
			name = nl.full
		}
		nl.pol.Name = name
		if nl.l.name == "" {
			nl.l.name = name
		}
		if nl.l.rpu > 0 {
			nl.l.policy = name
			c.policies = append(c.policies, nl.pol)
		}
	}
	c.named = nil
}

// maxReadableDomain bounds the domain's part of a policy name.
const maxReadableDomain = 24

// policyName returns the names of the descriptor at path (its keys and
// values, a value "" for a key alone) in domain. The readable one is
// "envoy.<domain>.<path>", the domain in policy-name characters (up to
// 24), then each key and each non-empty value, lowercased, every run of
// other characters than a-z, 0-9, '_', '-' and '.' one '_' (trimmed at
// either end), joined by '.': "envoy.edge.remote_address",
// "envoy.web.path.api_login.user". The hashed one is the readable one cut
// to leave room for '.' and 16 hex digits of the SHA-256 of domain and
// path, which it ends with; readable is full when it does not fit in a
// policy name (admission.MaxNameBytes).
func policyName(domain string, path []string) (readable, full string) {
	h := sha256.New()
	h.Write([]byte(domain))
	for _, p := range path {
		h.Write([]byte{0})
		h.Write([]byte(p))
	}
	sum := hex.EncodeToString(h.Sum(nil))[:16]
	var b strings.Builder
	b.WriteString("envoy.")
	d := nameElement(domain)
	if len(d) > maxReadableDomain {
		d = d[:maxReadableDomain]
	}
	if d == "" {
		d = "_"
	}
	b.WriteString(d)
	for _, p := range path {
		if e := nameElement(p); e != "" {
			b.WriteByte('.')
			b.WriteString(e)
		}
	}
	readable = b.String()
	cut := min(len(readable), admission.MaxNameBytes-1-len(sum))
	full = strings.TrimRight(readable[:cut], "._-") + "." + sum
	if len(readable) > admission.MaxNameBytes {
		readable = full
	}
	return readable, full
}

// nameElement is s in policy-name characters: lowercased, each run of
// other bytes one '_', without '_' at either end.
func nameElement(s string) string {
	var b strings.Builder
	under := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.' {
			b.WriteByte(c)
			under = false
		} else if !under {
			b.WriteByte('_')
			under = true
		}
	}
	return strings.Trim(b.String(), "_")
}

// Policies returns the Quorate policies of every counted limit, in file
// order. The caller must not modify them.
func (c *Config) Policies() []*quoratev1.Policy { return c.policies }

// lookup finds the limit of the request's descriptor entries in domain, nil
// when none applies: the last entry must land on a descriptor with a
// rate_limit.
func (c *Config) lookup(domain string, keys, values []string) *limit {
	n := c.domains[domain]
	if n == nil {
		return nil
	}
	for i := range keys {
		next := n.exact[keys[i]+"\x00"+values[i]]
		if next == nil {
			for _, w := range n.wildcards {
				if w.key == keys[i] && strings.HasPrefix(values[i], w.prefix) {
					next = w.n
					break
				}
			}
		}
		if next == nil {
			next = n.anyValue[keys[i]]
		}
		if next == nil {
			return nil
		}
		if i == len(keys)-1 {
			return next.limit
		}
		n = next
	}
	return nil
}
