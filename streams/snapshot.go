package streams

// The coordinator's snapshot in the topology's object store (SnapshotBucket):
// one object, replaced by each new snapshot, whose headers say where it
// stands in the log and where its state hash is anchored (PROTOCOL.md §19).
// The coordinator writes it; package snapshot reads and checks it, for the
// coordinator, the archive, the read models and the auditor.
const (
	// SnapshotObject is the object's name.
	SnapshotObject = "projector"
	// HeaderSnapshotInput is S: the last input the state covers.
	HeaderSnapshotInput = "Tenure-Input-Seq"
	// HeaderSnapshotDecision is the decision sequence of the last decision of input S.
	HeaderSnapshotDecision = "Tenure-Decision-Seq"
	// HeaderSnapshotAnchor is A: the decision sequence of the checkpointed
	// decision that claims (S, HeaderSnapshotHash).
	HeaderSnapshotAnchor = "Tenure-Anchor-Seq"
	// HeaderSnapshotHash is H: the state hash (SHA-256 of the object's
	// bytes), 64 lower-case hexadecimal digits.
	HeaderSnapshotHash = "Tenure-State-Hash"
	// HeaderSnapshotChain is the chain value (events.HeaderChain) of the
	// decision at HeaderSnapshotDecision, 64 lower-case hexadecimal digits:
	// where the decision chain continues from after the snapshot.
	HeaderSnapshotChain = "Tenure-Decision-Chain"
)
