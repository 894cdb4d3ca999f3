package fsm

// FeatureLevel is the highest log feature level this binary applies: the
// kinds of entries it may be asked to apply, and the rules it applies them
// by. Level 1 is every entry kind and rule of this version. Each node
// registers its level in the meta group (RegisterNode.feature_level), and a
// cluster refuses a node whose binary's level is below the lowest
// registered one (MinFeatureLevel): a later binary that adds level 2
// proposes its new entry kinds only once MinFeatureLevel reaches 2, and
// applies its new rules to an entry only when every node registered at
// that point of the log is at 2, so that no replica meets an entry it
// cannot decode and every replay decides alike (DESIGN.md §2 rule 3).
const FeatureLevel = 1

// MinFeatureLevel is the lowest feature level among registered nodes (0
// when none is registered).
func (f *FSM) MinFeatureLevel() uint32 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.meta.minFeatureLevel()
}

// minFeatureLevel is MinFeatureLevel with the FSM's lock held. The nodes
// are visited in map order, but the minimum does not depend on it.
func (m *metaState) minFeatureLevel() uint32 {
	first, level := true, uint32(0)
	for _, n := range m.nodes {
		if first || n.FeatureLevel < level {
			level, first = n.FeatureLevel, false
		}
	}
	return level
}
