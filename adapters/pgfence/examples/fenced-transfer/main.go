// Command fenced-transfer is an example Tenure worker that moves money
// between two accounts in PostgreSQL, each transfer a job of the queue
// "transfers" (payload "<from> <to> <amount>") and a fenced transaction
// (adapters/pgfence): a worker paused past its lease that wakes up after
// another worker took the job has its transfer refused by the database.
// See README.md.
//
//	fenced-transfer [-dsn DSN] setup                 # the tables, accounts a = 100 and b = 0
//	fenced-transfer [-dsn DSN] -id w1 [-think 3s] worker
//	fenced-transfer [-dsn DSN] balances
//	fenced-transfer [-dsn DSN] receipts > effects.jsonl  # for tenure audit --effects
//
// -dsn defaults to $DATABASE_URL, the NATS server to $NATS_URL.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"

	"github.com/maknow/tenure/adapters/pgfence"
	"github.com/maknow/tenure/fence"
	"github.com/maknow/tenure/worker"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "fenced-transfer:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("fenced-transfer", flag.ContinueOnError)
	dsn := fs.String("dsn", os.Getenv("DATABASE_URL"), "the PostgreSQL database")
	natsURL := fs.String("nats", os.Getenv("NATS_URL"), "the NATS server of Tenure (\"\": nats://127.0.0.1:4222)")
	id := fs.String("id", "w1", "the worker's id")
	think := fs.Duration("think", 0, "how long each transfer thinks before its transaction (time to SIGSTOP it)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("want one command: setup, worker, balances or receipts")
	}
	pool, err := pgxpool.New(ctx, *dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	fx, err := pgfence.New(pool)
	if err != nil {
		return err
	}
	switch fs.Arg(0) {
	case "setup":
		if err := fx.Migrate(ctx); err != nil {
			return err
		}
		_, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS accounts (id text PRIMARY KEY, balance bigint NOT NULL CHECK (balance >= 0));
			INSERT INTO accounts VALUES ('a', 100), ('b', 0) ON CONFLICT (id) DO UPDATE SET balance = excluded.balance`)
		return err
	case "balances":
		rows, err := pool.Query(ctx, `SELECT id, balance FROM accounts ORDER BY id`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var acct string
			var b int64
			if err := rows.Scan(&acct, &b); err != nil {
				return err
			}
			fmt.Fprintf(out, "%s %d\n", acct, b)
		}
		return rows.Err()
	case "receipts":
		return fx.WriteReceipts(ctx, out)
	case "worker":
		return work(ctx, *natsURL, *id, *think, fx, out)
	}
	return fmt.Errorf("unknown command %q", fs.Arg(0))
}

// work runs the queue's transfers until ctx ends.
func work(ctx context.Context, url, id string, think time.Duration, fx *pgfence.Store, out io.Writer) error {
	nc, err := nats.Connect(url, nats.MaxReconnects(-1))
	if err != nil {
		return err
	}
	defer nc.Close()
	w, err := worker.Connect(nc, id)
	if err != nil {
		return err
	}
	defer w.Close()
	say := func(format string, args ...any) { fmt.Fprintf(out, id+": "+format+"\n", args...) }
	say("ready")
	return w.Run(ctx, "transfers", func(ctx context.Context, j *worker.Job) error {
		from, to, amount, err := parse(j.Payload)
		if err != nil {
			return worker.Permanent(err)
		}
		say("%s: moving %d from %s to %s under lease %s", j.ID, amount, from, to, j.Lease.Token())
		time.Sleep(think) // a pause here (GC, SIGSTOP) may outlive the lease
		// Careless on purpose: nothing below looks at ctx, which the lease's
		// loss cancels; the database's fence is what refuses a stale write.
		wctx := context.WithoutCancel(ctx)
		_, err = pgfence.From(ctx).Do(wctx, "transfer", func(tx pgx.Tx) error {
			tag, err := tx.Exec(wctx, `UPDATE accounts SET balance = balance - $1 WHERE id = $2 AND balance >= $1`, amount, from)
			if err != nil {
				return err
			}
			if tag.RowsAffected() != 1 {
				return worker.Permanent(fmt.Errorf("account %s: no such account or not enough money", from))
			}
			_, err = tx.Exec(wctx, `UPDATE accounts SET balance = balance + $1 WHERE id = $2`, amount, to)
			return err
		})
		switch {
		case err == nil:
			say("%s: moved %d from %s to %s", j.ID, amount, from, to)
		case errors.Is(err, fence.ErrReplay):
			say("%s: moved already (%v)", j.ID, err)
			return nil
		case errors.Is(err, worker.ErrLostAuthority):
			say("%s: refused by the database: %v", j.ID, err)
		default:
			say("%s: %v", j.ID, err)
		}
		return err
	}, worker.WithEffects(fx))
}

func parse(payload string) (from, to string, amount int64, err error) {
	f := strings.Fields(payload)
	if len(f) == 3 {
		amount, err = strconv.ParseInt(f[2], 10, 64)
		if err == nil && amount > 0 {
			return f[0], f[1], amount, nil
		}
	}
	return "", "", 0, fmt.Errorf("payload %q: want <from> <to> <amount>", payload)
}
