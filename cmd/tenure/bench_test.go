package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// Flag mistakes are usage errors (exit 2) before anything runs; -h is not an error.
func TestBenchUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"bench", "--sync", "sometimes"}, 2, ""},
		{[]string{"bench", "--only", "everything"}, 2, ""},
		{[]string{"bench", "--storm", "many"}, 2, "--storm"},
		{[]string{"bench", "--storm", "100000,0"}, 2, "--storm"},
		{[]string{"bench", "--cluster", "--partitions", "0"}, 2, "--partitions"},
		{[]string{"bench", "--cluster", "--partitions", "1,1025"}, 2, "--partitions"},
		{[]string{"bench", "--cluster", "--partitions", "1,x"}, 2, "--partitions"},
		{[]string{"bench", "--cluster", "--cluster-leases", "-1"}, 2, "--cluster-leases"},
		{[]string{"bench", "--bogus"}, 2, "flag provided but not defined"},
		{[]string{"bench", "extra"}, 2, ""},
		{[]string{"bench", "-h"}, 0, "-quick"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), c.args, &stdout, &stderr); code != c.code || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", c.args, code, stderr.String(), c.code, c.want)
		}
	}
}

// A run of the pure scenarios prints the JSON object.
func TestBenchJSON(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"bench", "--quick", "--json", "-q", "--only", "fold", "--sync", "interval"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if out := stdout.String(); !strings.HasPrefix(out, "{") || !strings.Contains(out, `"fold_per_s":`) || !strings.Contains(out, `"sync_mode":"interval"`) {
		t.Fatalf("stdout %q", out)
	}
}
