package blas

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// helper computes one half of a two-way split product on a goroutine that
// stays awake for a while after each half: decoding a token runs a few
// dozen products of tens of µs each, and waking a parked goroutine for
// each one (a futex wake, several µs) costs more than the half it would
// take. The caller computes the other half meanwhile and, if the helper
// has not started when the caller is done, takes the half back; so a
// busy machine never waits on it. One product at a time uses it; others
// run serially.
type helper struct {
	mu    sync.Mutex   // held by the product using the helper
	state atomic.Int32 // of the posted half: idle, posted, running, done
	g     gemm         // the posted half: columns [lo, g.n) of g in form f
	f     smallForm
	lo    int
	bf16  bool // the posted half is hb instead (see splitBF16)
	hb    bf16Part
	awake atomic.Bool   // the goroutine is spinning, not parked
	ran   atomic.Int64  // halves the goroutine computed
	wake  chan struct{} // unparks it
	start sync.Once
}

const (
	halfIdle int32 = iota
	halfPosted
	halfRunning
	halfDone
)

// helperSpin is how long the helper keeps looking for work before it
// parks.
const helperSpin = 200 * time.Microsecond

var pairHelper helper

// split computes columns [0, mid) of g in form f on the calling
// goroutine and [mid, n) on the helper when it is free, and returns when
// both are done. It reports false, computing nothing, when the helper is
// in use.
func (h *helper) split(g *gemm, f smallForm, mid int) bool {
	if !h.mu.TryLock() {
		return false
	}
	defer h.mu.Unlock()
	h.g, h.f, h.lo, h.bf16 = *g, f, mid, false
	h.post()
	g.smallRange(f, 0, mid)
	if h.takeBack() {
		g.smallRange(f, mid, g.n)
	}
	h.g = gemm{} // drop the operands
	return true
}

// post hands the half set in h's fields to the goroutine (started on
// first use), waking it if it has parked.
func (h *helper) post() {
	h.start.Do(func() {
		h.wake = make(chan struct{}, 1)
		go h.loop()
	})
	h.state.Store(halfPosted)
	if !h.awake.Load() {
		select {
		case h.wake <- struct{}{}:
		default:
		}
	}
}

// takeBack ends the posted half once the caller's own is done: it
// reports true if the goroutine had not started it, which the caller
// must then compute, and otherwise waits until the goroutine is done.
func (h *helper) takeBack() bool {
	if h.state.CompareAndSwap(halfPosted, halfIdle) {
		return true
	}
	for h.state.Load() != halfDone {
		runtime.Gosched()
	}
	h.state.Store(halfIdle)
	return false
}

// splitBF16 is split for two parts of a bf16 product: first on the
// calling goroutine, second on the helper when it is free.
func (h *helper) splitBF16(first, second *bf16Part) bool {
	if !h.mu.TryLock() {
		return false
	}
	defer h.mu.Unlock()
	h.hb, h.bf16 = *second, true
	h.post()
	first.run()
	if h.takeBack() {
		second.run()
	}
	h.hb = bf16Part{} // drop the operands
	return true
}

func (h *helper) loop() {
	for {
		h.awake.Store(true)
		deadline := time.Now().Add(helperSpin)
		for spins := 0; ; spins++ {
			if h.state.CompareAndSwap(halfPosted, halfRunning) {
				if h.bf16 {
					h.hb.run()
				} else {
					h.g.smallRange(h.f, h.lo, h.g.n)
				}
				h.ran.Add(1)
				h.state.Store(halfDone)
				deadline = time.Now().Add(helperSpin)
				continue
			}
			if spins%64 == 63 {
				if time.Now().After(deadline) {
					break
				}
				runtime.Gosched()
			}
		}
		h.awake.Store(false)
		if h.state.Load() == halfPosted { // posted while it was giving up
			continue
		}
		<-h.wake
	}
}
