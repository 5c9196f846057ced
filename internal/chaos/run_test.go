package chaos

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/maknow/tenure/streams"
)

// A run on a directory another run holds is refused before it starts or
// writes anything.
func TestRunRefusesDirInUse(t *testing.T) {
	dir := t.TempDir()
	l, err := streams.LockDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	bin, err := os.Executable() // any binary: nothing may start
	if err != nil {
		t.Fatal(err)
	}
	_, err = Run(context.Background(), Config{Tenure: bin, NatsServer: bin, Dir: dir, CoordinatorKills: 1})
	var le *streams.LockedError
	if !errors.As(err, &le) || le.Dir != dir || le.Holder.PID != os.Getpid() {
		t.Fatalf("Run on a directory in use: %v, want a *LockedError naming this process", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("the refused run wrote into the directory: %v", ents)
	}
}
