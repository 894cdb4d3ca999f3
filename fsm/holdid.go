package fsm

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/quorate/quorate/admission"
	"github.com/quorate/quorate/lease"
)

// A lease ID and a reservation ID name what their holder took: the policy
// and key (so that any node routes the call to the key's group and access
// control sees the policy), a name unique in the key's group (a lease's
// fencing token, a reservation's table name), and the secret the leader's
// handler drew at random when it was taken (lease.SecretSize bytes). The
// secret is what makes an ID a capability: the name follows from what
// others can see (a token, a log index), the secret from nothing. The FSM
// acts on an ID only for the caller that took it and with its secret, and
// refuses anything else as if the ID had never existed.
//
// Encoding: base64url (no padding) of a kind byte ('L' lease, 'R'
// reservation), then policy, key and name each as a uvarint length and its
// bytes, then the secret. Parsing is strict: the kind, every length within
// its bound, nothing left over.
const (
	holdLease       = 'L'
	holdReservation = 'R'
	maxHoldNameLen  = 1024 // a reservation's name holds its policy and key
)

// holdID is a parsed lease or reservation ID.
type holdID struct {
	policy, key, name string
	secret            [lease.SecretSize]byte
}

func (h holdID) encode(kind byte) string {
	b := make([]byte, 0, 1+3*binary.MaxVarintLen16+len(h.policy)+len(h.key)+len(h.name)+len(h.secret))
	b = append(b, kind)
	for _, s := range []string{h.policy, h.key, h.name} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	b = append(b, h.secret[:]...)
	return base64.RawURLEncoding.EncodeToString(b)
}

func parseHoldID(kind byte, id string) (holdID, bool) {
	b, err := base64.RawURLEncoding.DecodeString(id)
	if err != nil || len(b) == 0 || b[0] != kind {
		return holdID{}, false
	}
	b = b[1:]
	var parts [3]string
	for i, limit := range []int{admission.MaxNameBytes, admission.MaxKeyBytes, maxHoldNameLen} {
		n, w := binary.Uvarint(b)
		if w <= 0 || n == 0 || n > uint64(limit) || n > uint64(len(b)-w) {
			return holdID{}, false
		}
		parts[i], b = string(b[w:w+int(n)]), b[w+int(n):]
	}
	var h holdID
	if len(b) != len(h.secret) {
		return holdID{}, false
	}
	h.policy, h.key, h.name = parts[0], parts[1], parts[2]
	copy(h.secret[:], b)
	return h, true
}

// LeaseID names a lease to its holder: policy, key, fencing token and the
// lease's secret.
func LeaseID(policy, key string, token int64, secret [lease.SecretSize]byte) string {
	return holdID{policy: policy, key: key, name: strconv.FormatInt(token, 10), secret: secret}.encode(holdLease)
}

// ParseLeaseID reverses LeaseID; ok is false for a string LeaseID cannot
// have made.
func ParseLeaseID(id string) (policy, key string, token int64, secret [lease.SecretSize]byte, ok bool) {
	h, ok := parseHoldID(holdLease, id)
	if !ok {
		return "", "", 0, secret, false
	}
	t, err := strconv.ParseInt(h.name, 10, 64)
	if err != nil || t < 1 || strconv.FormatInt(t, 10) != h.name {
		return "", "", 0, secret, false
	}
	return h.policy, h.key, t, h.secret, true
}

// ReservationID names a reservation to its holder: policy, key, its name
// in the reservations table and its secret.
func ReservationID(policy, key, name string, secret [lease.SecretSize]byte) string {
	return holdID{policy: policy, key: key, name: name, secret: secret}.encode(holdReservation)
}

// ParseReservationID reverses ReservationID; ok is false for a string
// ReservationID cannot have made.
func ParseReservationID(id string) (policy, key, name string, secret [lease.SecretSize]byte, ok bool) {
	h, ok := parseHoldID(holdReservation, id)
	return h.policy, h.key, h.name, h.secret, ok
}

// ReservationPolicy returns the policy a reservation ID names ("" when id
// is not one), so that a Commit is authorized for the policy it settles.
func ReservationPolicy(id string) string {
	h, _ := parseHoldID(holdReservation, id)
	return h.policy
}

// ReservationKey returns the key a reservation ID names ("" when id is not
// one), so that a Commit routes to the key's group.
func ReservationKey(id string) string {
	h, _ := parseHoldID(holdReservation, id)
	return h.key
}

// holderOf is the lease.Holder a command names: its caller and secret. ok
// is false when the secret is not lease.SecretSize bytes, or all zero (the
// zero secret is no one's: lease.Holder); the holder then has the zero
// secret.
func holderOf(caller string, secret []byte) (lease.Holder, bool) {
	h := lease.Holder{Caller: caller}
	if len(secret) != len(h.Secret) {
		return h, false
	}
	copy(h.Secret[:], secret)
	return h, h.Secret != [lease.SecretSize]byte{}
}

// errSecret refuses a command that takes a lease or reservation without a
// secret of the leader's.
func errSecret(secret []byte) error {
	return &admission.FieldError{Field: "secret", Err: admission.ErrInvalidRequest,
		Reason: fmt.Sprintf("must be %d random bytes drawn by the leader (got %d bytes)", lease.SecretSize, len(secret))}
}
