package train

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/polysketch/polysketch/model"
	"github.com/polysketch/polysketch/nn"
	"github.com/polysketch/polysketch/optim"
	"github.com/polysketch/polysketch/vec"
)

// Comm is the group of processes a data-parallel run trains on, one
// trainer in each (package internal/mpi provides one over MPI). Every
// method is a collective: every rank calls it, in the same order.
type Comm interface {
	Rank() int
	Size() int
	// Allgather sets recv to every rank's send, in rank order; every
	// rank sends as many bytes.
	Allgather(send, recv []byte) error
	// Ialltoallv starts sending send[sendDispls[r]:][:sendCounts[r]] to
	// rank r and receiving rank r's block into
	// recv[recvDispls[r]:][:recvCounts[r]]; the buffers belong to the
	// request until it is complete.
	Ialltoallv(send []float32, sendCounts, sendDispls []int, recv []float32, recvCounts, recvDispls []int) (Request, error)
	// Allgatherv gathers counts[r] floats of rank r into recv at displs[r].
	Allgatherv(send, recv []float32, counts, displs []int) error
	// Allreduce sums buf over the ranks in place, in an order of the
	// implementation's choosing (for comparison only: not reproducible).
	Allreduce(buf []float32) error
}

// Request is a communication under way.
type Request interface {
	// Test reports whether the request is complete, letting it progress.
	Test() (bool, error)
	// Wait returns once it is complete.
	Wait() error
}

// DistOptions tune a data-parallel run (Run.Comm).
//
// The global batch of a step is Accum micro-batches of Batch sequences, as
// in a single process; Accum must be a multiple of the number of ranks.
// Rank r computes micro-batches r, r+K, r+2K, … of the sequence a single
// process draws, and the gradients are summed in micro-batch order, so
// that the losses and weights are bitwise those of one process with the
// same configuration, for any number of ranks. Every rank applies the
// same update; rank 0 alone validates and writes the run's files.
type DistOptions struct {
	// NoOverlap sends each micro-batch's gradients only once its whole
	// backward pass is done, instead of layer by layer as they are made.
	NoOverlap bool
	// Allreduce sums the gradients with the communication library's own
	// all-reduce: faster on some networks, but its summation order, and so
	// the last bits of the weights, depend on the number of ranks.
	Allreduce bool
}

// Rank returns the trainer's rank in a data-parallel run, 0 otherwise.
func (t *Trainer) Rank() int {
	if t.dist == nil {
		return 0
	}
	return t.dist.comm.Rank()
}

// writes reports whether this trainer writes the run's files: the only
// one, or rank 0 of a data-parallel run.
func (t *Trainer) writes() bool { return t.Rank() == 0 }

// CommWait returns the time this trainer has spent waiting on
// communication: for the gradients, the losses and the stop flags.
func (t *Trainer) CommWait() time.Duration {
	if t.dist == nil {
		return 0
	}
	return t.dist.wait
}

// stopErr returns the error that stops Run before the next step: ctx's,
// or in a data-parallel run, context.Canceled once any rank was
// interrupted, agreed on by all of them in the last step, so that every
// rank stops after the same step.
func (t *Trainer) stopErr(ctx context.Context) error {
	if t.dist == nil {
		return ctx.Err()
	}
	t.dist.ctx = ctx
	if t.dist.stop {
		return context.Canceled
	}
	return nil
}

// bucket is a range of the flat gradient reduced together: the
// parameters of one layer, or what lies before or after the layers.
type bucket struct {
	lo, hi int // in the flat gradient
	// The rank-r chunk of the bucket is [lo+r·size, lo+(r+1)·size) cut at hi.
	size int
	recv []float32 // size floats from each rank, in rank order
	acc  []float32 // this rank's chunk of the summed gradient
	req  Request
}

// chunk returns the range of rank r's chunk of b, in the flat gradient.
func (b *bucket) chunk(r int) (lo, hi int) {
	lo = min(b.lo+r*b.size, b.hi)
	return lo, min(lo+b.size, b.hi)
}

