// Package hostile is the corpus of malformed and hostile inputs the tests
// share: coordinator TestHostileInputs publishes every case to a running
// coordinator and checks its verdict, schema TestHostileCatalogue checks
// that the decoder and the JSON Schemas agree on each case a schema can
// judge. One corpus, so that the two cannot drift apart.
package hostile
