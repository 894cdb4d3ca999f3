package jepsen

import (
	"slices"
	"testing"
)

// "mixed" is every family but move, which is only ever named.
func TestParseFamiliesKeepsMoveOutOfMixed(t *testing.T) {
	for in, want := range map[string][]string{
		"mixed":       Families,
		"mixed,move":  append(slices.Clone(Families), FamilyMove),
		"move,kill":   {FamilyKill, FamilyMove},
		"none":        nil,
		"move":        {FamilyMove},
		"kill,,pause": {FamilyKill, FamilyPause},
	} {
		got, err := ParseFamilies(in)
		if err != nil {
			t.Fatalf("%q: %v", in, err)
		}
		w := slices.Clone(want)
		slices.Sort(w)
		if !slices.Equal(got, w) {
			t.Errorf("%q: %v, want %v", in, got, w)
		}
	}
	if _, err := ParseFamilies("teleport"); err == nil {
		t.Error("an unknown family was accepted")
	}
}