// dist is the data-parallel part of a trainer.
type dist struct {
	comm    Comm
	opt     DistOptions
	params  []*nn.Param
	offset  []int // of each parameter in the flat gradient
	flat    []float32
	buckets []bucket
	layer   []int // bucket of each layer
	ctx     context.Context
	stop    bool          // a rank was interrupted: stop after this step
	wait    time.Duration // spent waiting on communication
	round   int           // micro-batch round under way
	posted  []bool        // buckets posted this round
	err     error         // first error of a hook
	// Scratch of the gathers.
	gather, mine []float32
	counts, disp []int
	lossBuf      []byte
}

// newDist makes the data-parallel part of a trainer of m whose trained
// parameters are params.
func newDist(comm Comm, opt DistOptions, m *model.Model, params []*nn.Param) *dist {
	d := &dist{comm: comm, opt: opt, params: params, ctx: context.Background()}
	n := 0
	for _, p := range d.params {
		d.offset = append(d.offset, n)
		n += p.Value.Len()
	}
	d.flat = make([]float32, n)
	// Buckets: the parameters before the first layer, each layer, and the
	// rest, by the names Model.Params gives them.
	L := m.Config().Layers
	d.layer = make([]int, L)
	cuts := []int{0}
	for i := range L {
		prefix := fmt.Sprintf("layers.%d.", i)
		first := -1
		for j, p := range d.params {
			if strings.HasPrefix(p.Name, prefix) {
				first = j
				break
			}
		}
		if first < 0 || d.offset[first] < cuts[len(cuts)-1] {
			cuts = []int{0} // unexpected names: one bucket
			d.opt.NoOverlap = true
			break
		}
		if d.offset[first] > cuts[len(cuts)-1] {
			cuts = append(cuts, d.offset[first])
		}
		d.layer[i] = len(cuts) - 1
	}
	if len(cuts) > 1 {
		// The end of the last layer: the first parameter after it.
		last := fmt.Sprintf("layers.%d.", L-1)
		for j := len(d.params) - 1; j >= 0; j-- {
			if strings.HasPrefix(d.params[j].Name, last) {
				if j+1 < len(d.params) {
					cuts = append(cuts, d.offset[j+1])
				}
				break
			}
		}
	}
	cuts = append(cuts, n)
	k := comm.Size()
	for i := 0; i+1 < len(cuts); i++ {
		lo, hi := cuts[i], cuts[i+1]
		size := (hi - lo + k - 1) / k
		d.buckets = append(d.buckets, bucket{lo: lo, hi: hi, size: size, recv: make([]float32, size*k), acc: make([]float32, size)})
	}
	d.posted = make([]bool, len(d.buckets))
	if !d.opt.NoOverlap && !d.opt.Allreduce {
		m.LayerDone = d.layerDone
	}
	return d
}

// copyGrads copies the gradients of the parameters in [lo, hi) of the
// flat gradient into it.
func (d *dist) copyGrads(lo, hi int) {
	for j, p := range d.params {
		o := d.offset[j]
		if o >= lo && o < hi {
			copy(d.flat[o:], p.Grad.Data)
		}
	}
}

// post copies bucket b's gradients and starts sending them to the ranks
// that own its chunks.
func (d *dist) post(b int) error {
	bk := &d.buckets[b]
	d.copyGrads(bk.lo, bk.hi)
	k, r := d.comm.Size(), d.comm.Rank()
	sc, sd, rc, rd := make([]int, k), make([]int, k), make([]int, k), make([]int, k)
	mlo, mhi := bk.chunk(r)
	for i := range k {
		lo, hi := bk.chunk(i)
		sc[i], sd[i] = hi-lo, lo
		rc[i], rd[i] = mhi-mlo, i*bk.size
	}
	req, err := d.comm.Ialltoallv(d.flat, sc, sd, bk.recv, rc, rd)
	if err != nil {
		return fmt.Errorf("gradient reduction: %w", err)
	}
	bk.req, d.posted[b] = req, true
	return nil
}

