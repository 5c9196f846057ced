package audit

// SetSnapshotChunkHook sets the hook the snapshot reader calls before it
// reads the chunks (0) and after each chunk (the count received), and
// returns a function that removes it. Tests only.
func SetSnapshotChunkHook(f func(received int)) (restore func()) {
	snapshotChunkHook = f
	return func() { snapshotChunkHook = nil }
}
