package main

import (
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/quorate/quorate/yamllist"
)

// maxConfigBytes bounds serve's --config file.
const maxConfigBytes = 1 << 20

// secretFileKey returns, for the key of a secret serve never takes as a
// value (serve's refused --node-token), the key of the file that holds it.
func secretFileKey(key string) (string, bool) {
	if key == "node-token" {
		return "node-token-file", true
	}
	return "", false
}

// configFlags are the serve flags a config file sets, in their names'
// order: every flag but --config, --print-config and --help, and the hidden
// ones (refused secrets, fault-injection switches).
func configFlags(cmd *cobra.Command) []*pflag.Flag {
	var flags []*pflag.Flag
	cmd.NonInheritedFlags().VisitAll(func(f *pflag.Flag) {
		if !f.Hidden && f.Name != "help" && f.Name != "config" && f.Name != "print-config" {
			flags = append(flags, f)
		}
	})
	return flags
}

// applyConfigFile sets cmd's flags from the YAML file at path: a mapping of
// flag names to values. A flag given on the command line keeps its value
// (the file's is still checked for its shape: a list, a bool, a whole
// number, a single value). An unknown or repeated key, or a value of
// the wrong type, is refused with a *yamllist.Error naming the file, the
// line and the key.
func applyConfigFile(cmd *cobra.Command, path string) error {
	data, err := yamllist.ReadFile(path, maxConfigBytes)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	if err := applyConfig(cmd, path, data); err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	return nil
}

func applyConfig(cmd *cobra.Command, file string, data []byte) error {
	fail := func(line int, key string, cause error, format string, args ...any) error {
		return &yamllist.Error{File: file, Line: line, Index: -1, Field: key, Reason: fmt.Sprintf(format, args...), Err: cause}
	}
	root, err := yamllist.Document(file, data, "every key in one mapping")
	if err != nil {
		return err
	}
	if root == nil || root.Kind == yaml.ScalarNode && root.ShortTag() == "!!null" {
		return nil // only comments, or an empty document: nothing set
	}
	if root.Kind != yaml.MappingNode {
		return fail(root.Line, "", nil, "expected a mapping of serve's flags (api-addr: ..., data-dir: ...), got %s", describeYAML(root))
	}
	known := make(map[string]*pflag.Flag)
	for _, f := range configFlags(cmd) {
		known[f.Name] = f
	}
	seen := make(map[string]int)
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], yamllist.Resolve(root.Content[i+1])
		key := k.Value
		if k.Kind != yaml.ScalarNode {
			return fail(k.Line, "", nil, "a key must be a plain string, got %s", describeYAML(k))
		}
		if fileKey, ok := secretFileKey(key); ok {
			return fail(k.Line, key, nil, "a secret is never given as a value; write it to a file only the node's user can read and give %s", fileKey)
		}
		f := known[key]
		if f == nil {
			return fail(k.Line, key, nil, "unknown key; the keys are serve's flags without their dashes (quorate serve --print-config lists them)")
		}
		if first, ok := seen[key]; ok {
			return fail(k.Line, key, nil, "repeated key (first at line %d)", first)
		}
		seen[key] = k.Line
		if v.Kind == yaml.ScalarNode && v.ShortTag() == "!!null" {
			return fail(v.Line, key, nil, "no value; leave the key out or give it one")
		}
		if bad := checkYAMLShape(f, v); bad != nil {
			return fail(bad.Line, key, nil, "expected %s, got %s", expectedYAML(f), describeYAML(bad))
		}
		if f.Changed {
			continue // given on the command line, which overrides the file
		}
		if err := setFlagFromYAML(f, v); err != nil {
			return fail(v.Line, key, err, "expected %s: %v", expectedYAML(f), err)
		}
	}
	return nil
}

// checkYAMLShape returns the node of v (v or one of its list's items) that
// is of the wrong kind for f, or nil: a list for a repeatable flag, a
// single value otherwise, true or false for a bool, a whole number for an
// integer.
func checkYAMLShape(f *pflag.Flag, v *yaml.Node) *yaml.Node {
	if _, ok := f.Value.(pflag.SliceValue); ok {
		if v.Kind != yaml.SequenceNode {
			return v
		}
		for _, item := range v.Content {
			if item = yamllist.Resolve(item); item.Kind != yaml.ScalarNode || item.ShortTag() == "!!null" {
				return item
			}
		}
		return nil
	}
	switch {
	case v.Kind != yaml.ScalarNode:
		return v
	case f.Value.Type() == "bool" && v.ShortTag() != "!!bool":
		return v
	case isIntFlag(f) && v.ShortTag() != "!!int":
		return v
	case f.Value.Type() == "groups" && v.ShortTag() != "!!int" && v.Value != groupsAuto:
		return v
	}
	return nil
}

// setFlagFromYAML sets f to v, of the right shape, as if given on the
// command line.
func setFlagFromYAML(f *pflag.Flag, v *yaml.Node) error {
	f.Changed = true
	if sv, ok := f.Value.(pflag.SliceValue); ok {
		items := make([]string, 0, len(v.Content))
		for _, item := range v.Content {
			items = append(items, yamllist.Resolve(item).Value)
		}
		return sv.Replace(items)
	}
	return f.Value.Set(v.Value)
}

func isIntFlag(f *pflag.Flag) bool {
	switch f.Value.Type() {
	case "int", "int64", "uint", "uint32", "uint64":
		return true
	}
	return false
}

// expectedYAML says what a value of f must be, in a config file's terms.
func expectedYAML(f *pflag.Flag) string {
	if _, ok := f.Value.(pflag.SliceValue); ok {
		return "a list of strings"
	}
	switch {
	case f.Value.Type() == "bool":
		return "true or false"
	case isIntFlag(f):
		return "a whole number"
	case f.Value.Type() == "groups":
		return "auto or a whole number"
	case f.Value.Type() == "duration":
		return "a duration (500ms, 2s, 1m)"
	case f.Value.Type() == "size":
		return "a size (512MiB, 2GiB, or a whole number of bytes)"
	default:
		return "a string"
	}
}

// printConfig writes the effective configuration of cmd's flags to w as a
// config file: every key, with the defaults of those not set. No key holds
// a secret (secrets are files, whose paths are shown); the node token's
// source is named when it is the environment.
func printConfig(cmd *cobra.Command, w io.Writer) error {
	root := &yaml.Node{Kind: yaml.MappingNode}
	for _, f := range configFlags(cmd) {
		k := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: f.Name}
		var v *yaml.Node
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			v = &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
			for _, s := range sv.GetSlice() {
				v.Content = append(v.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s})
			}
		} else {
			tag := "!!str"
			switch {
			case f.Value.Type() == "bool":
				tag = "!!bool"
			case isIntFlag(f), f.Value.Type() == "groups" && f.Value.String() != groupsAuto:
				tag = "!!int"
			}
			v = &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: f.Value.String()}
		}
		if f.Name == "node-token-file" && f.Value.String() == "" && os.Getenv(nodeTokenEnv) != "" {
			v.LineComment = "the node token comes from $" + nodeTokenEnv + " (not shown)"
		}
		root.Content = append(root.Content, k, v)
	}
	doc := &yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{root},
		HeadComment: "quorate serve's effective configuration: the defaults, the --config file, then the command line's flags"}
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return err
	}
	return enc.Close()
}

// describeYAML names a node's kind for error messages, quoting a single
// value (no key of a config file holds a secret).
func describeYAML(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.ShortTag() == "!!null" {
			return "nothing"
		}
		return strconv.Quote(n.Value)
	default:
		return "a YAML document"
	}
}
