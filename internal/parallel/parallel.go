// Package parallel is the process's one pool of worker goroutines, shared
// by every parallel phase of polysketch: the products of blas, the work
// items of the attention mechanisms, the row passes of nn and model, the
// sequences of a decoding step. Its goroutines are started once, as many
// as GOMAXPROCS asks for, and stay: a phase hands its items to those that
// are idle instead of starting goroutines of its own.
//
// A phase is n independent items; Run hands them out one at a time to the
// calling goroutine and to up to workers−1 of the pool's, so that a slow
// item or a preempted thread delays only itself. Work is split by output,
// never by the order of a sum, so results are bitwise identical whatever
// the number of threads.
//
// Idle goroutines look for work for a short while (spin) before they
// park: the phases of a step follow each other within microseconds, and
// waking a parked goroutine costs more than that. Phases may nest (an item
// may run a phase of its own, which idle goroutines then help with) and
// may run concurrently from several goroutines.
package parallel

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Threads returns the number of threads a phase should plan its split
// for: GOMAXPROCS, or the width of the profile in progress (see
// StartProfile).
func Threads() int {
	if p := prof.Load(); p != nil {
		return p.width
	}
	return runtime.GOMAXPROCS(0)
}

// Run calls fn(w, i) for every i in [0, n), on the calling goroutine and
// up to workers−1 goroutines of the pool, and returns when every call has
// returned. w, in [0, min(workers, n)), identifies the goroutine among
// those running this phase, so that callers can keep scratch per w: no two
// calls with the same w run at once. Which w runs an item must not change
// its result. With one thread, or n ≤ 1, every call runs on the calling
// goroutine with w = 0.
//
// fn should be a value made once (a bound method kept in a field) where
// the phase runs often: a closure made per call is allocated.
func Run(n, workers int, fn func(w, i int)) {
	run(n, workers, fn, nil)
}

// For calls fn(i) for every i in [0, n) on up to Threads() goroutines, as
// Run.
func For(n int, fn func(i int)) {
	run(n, Threads(), nil, fn)
}

// Chunks returns how many items of at least grain units each n units of
// work should be split into for up to workers threads: workers·slack, so
// that dynamic hand-out evens out threads that run slower than others,
// but no more than n/grain, and at least 1. Use it for work with no
// natural item (elementwise passes over rows); the split it gives must
// not change results.
func Chunks(n, grain, workers int) int {
	return max(1, min(workers*slack, n/max(grain, 1)))
}

// slack is the number of items per thread Chunks aims for.
const slack = 4

func run(n, workers int, fn func(w, i int), fn1 func(i int)) {
	if n <= 0 {
		return
	}
	if p := prof.Load(); p != nil {
		defer p.end(p.begin(n, workers))
	}
	width := min(workers, n, runtime.GOMAXPROCS(0))
	if width <= 1 {
		for i := range n {
			if fn != nil {
				fn(0, i)
			} else {
				fn1(i)
			}
		}
		return
	}
	j := thePool.publish(n, width, fn, fn1)
	defer thePool.close(j)
	j.work(0, 0) // item 0 is the caller's: publish handed out from 1
}

// spinFor is how long an idle goroutine of the pool keeps looking for a
// new phase before it parks, and how long a phase's caller spins waiting
// for the items others are finishing before it sleeps. Waking a parked
// goroutine costs several µs (a futex), as much as a phase of a decoding
// step; the spin is short enough that the CPU time it takes stays a small
// part of a step (see docs/benchmarks.md, CPU time).
const spinFor = 50 * time.Microsecond

// A job is one call of Run in progress.
type job struct {
	fn    func(w, i int)
	fn1   func(i int)
	n     int64
	width int
	slots int          // goroutines admitted (under pool.mu), the caller included
	next  atomic.Int64 // the next item to hand out
	// state is twice the goroutines of the pool admitted and not yet
	// done, plus 1 while the caller sleeps on done until they are. One
	// word, so that a goroutine's decrement is its last touch of the job
	// unless it is the last one out and must wake the caller: with the
	// count and the flag apart, a goroutine could read the flag after its
	// decrement had let the caller recycle the job, and wake the job's
	// next caller too early (a step hung so under qemu in .ci/run).
	state atomic.Int64
	done  chan struct{}
	// wakes is how many parked goroutines the job still wants woken
	// (under pool.mu): the caller wakes wakeFanout, and each goroutine
	// it admits wakes as many more, so that waking many costs the
	// caller little and takes a few wake-ups' time, not one per thread.
	wakes int
}

// wakeFanout is how many parked goroutines the caller of a phase, and
// each goroutine it admits, wakes.
const wakeFanout = 2

