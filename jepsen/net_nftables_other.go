//go:build !linux

package jepsen

import "errors"

var errNoNftables = errors.New("jepsen: nftables mode needs Linux")

func newNftNet(int) (network, error) { return nil, errNoNftables }

func probeNftables() error { return errNoNftables }
