package schema

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
)

func TestDocs(t *testing.T) { testutil.RequireDocs(t, ".") }

// schemas are the compiled schemas of Files, by URI: every input schema
// (a renew's as a whole and its #/$defs/single and #/$defs/batch) and the
// decision schema. Formats are asserted (sent_at's format date-time
// rules out February 30).
type schemas struct {
	byURI map[string]*jsonschema.Schema
}

var compiled = sync.OnceValues(func() (*schemas, error) {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	var uris []string
	err := fs.WalkDir(Files(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(Files(), path)
		if err != nil {
			return err
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if id, _ := doc.(map[string]any)["$id"].(string); id != BaseURI+path {
			return fmt.Errorf("%s: $id %q, want %q", path, id, BaseURI+path)
		}
		if err := c.AddResource(BaseURI+path, doc); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if path != DefsPath {
			uris = append(uris, BaseURI+path)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, v := range batchVerbs {
		u := BaseURI + InputPath(v)
		uris = append(uris, u+"#/$defs/single", u+"#/$defs/batch")
	}
	s := &schemas{byURI: map[string]*jsonschema.Schema{}}
	for _, u := range uris {
		sch, err := c.Compile(u)
		if err != nil {
			return nil, fmt.Errorf("compile %s: %w", u, err)
		}
		s.byURI[u] = sch
	}
	return s, nil
})

func loadSchemas(t testing.TB) *schemas {
	t.Helper()
	s, err := compiled()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// batchVerbs are the verbs whose schemas have a single and a batch form:
// a renew, and from rules revision 7 on a submit, an ack and a result.
var batchVerbs = []events.Verb{events.VerbAck, events.VerbRenew, events.VerbResult, events.VerbSubmit}

// errNotJSON is what validate reports for bytes that are not one JSON
// document: no instance to validate, so no schema accepts them.
var errNotJSON = errors.New("not one JSON document")

// fataler is what validate needs of a *testing.T or a *rapid.T.
type fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

// validate checks body against the schema at uri.
func (s *schemas) validate(t fataler, uri string, body []byte) error {
	t.Helper()
	sch, ok := s.byURI[uri]
	if !ok {
		t.Fatalf("no schema %s", uri)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%w: %v", errNotJSON, err)
	}
	return sch.Validate(doc)
}

// validateInput checks an input body against the schema its subject names.
func (s *schemas) validateInput(t fataler, subject string, body []byte) error {
	t.Helper()
	uri, err := InputURI(subject)
	if err != nil {
		t.Fatalf("%s: %v", subject, err)
	}
	return s.validate(t, uri, body)
}

// short is err's message on one line, cut to a readable length.
func short(err error) string {
	if err == nil {
		return "valid"
	}
	m := strings.Join(strings.Fields(err.Error()), " ")
	if len(m) > 300 {
		m = m[:300] + "..."
	}
	return m
}

// The files are the ones the package says, every one compiles, and each
// verb has its schema.
func TestFilesCompile(t *testing.T) {
	s := loadSchemas(t)
	want := map[string]bool{BaseURI + DecisionPath: true}
	for v := events.VerbOffer; v.String() != "?"; v++ {
		want[BaseURI+InputPath(v)] = true
	}
	for _, v := range batchVerbs {
		u := BaseURI + InputPath(v)
		want[u+"#/$defs/single"], want[u+"#/$defs/batch"] = true, true
	}
	for u := range s.byURI {
		if !want[u] {
			t.Errorf("unexpected schema %s", u)
		}
		delete(want, u)
	}
	for u := range want {
		t.Errorf("missing schema %s", u)
	}
}
