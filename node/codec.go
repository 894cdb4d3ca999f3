package node

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// The codecs of both HTTP servers: connect's protobuf and JSON codecs, but
// refusing requests that hold more messages than the listener's budget, and
// JSON requests with fields their message does not declare (so a typo such as
// "kost" is not silently charged the default cost). Binary protobuf stays
// lenient: unknown fields are how older and newer schemas meet.

// messageBudget bounds how many messages one request may hold once decoded.
type messageBudget struct {
	max  int
	flag string // of the byte bound it derives from
}

func (b messageBudget) exceeded(n int) error {
	return &budgetError{max: n, flag: b.flag}
}

// The codecs' own errors; any other error of theirs is protobuf's
// (errors.Is(err, proto.Error)).
var errEmptyJSON = errors.New("zero-length payload is not a valid JSON object")

// budgetError: a request holds more messages than its listener's budget.
type budgetError struct {
	max  int
	flag string
}

func (e *budgetError) Error() string {
	return fmt.Sprintf("the request holds more than %d messages (one per %d bytes of the server's --%s)", e.max, bytesPerMessage, e.flag)
}

// unknownFieldError: a JSON request names a field its message does not
// declare, at path (as in "policies[0].brust").
type unknownFieldError struct {
	path string
	in   protoreflect.MessageDescriptor
}

func (e *unknownFieldError) Error() string {
	i := strings.LastIndexAny(e.path, ".]")
	return fmt.Sprintf("%s: unknown field (%s has no field %q)", e.path, e.in.FullName(), strings.TrimPrefix(e.path[i+1:], "."))
}

// maxWalkDepth is how deep the budget checks descend; it is protobuf-go's
// own recursion limit, beyond which decoding fails anyway.
const maxWalkDepth = 10000

// protoCodec is connect's binary codec with a message budget.
type protoCodec struct {
	budget messageBudget
}

func (c *protoCodec) Name() string   { return "proto" }
func (c *protoCodec) IsBinary() bool { return true }

func (c *protoCodec) Marshal(m any) ([]byte, error) {
	pm, err := asProto(m)
	if err != nil {
		return nil, err
	}
	return proto.Marshal(pm)
}

func (c *protoCodec) MarshalAppend(dst []byte, m any) ([]byte, error) {
	pm, err := asProto(m)
	if err != nil {
		return nil, err
	}
	return proto.MarshalOptions{}.MarshalAppend(dst, pm)
}

func (c *protoCodec) Unmarshal(data []byte, m any) error {
	pm, err := asProto(m)
	if err != nil {
		return err
	}
	// A counted message takes at least 2 bytes: smaller requests are
	// within the budget without a look.
	if len(data)/2 > c.budget.max {
		n := 0
		if !countProto(data, pm.ProtoReflect().Descriptor(), &n, c.budget.max, 0) {
			return c.budget.exceeded(c.budget.max)
		}
	}
	return proto.Unmarshal(data, pm)
}

// countProto adds to *n the messages, map entries and repeated strings of
// data, a message of type md, and reports whether *n stayed within max.
// Malformed data stops the count (decoding reports it).
func countProto(data []byte, md protoreflect.MessageDescriptor, n *int, max, depth int) bool {
	if depth > maxWalkDepth {
		return true
	}
	for len(data) > 0 {
		num, typ, l := protowire.ConsumeTag(data)
		if l < 0 {
			return true
		}
		data = data[l:]
		if typ != protowire.BytesType {
			l = protowire.ConsumeFieldValue(num, typ, data)
			if l < 0 {
				return true
			}
			data = data[l:]
			continue
		}
		v, l := protowire.ConsumeBytes(data)
		if l < 0 {
			return true
		}
		data = data[l:]
		fd := md.Fields().ByNumber(num)
		switch {
		case fd == nil:
		case fd.Message() != nil:
			if *n++; *n > max || !countProto(v, fd.Message(), n, max, depth+1) {
				return false
			}
		case fd.IsList() && (fd.Kind() == protoreflect.StringKind || fd.Kind() == protoreflect.BytesKind):
			if *n++; *n > max {
				return false
			}
		}
	}
	return true
}

// strictJSONCodec is connect's JSON codec, registered under name, refusing
// unknown fields and requests over the message budget.
type strictJSONCodec struct {
	name   string
	budget messageBudget
}

func (c *strictJSONCodec) Name() string   { return c.name }
func (c *strictJSONCodec) IsBinary() bool { return false }

