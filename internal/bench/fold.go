package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/projector"
)

// benchEpoch is the stored time of the first input of the pure scenarios.
const benchEpoch = int64(1_800_000_000) * 1e9

// fold is scenario 4: the fold alone, decoding included, on one core
// (GOMAXPROCS=1, so the garbage collector shares it too), over a steady
// state of 10,000 leases renewed in turn, one lease per input. The figure is
// per second of CPU time: on a shared machine the wall clock also counts the
// time other processes held the core (that rate is reported too).
func (b *runner) fold(ctx context.Context) error {
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
	const jobs = 10_000
	p := projector.New()
	seq := uint64(0)
	subjects := make([]string, jobs)
	leaseIDs := make([]string, jobs)
	for k := range jobs {
		seq++
		actor, job := "w"+strconv.Itoa(k%64), "job-"+strconv.Itoa(k)
		ds, err := p.Step(events.Raw{Seq: seq, Time: benchEpoch,
			Subject: events.InputSubject(events.RoleWorker, actor, job, events.VerbAcquire), Body: []byte(`{"v":1,"lease_ms":3600000}`)})
		if err != nil {
			return err
		}
		subjects[k] = events.InputSubject(events.RoleWorker, actor, job, events.VerbRenew)
		leaseIDs[k] = ds[0].Job.LeaseID
	}
	run := func(d time.Duration, encode bool) (wall, cpu float64, err error) {
		var body, buf []byte
		n := 0
		t0, c0 := time.Now(), cpuTime()
		deadline := t0.Add(d)
		for i := 0; ; i++ {
			if i&1023 == 0 && (time.Now().After(deadline) || ctx.Err() != nil) {
				break
			}
			k := i % jobs
			// Building the body is counted in: conservative.
			body = append(body[:0], `{"v":1,"lease_id":"`...)
			body = append(body, leaseIDs[k]...)
			body = append(body, `","generation":1,"renew_seq":`...)
			body = strconv.AppendUint(body, seq, 10)
			body = append(body, '}')
			seq++
			ds, err := p.Step(events.Raw{Seq: seq, Time: benchEpoch + int64(seq)*1000, Subject: subjects[k], Body: body})
			if err != nil {
				return 0, 0, err
			}
			if ds[0].Kind != events.KindRenewed {
				return 0, 0, fmt.Errorf("fold: %s/%s", ds[0].Kind, ds[0].Reason)
			}
			if encode {
				for j := range ds {
					buf = events.AppendDecision(buf[:0], &ds[j])
				}
			}
			n++
		}
		return float64(n) / time.Since(t0).Seconds(), float64(n) / (cpuTime() - c0).Seconds(), nil
	}
	stop := b.profile("fold")
	wall, cpu, err := run(b.cfg.FoldDuration, false)
	stop()
	if err != nil {
		return err
	}
	_, enc, err := run(b.cfg.FoldDuration/2, true)
	if err != nil {
		return err
	}
	r := b.res
	r.FoldPerS, r.FoldWallPerS, r.FoldEncodePerS = cpu, wall, enc
	b.logf("  fold (decode included, 1 core): %.0f inputs per CPU second (%.0f per wall-clock second); with encoding: %.0f per CPU second", cpu, wall, enc)
	return nil
}

// memory is scenario 5: resident bytes per job with MemJobs jobs in the
// projection, each with a live one-hour lease acquired by one of 1,000
// workers.
func (b *runner) memory(ctx context.Context) error {
	n := b.cfg.MemJobs
	settle := func() (rss uint64, heap uint64) {
		runtime.GC()
		debug.FreeOSMemory()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return residentBytes(), m.HeapAlloc
	}
	rss0, heap0 := settle()
	p := projector.New()
	var body []byte
	for i := range n {
		if i&4095 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		subj := events.InputSubject(events.RoleWorker, "w"+strconv.Itoa(i%1000), "job-"+strconv.Itoa(i), events.VerbAcquire)
		body = append(body[:0], `{"v":1,"lease_ms":3600000}`...)
		if _, err := p.Step(events.Raw{Seq: uint64(i + 1), Time: benchEpoch + int64(i)*1000, Subject: subj, Body: body}); err != nil {
			return err
		}
	}
	rss1, heap1 := settle()
	if p.Len() != n {
		return fmt.Errorf("projection holds %d jobs, want %d", p.Len(), n)
	}
	if b.cfg.ProfileDir != "" {
		if f, err := os.Create(filepath.Join(b.cfg.ProfileDir, "memory.heap.pprof")); err == nil {
			_ = pprof.WriteHeapProfile(f)
			f.Close()
		}
	}
	runtime.KeepAlive(p)
	r := b.res
	r.MemJobs = float64(n)
	r.BytesPerJob = float64(int64(rss1)-int64(rss0)) / float64(n)
	r.HeapBytesPerJob = float64(int64(heap1)-int64(heap0)) / float64(n)
	b.logf("  memory: %d jobs: %.0f resident bytes per job (%.0f live heap bytes)", n, r.BytesPerJob, r.HeapBytesPerJob)
	return nil
}

// residentBytes is the process's resident set size (0 without /proc).
func residentBytes() uint64 {
	data, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(data))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseUint(f[1], 10, 64)
	return pages * uint64(os.Getpagesize())
}

// cpuTime is the user+system CPU time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
