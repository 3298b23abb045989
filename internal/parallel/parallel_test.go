package parallel

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// procs are the GOMAXPROCS values the tests run at: fewer and more
// threads than this machine has cores.
var procs = TestThreads

func withProcs(n int, f func()) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(n))
	f()
}

func TestRunVisitsEachIndexOnce(t *testing.T) {
	for _, p := range procs {
		withProcs(p, func() {
			for _, tc := range []struct{ n, workers int }{{0, 2}, {1, 2}, {7, 1}, {7, 3}, {100, 8}, {1000, 64}} {
				counts := make([]int32, tc.n)
				busy := make([]atomic.Int32, max(tc.workers, 1))
				Run(tc.n, tc.workers, func(w, i int) {
					if w < 0 || w >= min(tc.workers, tc.n) {
						t.Errorf("procs=%d n=%d workers=%d: worker index %d", p, tc.n, tc.workers, w)
						return
					}
					if busy[w].Add(1) != 1 {
						t.Errorf("procs=%d n=%d workers=%d: two calls with w=%d at once", p, tc.n, tc.workers, w)
					}
					atomic.AddInt32(&counts[i], 1)
					busy[w].Add(-1)
				})
				for i, c := range counts {
					if c != 1 {
						t.Fatalf("procs=%d n=%d workers=%d: index %d visited %d times", p, tc.n, tc.workers, i, c)
					}
				}
			}
		})
	}
}

// TestRunUsesThePool checks that a phase's items run on as many
// goroutines as it asks for, when GOMAXPROCS allows, also when the
// pool's goroutines have parked: each item waits until all have started,
// which fewer goroutines could never see.
func TestRunUsesThePool(t *testing.T) {
	for _, n := range []int{2, 8} {
		withProcs(n, func() {
			for round := range 3 {
				if round > 0 {
					time.Sleep(20 * spinFor) // long enough for the pool to park
				}
				var started, late atomic.Int32
				Run(n, n, func(w, i int) {
					started.Add(1)
					deadline := time.Now().Add(5 * time.Second)
					for started.Load() < int32(n) {
						if time.Now().After(deadline) {
							late.Add(1)
							return
						}
						runtime.Gosched()
					}
				})
				if late.Load() > 0 {
					t.Fatalf("GOMAXPROCS=%d, round %d: %d items of %d waited 5 s for the others to start", n, round, late.Load(), n)
				}
			}
		})
	}
}

// TestRunNestedAndConcurrent runs phases inside the items of others, from
// several goroutines at once: every item must run once, and none of it may
// deadlock.
func TestRunNestedAndConcurrent(t *testing.T) {
	for _, p := range procs {
		withProcs(p, func() {
			var wg sync.WaitGroup
			var total atomic.Int64
			for range 4 {
				wg.Go(func() {
					for range 20 {
						Run(6, 4, func(_, i int) {
							For(5, func(j int) { total.Add(int64(i*5 + j + 1)) })
						})
					}
				})
			}
			wg.Wait()
			// Each phase adds 1+2+…+30.
			if want := int64(4 * 20 * 30 * 31 / 2); total.Load() != want {
				t.Fatalf("procs=%d: sum %d, want %d", p, total.Load(), want)
			}
		})
	}
}

// TestRunReturnsAfterItsItems runs many phases from several goroutines at
// once, with items long enough that callers sleep (past spinFor) while
// the pool's goroutines finish theirs, and checks that every call
// returns only after all of its items ran: a pool that let a finished
// goroutine touch a job its caller had already recycled woke the job's
// next caller early (and once hung a test under qemu).
func TestRunReturnsAfterItsItems(t *testing.T) {
	rounds := 400
	if testing.Short() {
		rounds = 100
	}
	// A goroutine of the pool pauses now and then between its decrement
	// and acting on it, the window in which the caller may move on.
	var hook atomic.Int32
	pauseSome := func() {
		if hook.Add(1)%7 == 0 {
			time.Sleep(200 * time.Microsecond)
		}
	}
	testHookDone.Store(&pauseSome)
	defer testHookDone.Store(nil)
	withProcs(4, func() {
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() {
				var done [6]atomic.Int32
				for r := range rounds {
					for i := range done {
						done[i].Store(0)
					}
					Run(len(done), 4, func(_, i int) {
						if (g+r+i)%3 == 0 {
							for t0 := time.Now(); time.Since(t0) < 3*spinFor; {
							}
						}
						done[i].Store(1)
					})
					for i := range done {
						if done[i].Load() != 1 {
							t.Errorf("caller %d, phase %d: Run returned before item %d ran", g, r, i)
							return
						}
					}
				}
			})
		}
		wg.Wait()
	})
}

// TestRunPanic checks that an item's panic on the calling goroutine (item
// 0 always runs there) reaches the caller and leaves the pool working.
func TestRunPanic(t *testing.T) {
	withProcs(2, func() {
		func() {
			defer func() {
				if v := recover(); v != "item 0" {
					t.Errorf("recovered %v, want the item's panic", v)
				}
			}()
			Run(4, 2, func(w, i int) {
				if i == 0 {
					if w != 0 {
						t.Errorf("item 0 ran on goroutine %d, not the caller", w)
					}
					panic("item 0")
				}
			})
		}()
		var n atomic.Int32
		Run(100, 2, func(_, _ int) { n.Add(1) })
		if n.Load() != 100 {
			t.Fatalf("after a panic: %d items of 100 ran", n.Load())
		}
	})
}