// work runs item i of j, if i is one, and then the next items of j until
// none is left to hand out.
func (j *job) work(w int, i int64) {
	for ; i < j.n; i = j.next.Add(1) - 1 {
		if j.fn != nil {
			j.fn(w, int(i))
		} else {
			j.fn1(int(i))
		}
	}
}

// pool is the set of worker goroutines.
type pool struct {
	mu      sync.Mutex
	jobs    []*job    // open to new goroutines, newest last
	free    []*job    // done, for reuse
	parked  []*worker // waiting on their wake channel
	started int
	// gen counts publications (written under mu): an idle goroutine
	// spins until it changes.
	gen      atomic.Uint64
	spinning atomic.Int32 // idle goroutines spinning, not parked
}

type worker struct{ wake chan struct{} }

var thePool pool

// publish opens a job of n items for up to width goroutines, the caller
// being the first, and wakes parked goroutines for the others when no
// spinning ones will take them.
func (p *pool) publish(n, width int, fn func(w, i int), fn1 func(i int)) *job {
	p.mu.Lock()
	var j *job
	if k := len(p.free); k > 0 {
		j, p.free = p.free[k-1], p.free[:k-1]
	} else {
		j = &job{done: make(chan struct{}, 1)}
	}
	j.fn, j.fn1, j.n, j.width, j.slots = fn, fn1, int64(n), width, 1
	j.next.Store(1)
	p.jobs = append(p.jobs, j)
	p.gen.Add(1)
	for p.started < width-1 {
		p.started++
		go p.loop(&worker{wake: make(chan struct{}, 1)})
	}
	j.wakes = max(0, width-1-int(p.spinning.Load()))
	var wake [wakeFanout]*worker
	k := p.popParked(j, wake[:])
	p.mu.Unlock()
	for _, w := range wake[:k] {
		w.wake <- struct{}{}
	}
	return j
}

// close ends the caller's part of j: it stops the handing out of items,
// withdraws j from the goroutines looking for work, waits until those
// that joined it are done, and recycles it.
func (p *pool) close(j *job) {
	j.next.Store(j.n) // a panicking caller leaves items: hand out no more
	p.mu.Lock()
	for i, o := range p.jobs {
		if o == j {
			p.jobs = append(p.jobs[:i], p.jobs[i+1:]...)
			break
		}
	}
	j.wakes = 0
	p.mu.Unlock()
	// No goroutine joins j now; wait for those inside, spinning first:
	// they are finishing an item each.
	if j.state.Load() != 0 {
		c := startSpin()
		for spins := 0; j.state.Load() != 0; spins++ {
			if spins%clockEvery == clockEvery-1 && c.expired() {
				stats.sleeps.Add(1)
				j.sleep()
				break
			}
			c.wait(spins)
		}
		c.stop()
	}
	j.fn, j.fn1 = nil, nil
	p.mu.Lock()
	p.free = append(p.free, j)
	p.mu.Unlock()
}

// testHookDone, if set, runs in a goroutine of the pool between the
// decrement that ends its part of a job and its acting on what the
// decrement returned: tests widen that window with it. It is read in
// that window, when the caller may already have returned and the test
// reset it: hence an atomic.
var testHookDone atomic.Pointer[func()]

// sleep waits on done until the goroutines inside j are done, unless
// none is left.
func (j *job) sleep() {
	for {
		s := j.state.Load()
		if s == 0 {
			return
		}
		if j.state.CompareAndSwap(s, s|1) {
			<-j.done // the last one out saw the flag and wakes us
			j.state.Store(0)
			return
		}
	}
}

// loop is the life of one goroutine of the pool: join the newest open job
// that has items left and room, run its items, and when there is none,
// spin for a while, then park until woken.
func (p *pool) loop(me *worker) {
	for {
		gen := p.gen.Load()
		if j, w, i := p.join(); j != nil {
			j.work(w, i)
			s := j.state.Add(-2)
			if hook := testHookDone.Load(); hook != nil {
				(*hook)()
			}
			if s == 1 { // the last one out, the caller asleep
				j.done <- struct{}{}
			}
			continue
		}
		if p.spin(gen) {
			continue
		}
		p.mu.Lock()
		if p.gen.Load() != gen { // published since: look again
			p.mu.Unlock()
			continue
		}
		p.parked = append(p.parked, me)
		p.mu.Unlock()
		stats.parks.Add(1)
		<-me.wake
	}
}

