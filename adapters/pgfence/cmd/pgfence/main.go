// Command pgfence manages the fence's tables in a PostgreSQL database
// (package pgfence) and exports what they hold:
//
//	pgfence [-dsn DSN] [-prefix tenure] [-resource NAME] migrate    # create the tables
//	pgfence [-dsn DSN] ... receipts > effects.jsonl                 # every committed effect, for tenure audit --effects
//	pgfence [-dsn DSN] ... refusals                                 # every refused write or claim, one line each
//
// -dsn defaults to $DATABASE_URL.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/maknow/tenure/adapters/pgfence"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "pgfence:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("pgfence", flag.ContinueOnError)
	dsn := fs.String("dsn", os.Getenv("DATABASE_URL"), "the PostgreSQL database")
	prefix := fs.String("prefix", pgfence.DefaultPrefix, "the tables' prefix")
	resource := fs.String("resource", "", "the resource's name in the receipts (default: postgres <prefix>_effects)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("want one command: migrate, receipts or refusals")
	}
	pool, err := pgxpool.New(ctx, *dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	opts := []pgfence.Option{pgfence.WithPrefix(*prefix)}
	if *resource != "" {
		opts = append(opts, pgfence.WithResource(*resource))
	}
	fx, err := pgfence.New(pool, opts...)
	if err != nil {
		return err
	}
	switch fs.Arg(0) {
	case "migrate":
		return fx.Migrate(ctx)
	case "receipts":
		return fx.WriteReceipts(ctx, out)
	case "refusals":
		rs, err := fx.Refusals(ctx)
		if err != nil {
			return err
		}
		for _, r := range rs {
			fmt.Fprintf(out, "%s %s %s effect=%q detail=%q\n", r.At.UTC().Format(time.RFC3339Nano), r.Reason, r.Token, r.Effect, r.Detail)
		}
		return nil
	}
	return fmt.Errorf("unknown command %q", fs.Arg(0))
}
