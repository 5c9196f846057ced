package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/maknow/tenure/adapters/pgfence"
	"github.com/maknow/tenure/fence"
	"github.com/maknow/tenure/internal/testutil"
)

// migrate, then one effect and one refusal: receipts prints the effect's
// receipt, refusals the refusal.
func TestCommands(t *testing.T) {
	pg := testutil.StartPostgres(t)
	ctx := context.Background()
	cmd := func(args ...string) string {
		var b bytes.Buffer
		if err := run(ctx, append([]string{"-dsn", pg.DSN}, args...), &b); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return b.String()
	}
	cmd("migrate")
	pool, err := pgxpool.New(ctx, pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	fx, _ := pgfence.New(pool)
	soon := time.Now().Add(time.Minute)
	l2 := fence.Fixed{T: fence.Token{Job: "j", LeaseID: "L7-x", Generation: 2}, Deadline: soon}
	if _, err := fx.Do(ctx, l2, "e", func(pgx.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := fx.Do(ctx, fence.Fixed{T: fence.Token{Job: "j", LeaseID: "L3-x", Generation: 1}}, "f", func(pgx.Tx) error { return nil }); err == nil {
		t.Fatal("a stale write committed")
	}
	lines, err := fence.ReadReceipts(strings.NewReader(cmd("receipts")), "out")
	if err != nil || len(lines) != 1 || lines[0].Err != nil || lines[0].Token() != l2.T {
		t.Fatalf("receipts %+v %v", lines, err)
	}
	if r := cmd("refusals"); !strings.Contains(r, " stale j/L3-x/1 effect=\"f\"") {
		t.Fatalf("refusals %q", r)
	}
	if err := run(ctx, []string{"-dsn", pg.DSN, "nope"}, &bytes.Buffer{}); err == nil {
		t.Fatal("an unknown command")
	}
}