// join admits the calling goroutine to the newest open job with items
// left and room for one more, returning it, the goroutine's index in it
// and the first item it takes, or nil. Taking the item here, not after
// waking others, keeps a goroutine that the OS preempts while it wakes
// them from holding up a phase whose items others have done: the caller
// waits for the goroutines admitted, and each holds an item. join wakes
// more parked goroutines for the job if it wants them.
func (p *pool) join() (*job, int, int64) {
	p.mu.Lock()
	for k := len(p.jobs) - 1; k >= 0; k-- {
		j := p.jobs[k]
		if j.slots >= j.width || j.next.Load() >= j.n {
			continue
		}
		if i := j.next.Add(1) - 1; i < j.n {
			w := j.slots
			j.slots++
			j.state.Add(2)
			var wake [wakeFanout]*worker
			n := p.popParked(j, wake[:])
			p.mu.Unlock()
			for _, o := range wake[:n] {
				o.wake <- struct{}{}
			}
			return j, w, i
		}
	}
	p.mu.Unlock()
	return nil, 0, 0
}

// popParked takes up to len(dst) parked goroutines that j still wants
// woken into dst, and returns how many; the caller holds p.mu and wakes
// them after releasing it.
func (p *pool) popParked(j *job, dst []*worker) int {
	n := min(len(dst), j.wakes, len(p.parked))
	for i := range n {
		dst[i] = p.parked[len(p.parked)-1-i]
	}
	p.parked = p.parked[:len(p.parked)-n]
	j.wakes -= n
	return n
}

// spin waits up to spinFor for a publication after gen, yielding the
// processor between looks, and reports whether one came.
func (p *pool) spin(gen uint64) bool {
	p.spinning.Add(1)
	c := startSpin()
	defer func() {
		p.spinning.Add(-1)
		c.stop()
	}()
	for spins := 0; ; spins++ {
		if p.gen.Load() != gen {
			return true
		}
		if spins%clockEvery == clockEvery-1 && c.expired() {
			return false
		}
		c.wait(spins)
	}
}

// spinClock times a spin: the wall time since it started, which ends it
// after spinFor, and the time it spent on a processor, for Stats. A gap
// longer than offCPU between two looks at the clock (clockEvery turns, a few
// µs) is time the OS ran other threads: the machine has more runnable
// threads than cores, where a spinning thread takes its share from the
// threads that work, this process's included, so the spin ends there too.
type spinClock struct {
	start, last time.Time
	on          time.Duration
}

const offCPU = 20 * time.Microsecond

func startSpin() spinClock {
	now := time.Now()
	return spinClock{start: now, last: now}
}

// expired reports whether the spin should end: spinFor has passed since
// it started, or the OS ran other threads in the last gap.
func (c *spinClock) expired() bool {
	now := time.Now()
	d := now.Sub(c.last)
	if d < offCPU {
		c.on += d
	}
	c.last = now
	return d >= offCPU || now.Sub(c.start) > spinFor
}

// wait is one turn of a spin: spin-wait hints, and every yieldEvery
// turns a yield to the goroutines waiting for this processor. A yield
// takes the runtime's scheduler lock: goroutines that yielded on every
// turn (as this pool first did) held up, on 16 cores, the ones that
// worked, and a third of a decoding step's CPU time went to that lock.
// Measured on 16 cores of a Xeon (docs/benchmarks.md), a batch of 16
// sequences decoded 1.6-1.7× as fast with these hints as with a yield a
// turn, one sequence 1.15-1.25×, training the same within noise.
func (c *spinClock) wait(spins int) {
	if spins%yieldEvery == yieldEvery-1 {
		runtime.Gosched()
		return
	}
	pause(pauses)
}

// pauses is the spin-wait hints of one turn (0.1-1 µs: PAUSE takes
// 10-140 cycles, by CPU), yieldEvery the turns between yields, and
// clockEvery the turns between looks at the clock, a few µs, inside
// offCPU.
const (
	pauses     = 16
	yieldEvery = 16
	clockEvery = 8
)

// stop adds the spin's time on a processor to Stats.
func (c *spinClock) stop() {
	c.expired()
	stats.spin.Add(int64(c.on))
}

// Stats counts what the pool has spent waiting since the process started.
type Stats struct {
	// Spin is the time goroutines spent spinning, on a processor: the
	// pool's, looking for a phase, and callers, waiting for the items
	// others finish. It is CPU time that does no work. (Time the OS gave
	// other threads meanwhile is left out, as well as it can be seen.)
	Spin time.Duration
	// Parks counts the pool's goroutines going to sleep for want of a
	// phase (each costs a wake later), Sleeps the callers that slept
	// waiting for others' items.
	Parks, Sleeps int64
}

var stats struct{ spin, parks, sleeps atomic.Int64 }

// ReadStats returns the pool's counts so far; differences of two
// measure a piece of work.
func ReadStats() Stats {
	return Stats{Spin: time.Duration(stats.spin.Load()), Parks: stats.parks.Load(), Sleeps: stats.sleeps.Load()}
}

// TestThreads are the GOMAXPROCS values at which the tests of the
// packages using the pool check that results do not change: one thread,
// fewer and more threads than a development machine's cores, and counts
// that split items unevenly.
var TestThreads = []int{1, 2, 3, 7, 16}
