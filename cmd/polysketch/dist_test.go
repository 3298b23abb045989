package main

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/polysketch/polysketch/model"
	"github.com/polysketch/polysketch/train"
)

// onceComm is a train.Comm of goroutines good for one Allgather: what the
// start-up check needs.
type onceComm struct {
	rank int
	g    *onceGroup
}

type onceGroup struct {
	size int
	in   [][]byte
	wg   sync.WaitGroup
}

func newOnceGroup(k int) []train.Comm {
	g := &onceGroup{size: k, in: make([][]byte, k)}
	g.wg.Add(k)
	cs := make([]train.Comm, k)
	for r := range cs {
		cs[r] = &onceComm{r, g}
	}
	return cs
}

func (c *onceComm) Rank() int { return c.rank }
func (c *onceComm) Size() int { return c.g.size }
func (c *onceComm) Allgather(send, recv []byte) error {
	c.g.in[c.rank] = send
	c.g.wg.Done()
	c.g.wg.Wait()
	for r, b := range c.g.in {
		copy(recv[r*len(send):], b)
	}
	return nil
}
func (c *onceComm) Ialltoallv([]float32, []int, []int, []float32, []int, []int) (train.Request, error) {
	return nil, errors.New("not in this test")
}
func (c *onceComm) Allgatherv([]float32, []float32, []int, []int) error {
	return errors.New("not in this test")
}
func (c *onceComm) Allreduce([]float32) error { return errors.New("not in this test") }

// TestStartupCheck: ranks that differ, or that failed before the check,
// make every rank fail, rank 0 naming the rank and the difference, the
// others quiet (rank 0 reports).
func TestStartupCheck(t *testing.T) {
	parts := func(lr float64, tokens string) *startParts {
		tc := train.DefaultConfig()
		tc.LR = lr
		return &startParts{Model: model.DefaultConfig(), Train: tc, Tokens: tokens}
	}
	cases := []struct {
		name     string
		parts    []*startParts
		fail     []error
		rank0    string // "" for success
		othersOK bool
	}{
		{"same", []*startParts{parts(1e-3, "a"), parts(1e-3, "a"), parts(1e-3, "a")}, nil, "", true},
		{"flags", []*startParts{parts(1e-3, "a"), parts(1e-3, "a"), parts(2e-3, "a")}, nil, "rank 2 differs from rank 0 in train.lr: 0.001 vs 0.002", false},
		{"tokens", []*startParts{parts(1e-3, "a"), parts(1e-3, "b"), parts(1e-3, "a")}, nil, `rank 1 differs from rank 0 in tokens: "a" vs "b"`, false},
		{"failed", []*startParts{parts(1e-3, "a"), nil, parts(1e-3, "a")}, []error{nil, errors.New("corpus missing"), nil}, "rank 1 failed at start-up: corpus missing", false},
	}
	for _, c := range cases {
		comms := newOnceGroup(len(c.parts))
		errs := make([]error, len(comms))
		var wg sync.WaitGroup
		for r, comm := range comms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var fail error
				if c.fail != nil {
					fail = c.fail[r]
				}
				d := &distRun{comm: comm}
				errs[r] = d.check(fail, c.parts[r])
			}()
		}
		wg.Wait()
		switch {
		case c.rank0 == "" && errs[0] != nil:
			t.Errorf("%s: rank 0: %v", c.name, errs[0])
		case c.rank0 != "" && (errs[0] == nil || !strings.Contains(errs[0].Error(), c.rank0)):
			t.Errorf("%s: rank 0: %v, want %q", c.name, errs[0], c.rank0)
		}
		for r, err := range errs[1:] {
			if c.othersOK != (err == nil) {
				t.Errorf("%s: rank %d: %v", c.name, r+1, err)
			}
		}
	}
}
