package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/node"
	"github.com/quorate/quorate/policyfile"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// outputFormat is the value of -o/--output: "text", "json" or "yaml". It
// implements pflag.Value, so a bad value is refused while parsing flags.
type outputFormat string

const (
	outputText outputFormat = "text"
	outputJSON outputFormat = "json"
	// outputYAML is the JSON form as YAML: the same field names and values,
	// in the same order (policy commands print a policy file instead).
	outputYAML outputFormat = "yaml"
)

func (f *outputFormat) String() string { return string(*f) }
func (f *outputFormat) Type() string   { return "text|json|yaml" }
func (f *outputFormat) Set(s string) error {
	switch outputFormat(s) {
	case outputText, outputJSON, outputYAML:
		*f = outputFormat(s)
		return nil
	}
	return errors.New("must be text, json or yaml")
}

// structured reports whether f is a machine-readable format (json, yaml).
func (f outputFormat) structured() bool { return f == outputJSON || f == outputYAML }

// addOutputFlag registers -o/--output on cmd, defaulting to text.
func addOutputFlag(cmd *cobra.Command, f *outputFormat) {
	*f = outputText
	cmd.Flags().VarP(f, "output", "o", "output format: text, json (protojson of the response) or yaml (the same fields)")
}

// writeJSON writes m as indented protojson with every field, then a newline.
func writeJSON(w io.Writer, m proto.Message) error {
	b, err := protojson.MarshalOptions{Multiline: true, EmitUnpopulated: true}.Marshal(m)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// write writes m in format f: protojson (writeJSON) or that JSON as YAML.
func (f outputFormat) write(w io.Writer, m proto.Message) error {
	if f != outputYAML {
		return writeJSON(w, m)
	}
	s, err := yamlOf(m)
	if err != nil {
		return err
	}
	_, err = io.WriteString(w, s)
	return err
}

// writeWithRequestID writes m in format f as write does, with a last field
// requestId: the request ID of the request m answers, which the answer does
// not carry and a later command needs (refund names an admitted request by
// it).
func (f outputFormat) writeWithRequestID(w io.Writer, m proto.Message, requestID string) error {
	b, err := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(m)
	if err != nil {
		return err
	}
	var doc bytes.Buffer
	if err := json.Compact(&doc, b); err != nil {
		return err
	}
	id, err := json.Marshal(requestID)
	if err != nil {
		return err
	}
	obj := bytes.TrimSuffix(doc.Bytes(), []byte("}"))
	if len(obj) > 1 { // not "{"
		obj = append(obj, ',')
	}
	obj = append(append(append(obj, `"requestId":`...), id...), '}')
	if f == outputYAML {
		y, err := jsonToYAML(obj)
		if err != nil {
			return err
		}
		_, err = io.WriteString(w, y)
		return err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, obj, "", "  "); err != nil {
		return err
	}
	out.WriteByte('\n')
	_, err = w.Write(out.Bytes())
	return err
}

// yamlOf is m's protojson (with every field, as writeJSON prints it) as
// YAML: the same field names, values and order.
func yamlOf(m proto.Message) (string, error) {
	b, err := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(m)
	if err != nil {
		return "", err
	}
	return jsonToYAML(b)
}

// jsonToYAML converts a JSON document to a YAML one, keeping the order of
// object fields. (JSON is YAML: the document is read as YAML and written
// again in block style.)
func jsonToYAML(b []byte) (string, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return "", fmt.Errorf("converting JSON to YAML: %w", err)
	}
	blockStyle(&doc)
	var out strings.Builder
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return "", fmt.Errorf("converting JSON to YAML: %w", err)
	}
	if err := enc.Close(); err != nil {
		return "", err
	}
	return out.String(), nil
}

// blockStyle clears the flow and quoting styles of the JSON syntax from n
// and its children, so the encoder picks YAML's own (quoting a string only
// where it must).
func blockStyle(n *yaml.Node) {
	n.Style = 0
	for _, c := range n.Content {
		blockStyle(c)
	}
}

// textOr returns format, or for -o yaml a function that prints the answer's
// YAML form instead (without its final newline, which the caller adds): for
// the commands whose answer runCall prints.
func textOr[R any](f outputFormat, format func(resp *R, attempts int) string) func(resp *R, attempts int) string {
	if f != outputYAML {
		return format
	}
	return func(resp *R, _ int) string {
		s, err := yamlOf(any(resp).(proto.Message))
		if err != nil {
			// Only invalid UTF-8 fails, which a decoded answer cannot hold.
			return fmt.Sprintf("error: %v", err)
		}
		return strings.TrimSuffix(s, "\n")
	}
}

