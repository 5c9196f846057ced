package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Every fuzz target of the module is run by `make fuzz` (and so by CI's
// make fuzz-short): a target added to a _test.go file but not to the
// Makefile would never fuzz (issue 34 found five such).
func TestMakeFuzzRunsEveryTarget(t *testing.T) {
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	decl := regexp.MustCompile(`(?m)^func (Fuzz\w+)\(`)
	found := 0
	err = filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != "../.." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range decl.FindAllSubmatch(b, -1) {
			found++
			name := string(m[1])
			pkg := "./" + filepath.ToSlash(filepath.Dir(strings.TrimPrefix(path, "../../"))) + "/"
			want := "-fuzz '^" + name + "$$' -fuzztime $(FUZZTIME) " + pkg
			if !strings.Contains(string(mk), want) {
				t.Errorf("%s (%s) is not run by make fuzz: the Makefile needs %q", name, path, want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found < 9 {
		t.Fatalf("found %d fuzz targets, the module has at least 9", found)
	}
}
