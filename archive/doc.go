// Package archive keeps Tenure's log bounded without losing any of it: it
// seals segments of the input and decision streams at a checkpoint, exports
// them to files with their hashes, verifies them by reading them back, and
// only then, on an operator's explicit command, removes them from the
// streams (README.md "Retention of the log", PROTOCOL.md §21).
//
// A segment ends where the coordinator's stored snapshot stands (its input
// S and the last decision D of that input), and only once that snapshot
// checks out against its anchor in the decision stream, as a coordinator
// checks it before restoring it. It holds every input after the previous
// segment up to S, every decision up to D, and the snapshot itself; its
// manifest gives each file's SHA-256, size, count and range, the snapshot's
// anchor, and the previous manifest's SHA-256, so that the manifests form a
// chain from input 1 on. The files are JSON lines, one Record per stored
// message with every header, so a reader in any language can replay them.
//
// The three steps and what each guarantees:
//
//   - Archive writes the next segment into a temporary directory, syncs it,
//     reads it back (hashes, counts, canonical lines), folds its inputs from
//     the previous segment's snapshot and requires the state to be its
//     snapshot's (a checkpoint claim the fold records but does not judge is
//     never sealed), compares every record with a second read of the
//     streams, then writes the manifest and
//     renames the directory into place. A segment under its final name is
//     verified; an archiving killed half way leaves a temporary directory
//     the next one removes. It never writes to the log.
//   - Remove trims the streams up to a segment's end only after checking
//     again that nothing can be lost: the streams were created for log
//     retention (streams.Topology.LogRetention; JetStream cannot cancel a
//     stream's DenyPurge, so a deployment chooses this when it is created),
//     every segment up to it still has the files it was sealed with (their
//     hashes) and the streams still hold its last input and decision as
//     archived, and the stored snapshot checks out and is at or after the
//     segment's end, so that a coordinator restarts without the removed
//     messages. The segment's last input and last decision stay in the
//     streams: they are where the snapshot stands; so does the last
//     policy_set decision before them, so that the policy in force stays
//     readable from the decision stream. The limits in force (limit_set,
//     rules revision 9) are not kept so: nothing reads them from the
//     decision stream; the snapshot holds them, and the state API's read
//     model starts from it once the stream is trimmed.
//   - Restore puts the archive's last snapshot back when the stored one is
//     lost: a coordinator that finds the log trimmed before the state it
//     has stands by (coordinator.ErrLogRemoved) rather than fold a partial
//     log, and resumes once it is back.
//
// Nothing here gives a worker any right: a purge is a JetStream API call
// that tenure auth init grants to no worker; the streams still deny deletes
// of single messages, roll-ups, limits and TTLs. tenure audit replays the
// archive's segments and then the streams (audit.Config.Archive), checking
// the decision chain across the boundary, or without the archive starts
// from the stored snapshot.
package archive
