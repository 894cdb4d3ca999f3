package policyfile

import (
	"io"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/node"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// policyField is one field of a policy as a policy file writes it.
type policyField struct {
	name, value string
	tag         string // the YAML tag of value: !!str, !!int or !!bool
}

// policyFileFields returns p's fields in policy file order, leaving out the
// fields that are unset (zero), which the file leaves out too.
func policyFileFields(p admission.Policy) []policyField {
	fields := []policyField{{"name", p.Name, "!!str"}, {"algorithm", string(p.Algorithm), "!!str"}}
	add := func(name, value, tag string, set bool) {
		if set {
			fields = append(fields, policyField{name, value, tag})
		}
	}
	add("limit", strconv.FormatInt(p.Limit, 10), "!!int", p.Limit != 0)
	add("period", fileDuration(p.Period), "!!str", p.Period != 0)
	add("calendar", string(p.Calendar), "!!str", p.Calendar != "")
	add("burst", strconv.FormatInt(p.Burst, 10), "!!int", p.Burst != 0)
	add("max_cost", strconv.FormatInt(p.MaxCost, 10), "!!int", p.MaxCost != 0)
	add("on_unavailable", string(p.OnUnavailable), "!!str", p.OnUnavailable != "")
	add("shadow", "true", "!!bool", p.Shadow)
	add("dedupe_retention", fileDuration(p.DedupeRetention), "!!str", p.DedupeRetention != 0)
	add("lease_ttl", fileDuration(p.LeaseTTL), "!!str", p.LeaseTTL != 0)
	add("local.mode", string(p.Local.Mode), "!!str", p.Local.Mode != "")
	add("local.max_grant", strconv.FormatInt(p.Local.MaxGrant, 10), "!!int", p.Local.MaxGrant != 0)
	add("local.ttl", fileDuration(p.Local.TTL), "!!str", p.Local.TTL != 0)
	add("local.sync_interval", fileDuration(p.Local.SyncInterval), "!!str", p.Local.SyncInterval != 0)
	return fields
}

// policyFieldNames are the names policyFileFields gives, in its order: the
// file's fields with local's spelled out (local.mode, ...).
func policyFieldNames() []string {
	var out []string
	for _, f := range spec.Fields {
		if f != "local" {
			out = append(out, f)
			continue
		}
		for _, l := range localFields {
			out = append(out, "local."+l)
		}
	}
	return out
}

// withoutDefaults undoes admission.Policy.WithDefaults, which the cluster
// applies to what it stores: the fields equal to their defaults are unset,
// as a file would leave them out. WithDefaults of the result is
// p.WithDefaults(), so applying it changes nothing, and the file stays
// valid when its limit is edited (a quota's burst must equal its limit).
func withoutDefaults(p admission.Policy) admission.Policy {
	p = p.WithDefaults()
	burst := p.Burst
	if p.Burst == p.Limit {
		p.Burst = 0
	}
	if p.MaxCost == burst {
		p.MaxCost = 0
	}
	if p.OnUnavailable == admission.OnUnavailableDeny {
		p.OnUnavailable = ""
	}
	if p.DedupeRetention == admission.DefaultDedupeRetention {
		p.DedupeRetention = 0
	}
	if p.Algorithm == admission.AlgorithmConcurrency && p.LeaseTTL == admission.DefaultLeaseTTL {
		p.LeaseTTL = 0
	}
	if p.Local.Mode != "" {
		if p.Local.MaxGrant == max(1, burst/10) {
			p.Local.MaxGrant = 0
		}
		if p.Local.TTL == admission.DefaultGrantTTL {
			p.Local.TTL = 0
		}
		if p.Local.SyncInterval == admission.DefaultSyncInterval {
			p.Local.SyncInterval = 0
		}
	}
	return p
}

// fileDuration formats d as a Go duration without its zero tails: 1m, not
// 1m0s; 1h30m, not 1h30m0s.
func fileDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// Write writes policies as a policy file, each with its version
// as a comment on its name, leaving out the fields equal to their defaults.
func Write(w io.Writer, policies []*quoratev1.Policy) error {
	list := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
	if len(policies) == 0 {
		list.Style = yaml.FlowStyle // policies: []
	}
	for _, p := range policies {
		entry := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		var local *yaml.Node
		for _, f := range policyFileFields(withoutDefaults(node.PolicyFromAPI(p))) {
			value := &yaml.Node{Kind: yaml.ScalarNode, Tag: f.tag, Value: f.value}
			if f.name == "name" && p.GetVersion() != 0 {
				value.LineComment = "version " + strconv.FormatUint(p.GetVersion(), 10)
			}
			into, name := entry, f.name
			if sub, ok := strings.CutPrefix(f.name, "local."); ok {
				if local == nil {
					local = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
					entry.Content = append(entry.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "local"}, local)
				}
				into, name = local, sub
			}
			into.Content = append(into.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: name}, value)
		}
		list.Content = append(list.Content, entry)
	}
	doc := &yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{{Kind: yaml.MappingNode, Tag: "!!map",
		Content: []*yaml.Node{{Kind: yaml.ScalarNode, Tag: "!!str", Value: spec.Key}, list}}}}
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return err
	}
	return enc.Close()
}
