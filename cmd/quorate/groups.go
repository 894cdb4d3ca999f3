package main

import (
	"fmt"
	"strconv"

	"github.com/quorate/quorate/node"
)

// The default topology: one data group per node the new cluster forms
// with, so that each node leads one group (the leader balancer spreads
// them) and no node carries every key's log. More groups split each
// node's decisions over more log entries, each with its own fdatasync and
// replication round, for nothing: docs/DESIGN.md ("The default topology")
// has the figures. A one-node cluster keeps its keys in the meta group,
// which already leads there.

// groupsAuto is --groups' default, and its value in a config file.
const groupsAuto = "auto"

// groupsFlag is --groups: a number of data groups, or auto (the default).
type groupsFlag struct {
	n    int
	auto bool
}

func newGroupsFlag() *groupsFlag { return &groupsFlag{auto: true} }

func (g *groupsFlag) String() string {
	if g.auto {
		return groupsAuto
	}
	return strconv.Itoa(g.n)
}

func (g *groupsFlag) Set(s string) error {
	if s == groupsAuto {
		g.n, g.auto = 0, true
		return nil
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 0 || v > node.MaxDataGroups {
		return fmt.Errorf("%q is neither auto nor a number of data groups from 0 to %d", s, node.MaxDataGroups)
	}
	g.n, g.auto = v, false
	return nil
}

func (g *groupsFlag) Type() string { return "groups" }

// resolve is the number of data groups of a cluster that forms with nodes
// nodes: the number given, or for auto one per node (none for one node).
func (g *groupsFlag) resolve(nodes int) int {
	if !g.auto {
		return g.n
	}
	if nodes < 2 {
		return 0
	}
	return nodes
}

// groupsUsage is --groups' help, for serve and dev.
const groupsUsage = "data groups the shard map spreads keys over when the cluster forms: auto (one per node it forms with,\n" +
	"so each node leads one; a one-node cluster keeps every key in the meta group) or a number (0: every key in the meta group)"
