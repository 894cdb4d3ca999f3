// Package yamllist reads Quorate's strict YAML list files: the policy file
// (cmd/quorate) and the token and access files (package access); serve's
// config file (cmd/quorate) uses its Document, Resolve and Error. Each is one
// YAML document holding a mapping with a single list key ("policies",
// "tokens", "callers") whose entries are mappings of known fields.
//
// # What it owns
//
//   - Read and ReadFile: reading a file whole, refusing one over a size
//     bound.
//   - Document: decoding at most one YAML document into a yaml.Node tree,
//     a syntax error or a second document refused with an Error naming the
//     line; Resolve follows an alias. The one decoding of these files.
//   - Spec.Parse: decoding, with Document, exactly one document that is a mapping holding
//     the one list key, a non-empty list, and handing each entry over in
//     order. The document is walked as a yaml.Node tree rather than decoded
//     into a struct, so that every error names its line, entry and field;
//     aliases are followed.
//   - Entry: one list entry. Entry.Check walks its fields in document order
//     (plain-string names, known, not repeated, a value or, where the Spec
//     allows it, none) and checks the required ones; Scalar, Names, Int,
//     Bool and Duration read a field's value; Fail reports anything else
//     wrong with it.
//   - Error: the one error type of these files, formatted as
//     `access.yaml:7: callers[1] (gateway-eu): roles: unknown role "root"`.
//     access.FileError and cmd/quorate's PolicyFileError are this type.
//
// What each field means (a valid role, a policy that validates, a hash of
// the right length) is the caller's to check; this package knows only the
// shape of the file.
package yamllist
