package policyfile

import (
	"errors"
	"io"
	"os"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/node"
	quoratev1 "github.com/quorate/quorate/proto/quorate/v1"
	"github.com/quorate/quorate/yamllist"
)

// spec is the shape of a policy file, its fields in the order they
// are documented. A field written without a value is unset; which fields a
// policy needs is admission.Policy.Validate's to say.
var spec = yamllist.Spec{
	Key: "policies",
	Fields: []string{"name", "algorithm", "limit", "period", "calendar", "burst", "max_cost",
		"on_unavailable", "shadow", "dedupe_retention", "lease_ttl", "local"},
	NameField:  "name",
	NullUnset:  true,
	ShowValues: true,
	Entries:    "policies",
	Every:      "all policies",
	Entry:      "a policy",
}

// maxFileBytes bounds what we read: a policy file is small.
const maxFileBytes = 4 << 20

// Error is a problem in a policy file: the list files' one error
// type, whose Name is the policy's. Test it with errors.As; it unwraps to its
// cause (an *admission.FieldError for a value Validate refused, a YAML or
// duration error, or nil).
type Error = yamllist.Error

// Read reads and checks the policy file at path ("-" is stdin).
func Read(path string, stdin io.Reader) ([]*quoratev1.Policy, error) {
	var r io.Reader = stdin
	name := "<stdin>"
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r, name = f, path
	}
	data, err := yamllist.Read(name, r, maxFileBytes)
	if err != nil {
		return nil, err
	}
	return Parse(name, data)
}

// Parse parses and validates a policy file; file names it in errors.
// The policies are returned in file order, as written (defaults are left to
// the server, which applies the same ones).
func Parse(file string, data []byte) ([]*quoratev1.Policy, error) {
	var out []*quoratev1.Policy
	seen := make(map[string]int) // name → line
	err := spec.Parse(file, data, func(e *yamllist.Entry) error {
		p, err := parsePolicy(e)
		if err != nil {
			return err
		}
		if first, ok := seen[p.GetName()]; ok {
			return e.Fail(e.At(), "name", nil, "duplicate policy name %q (first at line %d)", p.GetName(), first)
		}
		seen[p.GetName()] = e.At()
		out = append(out, p)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Hints for a duration that does not parse, by field.
const (
	periodHint    = "use a number and a unit, e.g. 500ms, 1s, 1m, 15m, 24h"
	retentionHint = "use a number and a unit between 1s and 24h, e.g. 30s, 10m, 1h"
	leaseTTLHint  = "use a number and a unit between 1s and 24h, e.g. 30s, 2m, 1h"
	grantTTLHint  = "use a number and a unit between 100ms and 1h, e.g. 500ms, 10s, 1m"
	syncHint      = "use a number and a unit between 10ms and 1m, e.g. 100ms, 500ms, 1s"
)

// localFields are the fields of a policy's local mapping, in file order.
var localFields = []string{"mode", "max_grant", "ttl", "sync_interval"}

// parsePolicy decodes and validates one policy, field by field in file
// order, so that the first error in the file is the one reported.
func parsePolicy(e *yamllist.Entry) (*quoratev1.Policy, error) {
	var p admission.Policy
	err := e.Check(func(field string) error {
		var err error
		switch field {
		case "name":
			p.Name, err = e.Scalar(field)
		case "algorithm":
			var s string
			s, err = e.Scalar(field)
			p.Algorithm = admission.Algorithm(s)
		case "on_unavailable":
			var s string
			s, err = e.Scalar(field)
			p.OnUnavailable = admission.OnUnavailable(s)
		case "calendar":
			var s string
			s, err = e.Scalar(field)
			p.Calendar = admission.Calendar(s)
		case "shadow":
			p.Shadow, err = e.Bool(field)
		case "period":
			p.Period, err = e.Duration(field, periodHint)
		case "dedupe_retention":
			p.DedupeRetention, err = e.Duration(field, retentionHint)
		case "lease_ttl":
			p.LeaseTTL, err = e.Duration(field, leaseTTLHint)
		case "limit":
			p.Limit, err = e.Int(field)
		case "burst":
			p.Burst, err = e.Int(field)
		case "max_cost":
			p.MaxCost, err = e.Int(field)
		case "local":
			p.Local, err = parseLocal(e)
		}
		if err != nil {
			return err
		}
		if def, ok := zeroMeansDefault[field]; ok && isZero(field, p) {
			return e.Fail(e.Line(field), field, admission.ErrInvalidPolicy, "must not be 0: leave it out for the default (%s)", def)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := p.Validate(); err != nil {
		var fe *admission.FieldError
		if !errors.As(err, &fe) {
			return nil, e.Fail(e.Line(""), "", err, "%v", err)
		}
		return nil, e.Fail(e.Line(fe.Field), fe.Field, err, "%s", fe.Reason)
	}
	return node.PolicyToAPI(p, 0), nil
}

// parseLocal decodes a policy's local mapping; its errors name its fields
// as local.mode, local.max_grant, local.ttl and local.sync_interval.
func parseLocal(e *yamllist.Entry) (admission.Local, error) {
	var l admission.Local
	sub, err := e.Nested("local", localFields)
	if err != nil || sub == nil {
		return l, err
	}
	err = sub.Check(func(field string) error {
		var err error
		switch field {
		case "mode":
			var s string
			s, err = sub.Scalar(field)
			l.Mode = admission.LocalMode(s)
		case "max_grant":
			if l.MaxGrant, err = sub.Int(field); err == nil && l.MaxGrant == 0 {
				err = sub.Fail(sub.Line(field), field, admission.ErrInvalidPolicy, "must not be 0: leave it out for the default (a tenth of the burst)")
			}
		case "ttl":
			if l.TTL, err = sub.Duration(field, grantTTLHint); err == nil && l.TTL == 0 {
				err = sub.Fail(sub.Line(field), field, admission.ErrInvalidPolicy, "must not be 0: leave it out for the default (%s)", admission.DefaultGrantTTL)
			}
		case "sync_interval":
			if l.SyncInterval, err = sub.Duration(field, syncHint); err == nil && l.SyncInterval == 0 {
				err = sub.Fail(sub.Line(field), field, admission.ErrInvalidPolicy, "must not be 0: leave it out for the default (%s)", admission.DefaultSyncInterval)
			}
		}
		return err
	})
	if err == nil && l.Mode == "" && l != (admission.Local{}) {
		err = sub.Fail(sub.At(), "mode", admission.ErrInvalidPolicy, "missing; local decisions need a mode (grant or sync)")
	}
	return l, err
}

// zeroMeansDefault are the fields whose zero is the default, and that
// default: a file that writes 0 is refused rather than silently given it.
var zeroMeansDefault = map[string]string{
	"burst": "limit", "max_cost": "burst",
	"dedupe_retention": admission.DefaultDedupeRetention.String(), "lease_ttl": admission.DefaultLeaseTTL.String(),
}

// isZero reports whether field of p, just decoded, is zero.
func isZero(field string, p admission.Policy) bool {
	switch field {
	case "burst":
		return p.Burst == 0
	case "max_cost":
		return p.MaxCost == 0
	case "dedupe_retention":
		return p.DedupeRetention == 0
	case "lease_ttl":
		return p.LeaseTTL == 0
	}
	return false
}
