package fsm

// FeatureLevel is the highest log feature level this binary applies: the
// kinds of entries it may be asked to apply, and the rules it applies them
// by. 1: Batch entries; 2: RemoveNode; 3: slot migrations and plans; 4:
// the cluster ID, imports bounded by MaxClockSkew, and the policy cap; 5:
// the meta group's audit trail; 6: Raft over the shared peer connection
// (no entry kind: see FeatureRaftMux); 7: budget leases (Grant entries,
// policies with local decisions). A node proposes an entry kind of level
// L only when every registered node is at L or above (MinFeatureLevel), so
// no replica meets an entry it cannot decode (DESIGN.md §2 rule 3). A rule of level L
// applies to an entry only when every node registered at that point of
// the log is at L or above: the registrations are in the log, so every
// replica, and every replay of an older log, decides the entry alike.
const FeatureLevel = 7

// Feature levels of entry kinds.
const (
	FeatureBatch      = 1
	FeatureRemoveNode = 2
	// FeatureMigrate: FreezeSlots, UnfreezeSlots, ImportSlots, DropImport,
	// CreatePlan, UpdatePlan, CancelPlan.
	FeatureMigrate = 3
	// FeatureBoundedImport: ImportSlots.bounded_source_time (MaxClockSkew).
	FeatureBoundedImport = 4
	// FeatureClusterID: SetClusterID; from it on, registrations without a
	// feature level are refused.
	FeatureClusterID = 4
	// FeaturePolicyCap: PutPolicies refuses more than MaxPolicies
	// (ErrTooManyPolicies). Below it, an entry written before the cap
	// existed (a registry that grew past MaxPolicies) replays as it was
	// first applied.
	FeaturePolicyCap = 4
	// FeatureAudit: the meta group records the admin commands whose entry
	// carries an Actor in its audit trail (audit.go), which snapshots then
	// hold. Below it, an Actor is ignored, so an older log replays as it
	// was first applied and an older binary never meets an audit record.
	FeatureAudit = 5
	// FeatureRaftMux: not an entry kind but what a node's binary serves. A
	// node at this level or above sends its groups' Raft RPCs to a peer
	// registered at it or above over one shared connection (package
	// raftmux) rather than over each group's channel of the peer port;
	// every binary of this level accepts both, so a peer below it (an
	// older binary, or one held back by --max-feature-level) is still sent
	// to over the group's channel.
	FeatureRaftMux = 6
	// FeatureBudgetLeases: Grant entries, and policies with local
	// decisions (admission.Local), which an older binary would store
	// without their local part.
	FeatureBudgetLeases = 7
)

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