type counter struct {
	n  atomic.Int64
	fn func(w, i int)
}

func (c *counter) item(w, i int) { c.n.Add(1) }

// TestRunAllocates nothing for a phase whose function is made once.
func TestRunAllocatesNothing(t *testing.T) {
	withProcs(2, func() {
		c := &counter{}
		c.fn = c.item
		Run(64, 2, c.fn) // start the pool
		if a := testing.AllocsPerRun(100, func() { Run(64, 2, c.fn) }); a != 0 {
			t.Fatalf("%v allocations per Run", a)
		}
	})
}

func TestChunks(t *testing.T) {
	for _, tc := range []struct{ n, grain, workers, want int }{
		{0, 10, 4, 1},
		{5, 10, 4, 1},
		{100, 10, 1, 4},
		{100, 10, 2, 8},
		{100, 10, 16, 10},
		{100, 0, 16, 64},
	} {
		if got := Chunks(tc.n, tc.grain, tc.workers); got != tc.want {
			t.Errorf("Chunks(%d, %d, %d) = %d, want %d", tc.n, tc.grain, tc.workers, got, tc.want)
		}
	}
}

func TestProfile(t *testing.T) {
	withProcs(1, func() {
		StartProfile(16)
		if Threads() != 16 {
			t.Errorf("Threads() = %d in a profile of width 16", Threads())
		}
		for range 3 {
			Run(40, Threads(), func(_, _ int) { time.Sleep(100 * time.Microsecond) })
		}
		Run(1, Threads(), func(_, _ int) {
			For(8, func(int) {})
		})
		time.Sleep(2 * time.Millisecond)
		r := StopProfile()
		if Threads() != 1 {
			t.Errorf("Threads() = %d after the profile at GOMAXPROCS=1", Threads())
		}
		if r.Width != 16 || r.Threads != 1 || len(r.Phases) != 3 {
			t.Fatalf("report %+v, want width 16 and three phases", r)
		}
		var big, one, nested *Phase
		for i := range r.Phases {
			switch ph := &r.Phases[i]; {
			case ph.Nested:
				nested = ph
			case ph.MaxItems == 40:
				big = ph
			case ph.MaxItems == 1:
				one = ph
			}
		}
		if big == nil || big.Calls != 3 || big.Items != 120 || big.MinItems != 40 || big.Serial != 0 {
			t.Fatalf("phase of 40 items: %+v", big)
		}
		if one == nil || one.Serial != one.Time || nested == nil || nested.Items != 8 {
			t.Fatalf("phases %+v", r.Phases)
		}
		// The 2 ms sleep and the phase of one item are serial.
		if s := r.Serial(); s < 2*time.Millisecond || s != r.Total-big.Time {
			t.Errorf("serial %v of %v, the big phase %v", s, r.Total, big.Time)
		}
		if b := r.Bound(16); b >= r.Total || b <= r.Serial() {
			t.Errorf("bound at 16 threads %v, serial %v, total %v", b, r.Serial(), r.Total)
		}
		if !contains(big.Site, "parallel.TestProfile") {
			t.Errorf("site %q, want TestProfile", big.Site)
		}
	})
}

// TestProfileThreads profiles on more threads than one: the outermost
// phases are recorded, with their items, and the phases nested in their
// items, which overlap there, are not.
func TestProfileThreads(t *testing.T) {
	withProcs(4, func() {
		StartProfile(4)
		for range 2 {
			Run(40, Threads(), func(_, _ int) { time.Sleep(100 * time.Microsecond) })
		}
		Run(4, Threads(), func(_, _ int) {
			For(8, func(int) { time.Sleep(10 * time.Microsecond) })
		})
		r := StopProfile()
		if r.Width != 4 || r.Threads != 4 || len(r.Phases) != 2 {
			t.Fatalf("report %+v, want width 4, 4 threads and two phases", r)
		}
		for _, ph := range r.Phases {
			if ph.Nested || ph.Serial != 0 || !contains(ph.Site, "parallel.TestProfileThreads") {
				t.Errorf("phase %+v: want an outermost parallel phase of TestProfileThreads", ph)
			}
			if want := map[int]int{40: 2, 4: 1}[ph.MaxItems]; ph.Calls != want || ph.MinItems != ph.MaxItems {
				t.Errorf("phase %+v: want 2 calls of 40 items or 1 of 4", ph)
			}
		}
		if s := r.Serial(); s < 0 || s >= r.Total {
			t.Errorf("serial %v of %v", s, r.Total)
		}
	})
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// BenchmarkRun times phases back to back: of tiny items, the cost of
// handing out a phase to the pool's goroutines and waiting for them; of
// items of about 10 µs of arithmetic (work), how close the phases come to
// items·10 µs / threads.
func BenchmarkRun(b *testing.B) {
	for _, n := range []int{2, 64} {
		b.Run(fmt.Sprintf("items=%d", n), func(b *testing.B) {
			c := &counter{}
			c.fn = c.item
			for b.Loop() {
				Run(n, Threads(), c.fn)
			}
		})
	}
	for _, n := range []int{2, 8} {
		b.Run(fmt.Sprintf("work/items=%d", n), func(b *testing.B) {
			sums := make([]float64, n*8)
			fn := func(_, i int) {
				s := 1.0
				for k := range 10000 {
					s = s*1.0000001 + float64(k&7)
				}
				sums[i*8] = s
			}
			for b.Loop() {
				Run(n, Threads(), fn)
			}
		})
	}
}
