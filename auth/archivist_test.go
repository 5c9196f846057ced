package auth_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/maknow/tenure/archive"
	"github.com/maknow/tenure/audit"
	"github.com/maknow/tenure/auth"
	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/ops"
	"github.com/maknow/tenure/streams"
)

// Retention of the log under tenure auth init's configuration: the
// archivist archives a segment, removes it and restores the snapshot with
// its own permissions and without a violation; the coordinator, an
// operator and a worker cannot purge either stream (the server refuses, the
// streams keep every message).
func TestArchivistAlonePurges(t *testing.T) {
	as := append(append([]auth.Actor(nil), actors...), auth.Actor{Name: "arch", Role: auth.RoleArchivist})
	b := generate(t, auth.Options{Actors: as})
	srv := testutil.StartServer(t, testutil.ConfigFile(b.ServerConfigPath()))
	e := &env{b: b, srv: srv, url: srv.ClientURL()}
	top := streams.Topology{LogRetention: true}
	e.startCoordinator(t, coordinator.Config{Topology: top, SnapshotEvery: 5, SnapshotInterval: time.Hour})
	ctx := context.Background()
	dc := connect(t, e.b, e.url, "disp")
	d, err := ops.New(dc.nc, "disp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	for i := range 20 {
		if _, err := d.Offer(ctx, fmt.Sprintf("a%d", i), "w1", 60000, 0); err != nil {
			t.Fatal(err)
		}
	}
	e.caughtUp(t)
	testutil.WaitFor(t, 10*time.Second, "a snapshot", func() bool { return e.c.Stats().SnapshotSeq > 10 })

	// Nobody but the archivist may purge.
	w1 := connect(t, e.b, e.url, "w1")
	for who, c := range map[string]*client{"coord": e.coord, "disp": dc, "w1": w1} {
		for _, name := range []string{top.InputStream(), top.DecisionStream()} {
			c.errs.reset()
			api := "$JS.API.STREAM.PURGE." + name
			if who == "w1" {
				api = top.WorkerAPIPrefix() + ".STREAM.PURGE." + name
			}
			_, err := c.nc.Request(api, []byte(`{"seq":5}`), 300*time.Millisecond)
			if err == nil {
				t.Fatalf("%s purged %s", who, name)
			}
			if who != "w1" {
				c.errs.expectViolation(t, who, api)
			}
		}
	}
	info, err := e.coord.js.Stream(ctx, top.InputStream())
	if err != nil || info.CachedInfo().State.FirstSeq != 1 {
		t.Fatalf("input stream after refused purges: %v %+v", err, info.CachedInfo().State)
	}

	ac := connect(t, e.b, e.url, "arch")
	cfg := archive.Config{JS: ac.js, Topology: top, Root: t.TempDir(), StallTimeout: 10 * time.Second}
	res, err := archive.Archive(ctx, cfg)
	if err != nil || res.Segment == nil {
		t.Fatalf("archive as the archivist: %+v, %v", res, err)
	}
	rm, err := archive.Remove(ctx, cfg, 0)
	if err != nil || rm.Inputs == 0 {
		t.Fatalf("remove as the archivist: %+v, %v", rm, err)
	}
	if err := e.coord.js.DeleteStream(ctx, "OBJ_"+top.SnapshotBucket()); err == nil {
		t.Fatal("the coordinator deleted the snapshot bucket")
	}
	// The snapshot lost while no coordinator runs: the archivist puts the
	// archive's back, and a coordinator resumes on the trimmed log.
	e.stop()
	obs, err := ac.js.ObjectStore(ctx, top.SnapshotBucket())
	if err != nil {
		t.Fatal(err)
	}
	if err := obs.Delete(ctx, streams.SnapshotObject); err != nil {
		t.Fatalf("archivist: delete the snapshot: %v", err)
	}
	if r, err := archive.Restore(ctx, cfg); err != nil || r.Segment != 1 {
		t.Fatalf("restore as the archivist: %+v, %v", r, err)
	}
	e.startCoordinator(t, coordinator.Config{Topology: top, SnapshotEvery: 5, SnapshotInterval: time.Hour})
	if _, err := d.Offer(ctx, "after", "w1", 60000, 0); err != nil {
		t.Fatal(err)
	}
	e.caughtUp(t)
	rep, err := audit.Run(ctx, audit.Config{JS: ac.js, Topology: top, Archive: cfg.Root, StallTimeout: 10 * time.Second})
	if err != nil || !rep.OK() {
		t.Fatalf("audit as the archivist: %v %+v", err, rep)
	}
	ac.noViolations(t, "arch")
	e.coord.errs.reset()
}
