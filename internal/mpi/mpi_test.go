//go:build mpi

package mpi

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
)

// beforeInit is World's error before Init: it must be ErrNotInitialized.
var beforeInit error

// TestMain starts MPI for the tests; run them under mpirun with 2 or 4
// ranks (.ci/run does), or alone as a single rank.
func TestMain(m *testing.M) {
	_, beforeInit = World()
	if err := Init(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	if err := Finalize(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	if _, err := World(); !errors.Is(err, ErrNotInitialized) {
		fmt.Fprintf(os.Stderr, "World after Finalize: %v, want ErrNotInitialized\n", err)
		code = 1
	}
	if err := Finalize(); !errors.Is(err, ErrNotInitialized) {
		fmt.Fprintf(os.Stderr, "second Finalize: %v, want ErrNotInitialized\n", err)
		code = 1
	}
	os.Exit(code)
}

func world(t *testing.T) *Comm {
	t.Helper()
	c, err := World()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestNotInitialized(t *testing.T) {
	if !errors.Is(beforeInit, ErrNotInitialized) {
		t.Errorf("World before Init: %v, want ErrNotInitialized", beforeInit)
	}
	if err := Init(); err == nil {
		t.Error("a second Init succeeded")
	}
}

func TestWorld(t *testing.T) {
	c := world(t)
	if n, _ := Launched(); n > 0 && n != c.Size() {
		t.Errorf("Size() = %d, the launcher says %d", c.Size(), n)
	}
	if c.Rank() < 0 || c.Rank() >= c.Size() {
		t.Errorf("rank %d of %d", c.Rank(), c.Size())
	}
	if err := c.Barrier(); err != nil {
		t.Error(err)
	}
}

func TestAllgather(t *testing.T) {
	c := world(t)
	send := []byte{byte(c.Rank()), 7}
	recv := make([]byte, 2*c.Size())
	if err := c.Allgather(send, recv); err != nil {
		t.Fatal(err)
	}
	for r := range c.Size() {
		if recv[2*r] != byte(r) || recv[2*r+1] != 7 {
			t.Errorf("block %d = %v, want [%d 7]", r, recv[2*r:2*r+2], r)
		}
	}
}

// TestSizeMismatch: ranks that send different sizes all get an error
// naming the sizes, instead of a truncated message or a hang.
func TestSizeMismatch(t *testing.T) {
	c := world(t)
	if c.Size() < 2 {
		t.Skip("needs 2 ranks: run under mpirun -np 2")
	}
	send := make([]byte, 1+c.Rank())
	err := c.Allgather(send, make([]byte, len(send)*c.Size()))
	if err == nil || !strings.Contains(err.Error(), "size mismatch between ranks: rank 0 sends 1, rank 1 sends 2") {
		t.Errorf("Allgather of %d bytes on rank %d: %v", len(send), c.Rank(), err)
	}
	if err := c.Allgather([]byte{1}, make([]byte, 1)); c.Size() > 1 && err == nil {
		t.Error("a receive buffer too small was accepted")
	}
}

// TestAlltoallv checks the exchange the fixed-order reduction is made of:
// rank r sends r·10+j to rank j, in blocks of j+1 floats.
func TestAlltoallv(t *testing.T) {
	c := world(t)
	k, me := c.Size(), c.Rank()
	var send []float32
	sc, sd := make([]int, k), make([]int, k)
	for j := range k {
		sc[j], sd[j] = j+1, len(send)
		for range j + 1 {
			send = append(send, float32(me*10+j))
		}
	}
	rc, rd := make([]int, k), make([]int, k)
	for i := range k {
		rc[i], rd[i] = me+1, i*(me+1)
	}
	for _, async := range []bool{false, true} {
		recv := make([]float32, k*(me+1))
		if async {
			req, err := c.Ialltoallv(send, sc, sd, recv, rc, rd)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := req.Test(); err != nil {
				t.Fatal(err)
			}
			if err := req.Wait(); err != nil {
				t.Fatal(err)
			}
		} else if err := c.Alltoallv(send, sc, sd, recv, rc, rd); err != nil {
			t.Fatal(err)
		}
		for i := range k {
			for _, v := range recv[i*(me+1) : (i+1)*(me+1)] {
				if v != float32(i*10+me) {
					t.Errorf("async %v: from rank %d got %v, want %d", async, i, v, i*10+me)
				}
			}
		}
	}
	if err := c.Alltoallv(send, sc[:1], sd, nil, rc, rd); err == nil {
		t.Error("counts for one rank were accepted")
	}
}

func TestAllgathervAndAllreduce(t *testing.T) {
	c := world(t)
	k, me := c.Size(), c.Rank()
	counts, displs := make([]int, k), make([]int, k)
	n := 0
	for r := range k {
		counts[r], displs[r] = r+1, n
		n += r + 1
	}
	send := make([]float32, me+1)
	for i := range send {
		send[i] = float32(me)
	}
	recv := make([]float32, n)
	if err := c.Allgatherv(send, recv, counts, displs); err != nil {
		t.Fatal(err)
	}
	for r := range k {
		for _, v := range recv[displs[r] : displs[r]+counts[r]] {
			if v != float32(r) {
				t.Errorf("block of rank %d holds %v", r, v)
			}
		}
	}
	buf := []float32{1, float32(me)}
	if err := c.Allreduce(buf); err != nil {
		t.Fatal(err)
	}
	if want := float32(k * (k - 1) / 2); buf[0] != float32(k) || buf[1] != want {
		t.Errorf("Allreduce = %v, want [%d %v]", buf, k, want)
	}
}
