package slot

import (
	"strings"

	"github.com/cespare/xxhash/v2"
)

// Count is the number of slots keys hash to.
const Count = 4096

// HashTag returns the part of key that decides its slot: the bytes between
// the first '{' and the next '}' when that is non-empty, else the whole key.
// "{tenant:acme}:ip:1.2.3.4" and "{tenant:acme}:route:/x" share the tag
// "tenant:acme"; "a{}b" has no tag (an empty tag does not count).
func HashTag(key string) string {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return key
	}
	end := strings.IndexByte(key[open+1:], '}')
	if end <= 0 {
		return key
	}
	return key[open+1 : open+1+end]
}

// Of returns the slot of key, 0..Count-1.
func Of(key string) uint16 {
	return uint16(xxhash.Sum64String(HashTag(key)) % Count)
}
