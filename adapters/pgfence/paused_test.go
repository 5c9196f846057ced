package pgfence_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"

	"github.com/maknow/tenure/adapters/pgfence"
	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/coordinator/coordtest"
	"github.com/maknow/tenure/fence"
	"github.com/maknow/tenure/internal/drain"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/worker"
)

// childEnv, set, makes the test binary a paused worker (pausedWorker).
const childEnv = "TENURE_PGFENCE_CHILD"

func TestMain(m *testing.M) {
	if cfg := os.Getenv(childEnv); cfg != "" {
		os.Exit(pausedWorker(cfg))
	}
	if os.Getenv(drain.WorkerEnv) != "" {
		os.Exit(drain.WorkerMain(drainHooks))
	}
	os.Exit(m.Run())
}

type childConfig struct {
	URL, DSN, ID, Job string
}

// pausedWorker acquires cfg.Job as worker cfg.ID, claims it in the
// database, says "ready <deadline>" and waits for a line on its standard
// input (the test SIGSTOPs it meanwhile); then, careless of its lease's
// context, it makes its transfer and says "refused <reason> stale=<bool>
// expired=<bool>" or "committed".
func pausedWorker(js string) int {
	var cfg childConfig
	if err := json.Unmarshal([]byte(js), &cfg); err != nil {
		fmt.Println("error", err)
		return 2
	}
	ctx := context.Background()
	nc, err := nats.Connect(cfg.URL)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer nc.Close()
	w, err := worker.Connect(nc, cfg.ID)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer w.Close()
	pool, err := pgxpool.New(ctx, cfg.DSN)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer pool.Close()
	fx, err := pgfence.New(pool)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	l, err := w.Acquire(ctx, cfg.Job, worker.WithLeaseDuration(time.Second))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	hctx, err := fx.Bind(ctx, l)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("ready", l.Expires().UnixNano())
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		fmt.Println("error", err)
		return 1
	}
	_, err = pgfence.From(hctx).Do(ctx, "transfer", transfer(ctx, 50))
	var re *fence.RefusedError
	switch {
	case errors.As(err, &re):
		fmt.Printf("refused %s stale=%v expired=%v\n", re.Reason, errors.Is(err, worker.ErrStaleGeneration), errors.Is(err, worker.ErrExpired))
	case err != nil:
		fmt.Println("error", err)
	default:
		fmt.Println("committed")
	}
	return 0
}

// A worker paused (SIGSTOP) past its lease and resumed has its transfer
// refused by the database, with the typed error: stale once a newer
// generation started and claimed the job, expired when none has yet.
func TestPausedWorker(t *testing.T) {
	fx, pool := newStore(t)
	pg := pool.Config().ConnString()
	srv := testutil.StartServer(t)
	cnc, err := nats.Connect(srv.ClientURL(), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cnc.Close)
	coordtest.RunGroup(t, coordinator.Config{ID: "c1", Conn: cnc}, 0, 15*time.Second)
	nc, _ := testutil.Connect(t, srv.ClientURL())
	w2, err := worker.Connect(nc, "w2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w2.Close() })
	ctx := context.Background()

	for _, c := range []struct {
		job, want string
		newer     bool
	}{
		{"pay-1", "refused stale stale=true expired=false", true},
		{"pay-2", "refused expired stale=false expired=true", false},
	} {
		t.Run(c.job, func(t *testing.T) {
			js, _ := json.Marshal(childConfig{URL: srv.ClientURL(), DSN: pg, ID: "w1", Job: c.job})
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), childEnv+"="+string(js))
			stdin, _ := cmd.StdinPipe()
			stdout, _ := cmd.StdoutPipe()
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGCONT); _ = cmd.Process.Kill(); _ = cmd.Wait() })
			out := bufio.NewReader(stdout)
			line, err := out.ReadString('\n')
			var deadline int64
			if _, e := fmt.Sscanf(line, "ready %d", &deadline); err != nil || e != nil {
				t.Fatalf("the worker: %q %v", line, err)
			}
			if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			if c.newer {
				// w2 gets the job once w1's lease expired, and claims it (as
				// worker.Run does before a handler, WithEffects).
				var l *worker.Lease
				if err := testutil.Poll(30*time.Second, func() (err error) {
					l, err = w2.Acquire(ctx, c.job, worker.WithLeaseDuration(time.Minute))
					return err
				}); err != nil {
					t.Fatal(err)
				}
				if l.Token().Generation != 2 {
					t.Fatalf("w2's lease %v", l.Token())
				}
				if err := fx.Claim(ctx, l.Token()); err != nil {
					t.Fatal(err)
				}
			} else {
				testutil.WaitFor(t, 30*time.Second, "w1's lease deadline", func() bool { return time.Now().UnixNano() > deadline })
			}
			if _, err := io.WriteString(stdin, "go\n"); err != nil {
				t.Fatal(err)
			}
			if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			line, err = out.ReadString('\n')
			if strings.TrimSpace(line) != c.want {
				t.Fatalf("the resumed worker: %q %v, want %q", line, err, c.want)
			}
			if a, b := balances(t, pool); a != 100 || b != 100 {
				t.Fatalf("balances %d %d: the stale transfer was committed", a, b)
			}
		})
	}
}
