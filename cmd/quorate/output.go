package main

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/quorate/quorate/admission"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
)

// outputFormat is the value of -o/--output: "text" or "json". It implements
// pflag.Value, so a bad value is refused while parsing flags.
type outputFormat string

const (
	outputText outputFormat = "text"
	outputJSON outputFormat = "json"
)

func (f *outputFormat) String() string { return string(*f) }
func (f *outputFormat) Type() string   { return "text|json" }
func (f *outputFormat) Set(s string) error {
	switch outputFormat(s) {
	case outputText, outputJSON:
		*f = outputFormat(s)
		return nil
	}
	return errors.New("must be text or json")
}

// addOutputFlag registers -o/--output on cmd, defaulting to text.
func addOutputFlag(cmd *cobra.Command, f *outputFormat) {
	*f = outputText
	cmd.Flags().VarP(f, "output", "o", "output format: text or json (protojson of the response)")
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
// denies.
func writePolicies(w io.Writer, policies []*quoratev1.Policy) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tVERSION\tALGORITHM\tLIMIT\tPERIOD\tCALENDAR\tLEASE_TTL\tBURST\tMAX_COST\tON_UNAVAILABLE\tSHADOW\tDEDUPE_RETENTION")
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
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			p.GetName(), p.GetVersion(), p.GetAlgorithm(), p.GetLimit(), fmtPeriod(p.GetPeriod()), dash(p.GetCalendar()), leaseTTL,
			orDefault(p.GetBurst(), "=limit"), orDefault(p.GetMaxCost(), "=burst"), orDefaultStr(p.GetOnUnavailable(), "deny"),
			shadow, retention)
	}
	return tw.Flush()
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

// lockedWriter serializes writes to w, so that several nodes can log to one
// stream. Each Write of the loggers is a whole line.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
