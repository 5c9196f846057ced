package streams_test

import (
	"testing"

	"github.com/maknow/tenure/testutil"
)

func TestDocs(t *testing.T) { testutil.RequireDocs(t, ".") }
