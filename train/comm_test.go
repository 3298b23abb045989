package train

import (
	"fmt"
	"sync"
)

// localComm is a Comm of goroutines in one process, for tests: each
// collective deposits every rank's arguments, then each rank reads what
// it needs once all have arrived.
type localComm struct {
	rank int
	g    *localGroup
}

type localGroup struct {
	size int
	mu   sync.Mutex
	cond *sync.Cond
	gen  int   // collectives completed
	in   []any // this collective's arguments, by rank
	n    int   // ranks arrived
	out  int   // ranks done reading
}

func newLocalGroup(size int) []*localComm {
	g := &localGroup{size: size, in: make([]any, size)}
	g.cond = sync.NewCond(&g.mu)
	cs := make([]*localComm, size)
	for r := range cs {
		cs[r] = &localComm{rank: r, g: g}
	}
	return cs
}

// exchange deposits arg and calls read with every rank's argument once all
// ranks have deposited theirs.
func (c *localComm) exchange(arg any, read func(all []any) error) error {
	g := c.g
	g.mu.Lock()
	for g.out > 0 { // the previous collective is still being read
		g.cond.Wait()
	}
	gen := g.gen
	g.in[c.rank] = arg
	g.n++
	if g.n == g.size {
		g.out = g.size
		g.gen++
		g.cond.Broadcast()
	}
	for g.gen == gen {
		g.cond.Wait()
	}
	g.mu.Unlock()
	err := read(g.in)
	g.mu.Lock()
	g.out--
	if g.out == 0 {
		g.n = 0
		g.cond.Broadcast()
	}
	g.mu.Unlock()
	return err
}

func (c *localComm) Rank() int { return c.rank }
func (c *localComm) Size() int { return c.g.size }

func (c *localComm) Allgather(send, recv []byte) error {
	return c.exchange(send, func(all []any) error {
		for r, a := range all {
			b := a.([]byte)
			if len(b) != len(send) {
				return fmt.Errorf("size mismatch: rank %d sends %d bytes, rank %d %d", c.rank, len(send), r, len(b))
			}
			copy(recv[r*len(send):], b)
		}
		return nil
	})
}

type a2a struct {
	send           []float32
	counts, displs []int
}

type doneRequest struct{}

func (doneRequest) Test() (bool, error) { return true, nil }
func (doneRequest) Wait() error         { return nil }

// Ialltoallv completes at once: every rank posts the same collectives in
// the same order, which is all a blocking exchange needs.
func (c *localComm) Ialltoallv(send []float32, sendCounts, sendDispls []int, recv []float32, recvCounts, recvDispls []int) (Request, error) {
	err := c.exchange(a2a{send, sendCounts, sendDispls}, func(all []any) error {
		for r, a := range all {
			x := a.(a2a)
			blk := x.send[x.displs[c.rank]:][:x.counts[c.rank]]
			if len(blk) != recvCounts[r] {
				return fmt.Errorf("rank %d sends %d floats to rank %d, which expects %d", r, len(blk), c.rank, recvCounts[r])
			}
			copy(recv[recvDispls[r]:], blk)
		}
		return nil
	})
	return doneRequest{}, err
}

func (c *localComm) Allgatherv(send, recv []float32, counts, displs []int) error {
	return c.exchange(send, func(all []any) error {
		for r, a := range all {
			copy(recv[displs[r]:][:counts[r]], a.([]float32))
		}
		return nil
	})
}

func (c *localComm) Allreduce(buf []float32) error {
	sum := make([]float32, len(buf))
	err := c.exchange(append([]float32(nil), buf...), func(all []any) error {
		for _, a := range all {
			for i, v := range a.([]float32) {
				sum[i] += v
			}
		}
		return nil
	})
	copy(buf, sum)
	return err
}