// layerDone is the model's hook: layer i's gradients are final, so its
// bucket can go while backward goes on; the requests under way are
// tested, which lets MPI progress them.
func (d *dist) layerDone(i int) {
	if d.err != nil {
		return
	}
	if d.err = d.post(d.layer[i]); d.err != nil {
		return
	}
	for b := range d.buckets {
		if d.posted[b] && d.buckets[b].req != nil {
			if _, err := d.buckets[b].req.Test(); err != nil {
				d.err = err
				return
			}
		}
	}
}

// finishRound sends what backward has not sent yet, waits for every
// bucket, and adds the round's gradients, rank by rank, into this rank's
// chunks: copied for the first micro-batch of the step, added after.
func (d *dist) finishRound(first bool) error {
	if d.err != nil {
		return d.err
	}
	for b := range d.buckets {
		if !d.posted[b] {
			if err := d.post(b); err != nil {
				return err
			}
		}
	}
	start := time.Now()
	for b := range d.buckets {
		bk := &d.buckets[b]
		if err := poll(bk.req); err != nil {
			return fmt.Errorf("gradient reduction: %w", err)
		}
		bk.req, d.posted[b] = nil, false
	}
	d.wait += time.Since(start)
	r := d.comm.Rank()
	for b := range d.buckets {
		bk := &d.buckets[b]
		lo, hi := bk.chunk(r)
		n := hi - lo
		acc := bk.acc[:n]
		for i := range d.comm.Size() {
			g := bk.recv[i*bk.size : i*bk.size+n]
			if first && i == 0 {
				copy(acc, g)
			} else {
				vec.Add(acc, acc, g)
			}
		}
	}
	return nil
}

// poll waits for req by testing it with growing pauses in between: a
// blocking wait would spin, taking a core from the other ranks (or other
// work) on a shared machine while a slower rank catches up. The pauses stop
// growing at 100µs because, without a progress thread, a transfer moves
// only while a rank is inside MPI: over TCP, longer pauses would slow it.
func poll(req Request) error {
	pause := 10 * time.Microsecond
	for {
		done, err := req.Test()
		if done || err != nil {
			return err
		}
		time.Sleep(pause)
		pause = min(2*pause, 100*time.Microsecond)
	}
}

// gatherGrads gathers the summed chunks of every rank into every
// parameter's gradient.
func (d *dist) gatherGrads() error {
	k, r := d.comm.Size(), d.comm.Rank()
	if d.counts == nil {
		d.counts, d.disp = make([]int, k), make([]int, k)
		off := 0
		for i := range k {
			d.disp[i] = off
			for b := range d.buckets {
				lo, hi := d.buckets[b].chunk(i)
				d.counts[i] += hi - lo
			}
			off += d.counts[i]
		}
		d.gather, d.mine = make([]float32, off), make([]float32, 0, d.counts[r])
	}
	d.mine = d.mine[:0]
	for b := range d.buckets {
		lo, hi := d.buckets[b].chunk(r)
		d.mine = append(d.mine, d.buckets[b].acc[:hi-lo]...)
	}
	start := time.Now()
	if err := d.comm.Allgatherv(d.mine, d.gather, d.counts, d.disp); err != nil {
		return fmt.Errorf("gradient gather: %w", err)
	}
	d.wait += time.Since(start)
	for i := range k {
		src := d.gather[d.disp[i]:]
		for b := range d.buckets {
			lo, hi := d.buckets[b].chunk(i)
			n := copy(d.flat[lo:hi], src)
			src = src[n:]
		}
	}
	d.scatter()
	return nil
}

// scatter copies the flat gradient into the parameters' gradients.
func (d *dist) scatter() {
	for j, p := range d.params {
		copy(p.Grad.Data, d.flat[d.offset[j]:])
	}
}

// allreduce sums this rank's gradients of the step over the ranks with
// the library's all-reduce (DistOptions.Allreduce).
func (d *dist) allreduce() error {
	d.copyGrads(0, len(d.flat))
	start := time.Now()
	if err := d.comm.Allreduce(d.flat); err != nil {
		return fmt.Errorf("gradient all-reduce: %w", err)
	}
	d.wait += time.Since(start)
	d.scatter()
	return nil
}