// fmtDuration formats a wire duration for people, rounded up to the
// millisecond: a client that waits the printed retry_after is never early.
func fmtDuration(d *durationpb.Duration) string {
	if d == nil {
		return "0s"
	}
	v := d.AsDuration()
	if r := v.Round(time.Millisecond); r < v {
		v = r + time.Millisecond
	} else {
		v = r
	}
	return v.String()
}

// fmtTimestamp formats a wire timestamp in UTC with nanoseconds; "-" when
// unset.
func fmtTimestamp(t *timestamppb.Timestamp) string {
	if t == nil {
		return "-"
	}
	return t.AsTime().UTC().Format(time.RFC3339Nano)
}

// writePolicies prints policies as a table, one line each. CALENDAR is a
// quota's calendar period ("-" for other algorithms); LEASE_TTL is how long a
// concurrency policy's leases live unless renewed ("-" for other
// algorithms); SHADOW is yes for a policy that decides and counts but never
// denies; LOCAL is how clients and nodes may decide in memory ("-": every
// request is decided by the cluster; "grant max=N ttl=D nodes=hot": from
// budget leases, exact, the nodes holding them for hot keys too).
func writePolicies(w io.Writer, policies []*quoratev1.Policy) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tVERSION\tALGORITHM\tLIMIT\tPERIOD\tCALENDAR\tLEASE_TTL\tBURST\tMAX_COST\tON_UNAVAILABLE\tSHADOW\tDEDUPE_RETENTION\tLOCAL")
	for _, p := range policies {
		retention := admission.DefaultDedupeRetention.String() // unset: the server's default
		if p.GetDedupeRetention() != nil {
			retention = fmtPeriod(p.GetDedupeRetention())
		}
		leaseTTL := "-"
		if p.GetAlgorithm() == string(admission.AlgorithmConcurrency) {
			leaseTTL = admission.DefaultLeaseTTL.String() // unset: the server's default
			if p.GetLeaseTtl().AsDuration() != 0 {
				leaseTTL = fmtPeriod(p.GetLeaseTtl())
			}
		}
		shadow := "no"
		if p.GetShadow() {
			shadow = "yes"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			p.GetName(), p.GetVersion(), p.GetAlgorithm(), p.GetLimit(), fmtPeriod(p.GetPeriod()), dash(p.GetCalendar()), leaseTTL,
			orDefault(p.GetBurst(), "=limit"), orDefault(p.GetMaxCost(), "=burst"), orDefaultStr(p.GetOnUnavailable(), "deny"),
			shadow, retention, fmtLocal(p))
	}
	return tw.Flush()
}

// fmtLocal describes a policy's local decisions with their defaults filled
// in, as the cluster applies them; "-" for none. A sync policy shows its
// bound: the most a key may be over-admitted by (Policy.SyncBound).
// "nodes=hot" says the nodes decide its hot keys from grants they hold for
// callers without the Go client (every policy with a local block).
func fmtLocal(p *quoratev1.Policy) string {
	ap := node.PolicyFromAPI(p).WithDefaults()
	switch l := ap.Local; l.Mode {
	case "":
		return "-"
	case admission.LocalSync:
		return fmt.Sprintf("%s every=%s bound=%d nodes=hot", l.Mode, l.SyncInterval, ap.SyncBound())
	default:
		return fmt.Sprintf("%s max=%d ttl=%s nodes=hot", l.Mode, l.MaxGrant, l.TTL)
	}
}

// fmtPeriod formats a policy's duration; "-" when unset (e.g. a quota's
// period).
func fmtPeriod(d *durationpb.Duration) string {
	if d == nil || d.AsDuration() == 0 {
		return "-"
	}
	return d.AsDuration().String()
}

// orDefault prints v, or what 0 stands for.
func orDefault(v int64, zero string) string {
	if v == 0 {
		return zero
	}
	return strconv.FormatInt(v, 10)
}

func orDefaultStr(v, empty string) string {
	if v == "" {
		return empty
	}
	return v
}

// writePolicyAnswer writes the answer m of a policy command, which holds
// policies, in format f (json or yaml): protojson of m, or a policy file of
// policies (package policyfile), which policy apply -f accepts unchanged.
func (f outputFormat) writePolicyAnswer(w io.Writer, m proto.Message, policies []*quoratev1.Policy) error {
	if f == outputYAML {
		return policyfile.Write(w, policies)
	}
	return writeJSON(w, m)
}
