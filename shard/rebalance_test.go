package shard

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

func loads(m Map, nodes []string, leaders bool) map[string]int {
	c := map[string]int{}
	for _, n := range nodes {
		c[n] = 0
	}
	for _, g := range m.Groups {
		for j, r := range g.Replicas {
			if !leaders || j == 0 {
				c[r]++
			}
		}
	}
	return c
}

func spread(c map[string]int) int {
	lo, hi := -1, -1
	for _, v := range c {
		if lo < 0 || v < lo {
			lo = v
		}
		if v > hi {
			hi = v
		}
	}
	return hi - lo
}

// A cluster grown from 3 to 5 nodes: Rebalance evens replicas and
// preferred leaders across all five, keeps every group's replicas
// distinct, and says what it changed; a balanced map is left alone.
func TestRebalanceAfterGrowth(t *testing.T) {
	for _, groups := range []int{1, 2, 4, 8, 13} {
		t.Run(fmt.Sprint(groups), func(t *testing.T) {
			m, err := formedMap([]string{"n1", "n2", "n3"}, groups, 3)
			if err != nil {
				t.Fatal(err)
			}
			nodes := []string{"n1", "n2", "n3", "n4", "n5"}
			out, changes, err := m.Rebalance(nodes)
			if err != nil {
				t.Fatal(err)
			}
			if err := out.Validate(); err != nil {
				t.Fatalf("rebalanced map invalid: %v", err)
			}
			if s := spread(loads(out, nodes, false)); s > 1 {
				t.Errorf("replica counts %v spread %d", loads(out, nodes, false), s)
			}
			if s := spread(loads(out, nodes, true)); s > 1 && groups >= len(nodes) {
				t.Errorf("leader counts %v spread %d", loads(out, nodes, true), s)
			}
			if spread(loads(m, nodes, false)) <= 1 {
				if len(changes) != 0 || !out.Equal(m) {
					t.Fatalf("a balanced map changed: %v", changes)
				}
				return
			}
			if len(changes) == 0 || out.Epoch != m.Epoch+1 {
				t.Fatalf("changes %v, epoch %d (was %d)", changes, out.Epoch, m.Epoch)
			}
			if !slices.Equal(out.Ranges, m.Ranges) {
				t.Fatal("rebalancing moved slots")
			}
			again, more, err := out.Rebalance(nodes)
			if err != nil || len(more) != 0 || !again.Equal(out) {
				t.Fatalf("rebalancing a balanced map changed %v (err %v)", more, err)
			}
		})
	}
}

// Random maps over random node sets: Rebalance never breaks the map, and
// replica counts end within one of each other.
func TestRebalanceRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 300 {
		nn := 3 + rng.IntN(5)
		var nodes []string
		for k := range nn {
			nodes = append(nodes, fmt.Sprintf("n%d", k))
		}
		m, err := formedMap(nodes[:3+rng.IntN(nn-2)], 1+rng.IntN(12), 3)
		if err != nil {
			t.Fatal(err)
		}
		out, changes, err := m.Rebalance(nodes)
		if err != nil {
			t.Fatal(err)
		}
		if err := out.Validate(); err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if s := spread(loads(out, nodes, false)); s > 1 {
			t.Fatalf("case %d: replica counts %v after %v", i, loads(out, nodes, false), changes)
		}
	}
}
