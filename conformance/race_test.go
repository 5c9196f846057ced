//go:build race

package conformance_test

// raceEnabled: the test binary was built with -race, and so is the Go
// adapter it builds.
const raceEnabled = true
