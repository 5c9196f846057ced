// Package schema holds the JSON Schemas (draft 2020-12) of the Tenure wire
// protocol, version 1, as rules revision 9 has it (PROTOCOL.md §24): one per
// input kind (input/<verb>.json), one for decisions (decision.json) and
// their shared definitions (defs.json), which the others reference.
//
// The files are the product; this package only embeds them, so that tests
// and tools in Go can load them, and names the schema an input subject's
// body must satisfy. It validates nothing itself: its tests do, with a
// JSON Schema validator, against the strict decoder of package events,
// PROTOCOL.md's examples and the golden scenarios of package projector.
//
// A schema checks less than the decoder (defs.json's description lists
// what only the decoder checks): a body the decoder accepts always
// satisfies its schema, not the other way round.
package schema

import (
	"embed"
	"errors"
	"io/fs"

	"github.com/maknow/tenure/events"
)

//go:embed defs.json decision.json input/*.json
var files embed.FS

// BaseURI is the common prefix of the files' $id: the file at path p of
// Files has the $id BaseURI+p, and the files reference one another by
// relative URIs. An $id names a schema; it is not where to fetch it.
const BaseURI = "https://github.com/maknow/tenure/schema/"

// Paths of the files besides the input schemas.
const (
	DefsPath     = "defs.json"     // shared definitions
	DecisionPath = "decision.json" // a decision of the decision stream
)

// Files returns the schema files: DefsPath, DecisionPath and InputPath(v)
// for every verb v.
func Files() fs.FS { return files }

// InputPath is the path in Files of the schema of verb v's input bodies
// ("input/offer.json"), or "" for events.VerbNone.
func InputPath(v events.Verb) string {
	if v == events.VerbNone || v.String() == "?" {
		return ""
	}
	return "input/" + v.String() + ".json"
}

// InputURI returns the URI of the schema that the body of an input on
// subject must satisfy: BaseURI+InputPath(verb), with the fragment
// #/$defs/single or #/$defs/batch for a verb that batches (a renew, and
// from rules revision 7 on a submit, an ack or a result: a batch when the
// subject's job token is _). It fails as events.ParseInputSubject does on a
// malformed subject or a role that may not publish the verb: no schema
// applies to such an input, which is rejected whatever its body.
func InputURI(subject string) (string, error) {
	s, err := events.ParseInputSubject(subject)
	if err != nil {
		return "", err
	}
	p := InputPath(s.Verb)
	if p == "" {
		return "", errors.New("schema: no input schema for verb " + s.Verb.String())
	}
	u := BaseURI + p
	if s.Verb.Batches(events.CurrentRevision) {
		if s.Job == events.NoJob {
			return u + "#/$defs/batch", nil
		}
		return u + "#/$defs/single", nil
	}
	return u, nil
}