// gatherLosses gathers every rank's losses of the step (losses[j] is
// micro-batch j·K+rank) and its stop flag; it returns the losses in
// micro-batch order, into all, and whether any rank asked to stop.
func (d *dist) gatherLosses(losses, all []float64, stop bool) (bool, error) {
	k := d.comm.Size()
	per := len(losses)
	n := 8*per + 1
	if len(d.lossBuf) != n*(k+1) {
		d.lossBuf = make([]byte, n*(k+1))
	}
	send, recv := d.lossBuf[:n], d.lossBuf[n:]
	for j, l := range losses {
		binary.LittleEndian.PutUint64(send[8*j:], math.Float64bits(l))
	}
	send[n-1] = 0
	if stop {
		send[n-1] = 1
	}
	start := time.Now()
	if err := d.comm.Allgather(send, recv); err != nil {
		return false, fmt.Errorf("loss gather: %w", err)
	}
	d.wait += time.Since(start)
	any := false
	for r := range k {
		b := recv[r*n : (r+1)*n]
		for j := range per {
			all[j*k+r] = math.Float64frombits(binary.LittleEndian.Uint64(b[8*j:]))
		}
		any = any || b[n-1] != 0
	}
	return any, nil
}

// gradients computes the summed gradient of the step's Accum
// micro-batches into the parameters' gradients and returns the sum of
// their losses (in micro-batch order) and their tokens.
//
// Whether one process computes them or several, each micro-batch's
// gradient is computed from zero and the gradients are added in
// micro-batch order, g₀ + g₁ + … (the first copied, not added to zero),
// so that the sum has the same rounding for any number of ranks.
func (t *Trainer) gradients() (loss float64, tokens int64, err error) {
	params := t.Model.Params()
	A, d := t.Config.Accum, t.dist
	k, rank := 1, 0
	if d != nil {
		k, rank = d.comm.Size(), d.comm.Rank()
	}
	if cap(t.losses) < A {
		t.losses = make([]float64, A)
	}
	all := t.losses[:A]
	mine := t.mine[:0]
	for i := range A {
		if err := t.feed.next(&t.batch); err != nil {
			return 0, 0, fmt.Errorf("training data: %w", err)
		}
		tokens += int64(t.batch.B * t.batch.N)
		if i%k != rank {
			continue // another rank's micro-batch
		}
		optim.ZeroGrad(params)
		l := t.objective(t.Model, t.batch)
		if testHookLoss != nil {
			l = testHookLoss(t.opt.Step+1, l)
		}
		mine = append(mine, l)
		switch {
		case d != nil && d.opt.Allreduce:
			t.addLocal(i/k == 0)
		case d != nil:
			if err := d.finishRound(i < k); err != nil {
				return 0, 0, err
			}
		case A > 1:
			t.addLocal(i == 0)
		}
	}
	t.mine = mine
	switch {
	case d == nil:
		copy(all, mine)
		if A > 1 {
			t.restoreLocal()
		}
	default:
		stop := d.ctx.Err() != nil
		if d.stop, err = d.gatherLosses(mine, all, stop); err != nil {
			return 0, 0, err
		}
		if d.opt.Allreduce {
			t.restoreLocal()
			err = d.allreduce()
		} else {
			err = d.gatherGrads()
		}
		if err != nil {
			return 0, 0, err
		}
	}
	for _, l := range all {
		loss += l
	}
	return loss, tokens, nil
}

// addLocal adds the parameters' gradients into the local sum, or copies
// them there for the first micro-batch.
func (t *Trainer) addLocal(first bool) {
	params := t.params
	if len(t.acc) != len(params) {
		t.acc = make([][]float32, len(params))
		for j, p := range params {
			t.acc[j] = make([]float32, p.Grad.Len())
		}
	}
	for j, p := range params {
		if first {
			copy(t.acc[j], p.Grad.Data)
		} else {
			vec.Add(t.acc[j], t.acc[j], p.Grad.Data)
		}
	}
}

// restoreLocal copies the local sum into the parameters' gradients.
func (t *Trainer) restoreLocal() {
	for j, p := range t.params {
		copy(p.Grad.Data, t.acc[j])
	}
}
