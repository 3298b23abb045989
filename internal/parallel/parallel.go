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
	fn  func(w, i int)
	fn1 func(i int)
	// n is the items, next the next item to hand out. n is atomic
	// because a goroutine that found the job before it was recycled may
	// still look at it (and fail to join: see admit).
	n, next atomic.Int64
	// state is one word, so that joining, leaving and closing the job are
	// each one atomic step that no lock orders: the goroutines of the
	// pool join a phase without taking pool.mu, which 15 of them did at
	// once on 16 cores, each phase, in a queue the phase's caller had to
	// wait in to close it. Its fields:
	//
	//	bit 0        the caller sleeps on done until the admitted are done
	//	bit 1        closed: no goroutine may join
	//	bits 2–31    goroutines admitted and not yet done
	//	bits 32–47   goroutines admitted since the job opened
	//	bits 48–62   how many may be admitted (width − 1)
	//
	// A goroutine's departure is its last touch of the job unless it is
	// the last one out and must wake the caller: with the count and the
	// flag apart, a goroutine could read the flag after its decrement had
	// let the caller recycle the job, and wake the job's next caller too
	// early (a step hung so under qemu in .ci/run).
	state atomic.Int64
	done  chan struct{}
	// wakes is how many parked goroutines the job still wants woken
	// (changed under pool.mu): the caller wakes wakeFanout, and each
	// goroutine admitted wakes as many more, so that waking many costs
	// the caller little and takes a few wake-ups' time, not one per
	// thread. Atomic so that joining reads it without the lock.
	wakes atomic.Int32
}

// The fields of job.state.
const (
	asleep      = 1
	closed      = 2
	activeOne   = 4
	activeMask  = 1<<32 - activeOne
	admitShift  = 32
	admitMask   = 1<<16 - 1
	limitShift  = 48
	maxAdmitted = 1<<15 - 1 // widths beyond are capped (GOMAXPROCS of 32768)
)

// admit admits the calling goroutine to j, if it is open, has room and
// has items left, and hands it an item: it returns the goroutine's index
// in j and the item, or ok false. Taking the item here, not after waking
// others, keeps a goroutine that the OS preempts while it wakes them from
// holding up a phase whose items others have done: the caller waits for
// the goroutines admitted, and each holds an item.
func (j *job) admit() (w int, i int64, ok bool) {
	for {
		s := j.state.Load()
		admitted := s >> admitShift & admitMask
		if s&closed != 0 || admitted >= s>>limitShift || j.next.Load() >= j.n.Load() {
			return 0, 0, false
		}
		// The swap makes the fields publish wrote before it opened the
		// job (fn, n) visible here, and fails if the job closed (or was
		// recycled) since the load.
		if j.state.CompareAndSwap(s, s+1<<admitShift+activeOne) {
			w = int(admitted) + 1
			break
		}
	}
	if i := j.next.Add(1) - 1; i < j.n.Load() {
		return w, i, true
	}
	j.leave() // admitted, but the others took the last items
	return 0, 0, false
}

// leave ends an admitted goroutine's part of j, waking the caller if it
// sleeps and this was the last one out.
func (j *job) leave() {
	s := j.state.Add(-activeOne)
	if hook := testHookDone.Load(); hook != nil {
		(*hook)()
	}
	if s&activeMask == 0 && s&asleep != 0 {
		j.done <- struct{}{}
		// The caller is now runnable on this goroutine's processor,
		// where it would wait for this goroutine's next yield (up to a
		// spin's length) if every other processor spins: let it run.
		runtime.Gosched()
	}
}

// wakeFanout is how many parked goroutines the caller of a phase, and
// each goroutine it admits, wakes.
const wakeFanout = 2

