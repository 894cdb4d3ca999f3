package main

import (
	"fmt"
	"math"
	"runtime/debug"
	"strconv"
	"strings"
)

// byteSize is a flag value of bytes: a whole number with an optional
// binary unit, KiB, MiB or GiB ("512MiB", "2GiB", "1048576").
type byteSize struct{ n *int64 }

func (b byteSize) String() string {
	if b.n == nil || *b.n == 0 {
		return "0"
	}
	for _, u := range []struct {
		name  string
		shift uint
	}{{"GiB", 30}, {"MiB", 20}, {"KiB", 10}} {
		if *b.n%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d%s", *b.n>>u.shift, u.name)
		}
	}
	return strconv.FormatInt(*b.n, 10)
}

func (b byteSize) Set(s string) error {
	num, shift := s, uint(0)
	for _, u := range []struct {
		name  string
		shift uint
	}{{"KiB", 10}, {"MiB", 20}, {"GiB", 30}} {
		if strings.HasSuffix(s, u.name) {
			num, shift = strings.TrimSuffix(s, u.name), u.shift
		}
	}
	v, err := strconv.ParseInt(num, 10, 64)
	if err != nil || v < 0 || v > math.MaxInt64>>shift {
		return fmt.Errorf("%q is not a size: a whole number of bytes, or of KiB, MiB or GiB (512MiB, 2GiB)", s)
	}
	*b.n = v << shift
	return nil
}

func (byteSize) Type() string { return "size" }

// applyMemoryLimit sets the process's soft memory limit (node.Config's
// MemoryLimit, already validated); 0 leaves the runtime's default.
func applyMemoryLimit(limit int64) {
	if limit > 0 {
		debug.SetMemoryLimit(limit)
	}
}
