package jepsen

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// sees is, per node, the set of nodes it can send to (itself included).
func sees(g Grudge, n int) [][]int {
	out := make([][]int, n)
	for i := range n {
		for j := range n {
			if !slices.Contains(g[i], j) {
				out[i] = append(out[i], j)
			}
		}
	}
	return out
}

func symmetric(g Grudge) bool {
	for from, tos := range g {
		for _, to := range tos {
			if !slices.Contains(g[to], from) {
				return false
			}
		}
	}
	return true
}

func TestGrudgeShapes(t *testing.T) {
	for _, n := range []int{3, 4, 5, 6, 7, 9} {
		for seed := range uint64(20) {
			rng := rand.New(rand.NewPCG(seed, 1))
			name := fmt.Sprintf("n=%d seed=%d", n, seed)

			iso := IsolateGrudge(n, n-1)
			if !symmetric(iso) || len(iso[n-1]) != n-1 || len(sees(iso, n)[0]) != n-1 {
				t.Errorf("%s: isolate: %v", name, iso)
			}

			split := SplitGrudge(n, rng)
			minority := 0
			for _, s := range sees(split, n) {
				if len(s) == n/2 {
					minority++
				} else if len(s) != n-n/2 {
					t.Errorf("%s: split: a node sees %d nodes: %v", name, len(s), split)
				}
			}
			want := n / 2 // nodes seeing n/2: the minority, or everyone when n is even
			if n%2 == 0 {
				want = n
			}
			if !symmetric(split) || minority != want {
				t.Errorf("%s: split: %d nodes in the minority: %v", name, minority, split)
			}

			ring := RingGrudge(n, rng)
			if !symmetric(ring) {
				t.Errorf("%s: ring is not symmetric: %v", name, ring)
			}
			seen := map[string]bool{}
			for i, s := range sees(ring, n) {
				if len(s) < n/2+1 {
					t.Errorf("%s: ring: node %d sees %v, not a majority", name, i, s)
				}
				if n > 3 && seen[fmt.Sprint(s)] {
					t.Errorf("%s: ring: two nodes see %v", name, s)
				}
				seen[fmt.Sprint(s)] = true
			}
			if n == 3 && len(seen) != 3 { // one pair cut: three different views
				t.Errorf("%s: ring of 3: %v", name, ring)
			}

			bridge := BridgeGrudge(n, rng)
			bridges := 0
			for i, s := range sees(bridge, n) {
				if len(s) == n {
					bridges++
				} else if len(s) < (n-1)/2+1 {
					t.Errorf("%s: bridge: node %d sees %v", name, i, s)
				}
			}
			if !symmetric(bridge) || bridges != 1 {
				t.Errorf("%s: bridge: %d nodes see everyone: %v", name, bridges, bridge)
			}
		}
	}
	if g := OneWayGrudge(2, 0); len(g) != 1 || !slices.Equal(g[2], []int{0}) {
		t.Errorf("one-way: %v", g)
	}
}

func TestCleanGrudge(t *testing.T) {
	g, err := cleanGrudge(Grudge{0: {2, 1, 1, 0}, 1: nil}, 3)
	if err != nil || len(g) != 1 || !slices.Equal(g[0], []int{1, 2}) {
		t.Fatalf("cleanGrudge: %v, %v", g, err)
	}
	for _, bad := range []Grudge{{3: {0}}, {0: {-1}}} {
		if _, err := cleanGrudge(bad, 3); err == nil {
			t.Errorf("cleanGrudge(%v) accepted nodes a 3-node cluster lacks", bad)
		}
	}
}