func (c *strictJSONCodec) Marshal(m any) ([]byte, error) {
	pm, err := asProto(m)
	if err != nil {
		return nil, err
	}
	return protojson.MarshalOptions{}.Marshal(pm)
}

func (c *strictJSONCodec) MarshalAppend(dst []byte, m any) ([]byte, error) {
	pm, err := asProto(m)
	if err != nil {
		return nil, err
	}
	return protojson.MarshalOptions{}.MarshalAppend(dst, pm)
}

func (c *strictJSONCodec) Unmarshal(data []byte, m any) error {
	pm, err := asProto(m)
	if err != nil {
		return err
	}
	if len(data) == 0 {
		return errEmptyJSON
	}
	if len(data)/2 > c.budget.max && countJSONObjects(data) > c.budget.max {
		return c.budget.exceeded(c.budget.max)
	}
	err = protojson.Unmarshal(data, pm)
	if err == nil {
		return nil
	}
	if path, md := unknownJSONField(data, pm.ProtoReflect().Descriptor()); path != "" {
		return &unknownFieldError{path: path, in: md}
	}
	return err
}

// countJSONObjects counts the '{' of data outside strings: an upper bound
// on the messages it decodes to.
func countJSONObjects(data []byte) int {
	n, inString, escaped := 0, false, false
	for _, c := range data {
		switch {
		case escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case c == '"':
			inString = !inString
		case !inString && c == '{':
			n++
		}
	}
	return n
}

// unknownJSONField returns the path (as in "policies[0].brust") of the first
// field of data, the JSON of a message of type md, that its message does not
// declare, with the descriptor of that message; "" when it finds none.
func unknownJSONField(data []byte, md protoreflect.MessageDescriptor) (string, protoreflect.MessageDescriptor) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	w := jsonWalker{dec: dec}
	w.message(md, "", 0)
	return w.path, w.in
}

// jsonWalker walks a JSON document alongside message descriptors. It stops
// at the first unknown field (path, in) or at anything it does not expect
// (err): protojson has already reported what is malformed.
type jsonWalker struct {
	dec  *json.Decoder
	path string
	in   protoreflect.MessageDescriptor
	err  error
}

func (w *jsonWalker) stopped() bool { return w.path != "" || w.err != nil }

func (w *jsonWalker) token() json.Token {
	if w.err != nil {
		return nil
	}
	t, err := w.dec.Token()
	if err != nil {
		w.err = err
	}
	return t
}

func (w *jsonWalker) skip() {
	if w.err == nil {
		var raw json.RawMessage
		w.err = w.dec.Decode(&raw)
	}
}

// message walks one value of a field of message type md.
func (w *jsonWalker) message(md protoreflect.MessageDescriptor, path string, depth int) {
	if strings.HasPrefix(string(md.FullName()), "google.protobuf.") || depth > maxWalkDepth {
		w.skip() // well-known types have JSON forms of their own
		return
	}
	if t := w.token(); t != json.Delim('{') {
		if d, ok := t.(json.Delim); ok && d == '[' {
			w.err = errors.New("array for a message")
		}
		return
	}
	fields := md.Fields()
	for !w.stopped() && w.dec.More() {
		key, ok := w.token().(string)
		if !ok {
			return
		}
		fd := fields.ByJSONName(key)
		if fd == nil {
			fd = fields.ByTextName(key)
		}
		if fd == nil {
			w.path, w.in = joinPath(path, key), md
			return
		}
		w.field(fd, joinPath(path, string(fd.Name())), depth)
	}
	w.token() // '}'
}

// field walks the value of fd.
func (w *jsonWalker) field(fd protoreflect.FieldDescriptor, path string, depth int) {
	switch {
	case fd.IsMap() && fd.MapValue().Message() != nil:
		if w.token() != json.Delim('{') {
			return
		}
		for !w.stopped() && w.dec.More() {
			key, _ := w.token().(string)
			w.message(fd.MapValue().Message(), path+"["+strconv.Quote(key)+"]", depth+1)
		}
		w.token()
	case fd.IsList() && fd.Message() != nil:
		if w.token() != json.Delim('[') {
			return
		}
		for i := 0; !w.stopped() && w.dec.More(); i++ {
			w.message(fd.Message(), path+"["+strconv.Itoa(i)+"]", depth+1)
		}
		w.token()
	case !fd.IsMap() && !fd.IsList() && fd.Message() != nil:
		w.message(fd.Message(), path, depth+1)
	default:
		w.skip()
	}
}

func joinPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func asProto(m any) (proto.Message, error) {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a protobuf message", m)
	}
	return pm, nil
}
