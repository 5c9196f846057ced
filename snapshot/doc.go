// Package snapshot reads the coordinator's stored snapshot and checks it
// before anyone relies on it (PROTOCOL.md §19). It is the one reader of the
// snapshot: the coordinator restoring it (through its port,
// coordinator.Backend, so that the simulator's model of JetStream runs the
// same code), the archive sealing a segment at it, the state API's read
// model restoring from it, and the auditor starting from it or comparing
// the fold with it.
//
// A snapshot lives in an object store, outside the fenced decision stream:
// anyone who may store it may store anything, and a live coordinator
// replaces it every so often. So a Reader
//
//   - reads the object's description, and from its headers the snapshot's
//     position (the last input it covers and the last decision of that
//     input) and anchor (the checkpointed decision claiming its state hash);
//   - checks them against the decision stream: the decision at its position
//     is the last one of its input and carries the snapshot's chain value,
//     and the decision at its anchor is a checkpointed decision claiming
//     exactly its input and state hash (streams.SnapshotAnchor);
//   - reads the bytes of that version of the object, and only that one (a
//     version replaced while it is read is never mixed with the next),
//     checks them against the object's own size and digest, then their
//     SHA-256 against the anchored state hash;
//   - restores them (the snapshot format and the rules revision it holds
//     must be ones this Tenure knows) and requires the state to cover the
//     input its headers say.
//
// Every read and every check is bounded in time, and every way it can fail
// is an *Error whose Kind says which (errors.Is matches the sentinels):
// ErrNone (none stored yet), ErrUnreadable (the store or the decision
// stream did not answer: try again later), ErrReplaced (replaced while it
// was read, every time it was tried), ErrCorrupt (the stored object does
// not match its own metadata), ErrUnanchored (no anchor: an older Tenure's),
// ErrMismatch (not what its anchor and headers say) and ErrFormat (its
// bytes, as anchored, are no state this Tenure restores). Unreadable and
// replaced snapshots are read again a few times before the error is
// returned.
//
// JetStream's own ObjectStore.Get cannot tell that the version it reads
// was replaced: storing a new version purges the old one's chunks, and Get
// waits for them until its context ends. The Objects this package builds
// over JetStream (NewObjects) read the chunks of one version by sequence,
// each read bounded, and tell a version that is gone from one that is
// damaged or not answering.
package snapshot
