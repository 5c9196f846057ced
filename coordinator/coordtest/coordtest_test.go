package coordtest_test

import (
	"testing"
	"time"

	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/coordinator/coordtest"
	"github.com/maknow/tenure/internal/testutil"
)

func TestDocs(t *testing.T) { testutil.RequireDocs(t, ".") }

func TestRunGroup(t *testing.T) {
	srv := testutil.StartServer(t)
	nc, _ := testutil.Connect(t, srv.ClientURL())
	g := coordtest.RunGroup(t, coordinator.Config{ID: "c1", Conn: nc, LeaderTTL: time.Second}, 3, 15*time.Second)
	for k, st := range g.Stats() {
		if !st.Live {
			t.Errorf("partition %d not live", k)
		}
	}
}
