package dedupe

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// A request is identified by its caller, its request_id and its key: the
// same request_id with another key is another request. The table keys
// entries by (caller, request ID) only, so the nodes fold the key into the
// request ID of each command they propose (KeyedRequestID), and whatever
// shows a request ID to a caller shows the part the caller sent
// (SentRequestID).

// keyedSeparator separates a request ID from its key's digest: a NUL and
// 'k', then 16 hex digits.
const (
	keyedSeparator = "\x00k"
	keyedSuffixLen = len(keyedSeparator) + 16
)

// KeyedRequestID folds key into requestID: requestID, the separator, then
// 16 hex digits of key's SHA-256. The digest has a fixed length, so two
// different (requestID, key) pairs give different IDs unless their keys'
// digests collide — and then the fingerprint, which holds the key itself,
// refuses the second as a reused request ID rather than answer it the
// first's decision.
func KeyedRequestID(requestID, key string) string {
	sum := sha256.Sum256([]byte(key))
	return requestID + keyedSeparator + hex.EncodeToString(sum[:8])
}

// SentRequestID is the request ID its caller sent: id without the key's
// digest KeyedRequestID appended, or id itself when it carries none.
func SentRequestID(id string) string {
	if len(id) < keyedSuffixLen {
		return id
	}
	cut := len(id) - keyedSuffixLen
	if !strings.HasPrefix(id[cut:], keyedSeparator) {
		return id
	}
	for _, c := range id[cut+len(keyedSeparator):] {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return id
		}
	}
	return id[:cut]
}