// work runs item i of j, if i is one, and then the next items of j until
// none is left to hand out.
func (j *job) work(w int, i int64) {
	n := j.n.Load()
	for ; i < n; i = j.next.Add(1) - 1 {
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
	jobs    []*job              // open to new goroutines, newest last
	newest  atomic.Pointer[job] // jobs' last, which idle goroutines try first without mu
	open    atomic.Int32        // len(jobs)
	free    []*job              // done, for reuse
	parked  []*worker           // waiting on their wake channel
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
	j.fn, j.fn1 = fn, fn1
	j.n.Store(int64(n))
	j.next.Store(1)
	j.wakes.Store(int32(max(0, width-1-int(p.spinning.Load()))))
	j.state.Store(int64(min(width-1, maxAdmitted)) << limitShift) // open: last, after the fields it publishes
	p.jobs = append(p.jobs, j)
	p.newest.Store(j)
	p.open.Store(int32(len(p.jobs)))
	p.gen.Add(1)
	for p.started < width-1 {
		p.started++
		go p.loop(&worker{wake: make(chan struct{}, 1)})
	}
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
	j.next.Store(j.n.Load()) // a panicking caller leaves items: hand out no more
	j.state.Or(closed)
	p.mu.Lock()
	for i, o := range p.jobs {
		if o == j {
			p.jobs = append(p.jobs[:i], p.jobs[i+1:]...)
			break
		}
	}
	var last *job
	if k := len(p.jobs); k > 0 {
		last = p.jobs[k-1]
	}
	p.newest.Store(last)
	p.open.Store(int32(len(p.jobs)))
	j.wakes.Store(0)
	p.mu.Unlock()
	// No goroutine joins j now; wait for those inside, spinning first:
	// they are finishing an item each, or leaving one they were admitted
	// to as the last item went, which takes a few hints' time: the first
	// turns are of one hint.
	if j.state.Load()&activeMask != 0 {
		c := startSpin()
		for spins := 0; j.state.Load()&activeMask != 0; spins++ {
			if spins < quickTurns {
				pause(1)
				continue
			}
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
		if s&activeMask == 0 {
			return
		}
		if j.state.CompareAndSwap(s, s|asleep) {
			<-j.done // the last one out saw the flag and wakes us
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
			j.leave()
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
// and the first item it takes, or nil; and wakes more parked goroutines
// for the job if it wants them. The newest job is tried without the lock:
// phases mostly run one at a time.
func (p *pool) join() (*job, int, int64) {
	if j := p.newest.Load(); j != nil {
		if w, i, ok := j.admit(); ok {
			p.wakeFor(j)
			return j, w, i
		}
	}
	if p.open.Load() < 2 {
		return nil, 0, 0
	}
	p.mu.Lock()
	for k := len(p.jobs) - 1; k >= 0; k-- {
		j := p.jobs[k]
		if w, i, ok := j.admit(); ok {
			p.mu.Unlock()
			p.wakeFor(j)
			return j, w, i
		}
	}
	p.mu.Unlock()
	return nil, 0, 0
}

// wakeFor wakes up to wakeFanout parked goroutines for j, if it wants
// them.
func (p *pool) wakeFor(j *job) {
	if j.wakes.Load() <= 0 {
		return
	}
	var wake [wakeFanout]*worker
	p.mu.Lock()
	n := p.popParked(j, wake[:])
	p.mu.Unlock()
	for _, o := range wake[:n] {
		o.wake <- struct{}{}
	}
}

// popParked takes up to len(dst) parked goroutines that j still wants
// woken into dst, and returns how many; the caller holds p.mu and wakes
// them after releasing it.
func (p *pool) popParked(j *job, dst []*worker) int {
	n := min(len(dst), int(j.wakes.Load()), len(p.parked))
	for i := range n {
		dst[i] = p.parked[len(p.parked)-1-i]
	}
	p.parked = p.parked[:len(p.parked)-n]
	j.wakes.Add(int32(-n))
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
// sequences decoded 1.6-1.7× as fast with 16 hints a turn and a yield
// every 16 turns as with a yield a turn; then with a yield every 64 turns
// (on that Xeon about one a spin, whose turns take about 1 µs) and a
// yield to a caller woken by the last goroutine out (job.leave), one
// sequence 1.4× as fast again, 16 1.05-1.1×.
func (c *spinClock) wait(spins int) {
	if spins%yieldEvery == yieldEvery-1 {
		runtime.Gosched()
		return
	}
	pause(pauses)
}

// pauses is the spin-wait hints of one turn (0.1-1 µs: PAUSE takes
// 10-140 cycles, by CPU), yieldEvery the turns between yields, clockEvery
// the turns between looks at the clock, a few µs, inside offCPU, and
// quickTurns the turns of one hint that a phase's caller takes first.
const (
	pauses     = 16
	yieldEvery = 64
	clockEvery = 8
	quickTurns = 32
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
