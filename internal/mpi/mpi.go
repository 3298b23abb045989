//go:build mpi

package mpi

/*
#cgo pkg-config: ompi
#include <stdlib.h>
#include <mpi.h>

static int initSerialized(int *provided) { return MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, provided); }
static int errorsReturn(void) { return MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN); }
static int worldRank(int *r) { return MPI_Comm_rank(MPI_COMM_WORLD, r); }
static int worldSize(int *s) { return MPI_Comm_size(MPI_COMM_WORLD, s); }
static int barrier(void) { return MPI_Barrier(MPI_COMM_WORLD); }
static int abortWorld(int code) { return MPI_Abort(MPI_COMM_WORLD, code); }
static int allgatherBytes(void *send, int n, void *recv) {
	return MPI_Allgather(send, n, MPI_BYTE, recv, n, MPI_BYTE, MPI_COMM_WORLD);
}
static int allgatherInt(int v, int *recv) {
	return MPI_Allgather(&v, 1, MPI_INT, recv, 1, MPI_INT, MPI_COMM_WORLD);
}
static int allgathervFloat(float *send, int n, float *recv, int *counts, int *displs) {
	return MPI_Allgatherv(send, n, MPI_FLOAT, recv, counts, displs, MPI_FLOAT, MPI_COMM_WORLD);
}
static int alltoallvFloat(float *send, int *sc, int *sd, float *recv, int *rc, int *rd) {
	return MPI_Alltoallv(send, sc, sd, MPI_FLOAT, recv, rc, rd, MPI_FLOAT, MPI_COMM_WORLD);
}
static int ialltoallvFloat(float *send, int *sc, int *sd, float *recv, int *rc, int *rd, MPI_Request *req) {
	return MPI_Ialltoallv(send, sc, sd, MPI_FLOAT, recv, rc, rd, MPI_FLOAT, MPI_COMM_WORLD, req);
}
static int allreduceFloat(float *buf, int n) {
	return MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}
static int testReq(MPI_Request *req, int *done) { return MPI_Test(req, done, MPI_STATUS_IGNORE); }
static int waitReq(MPI_Request *req) { return MPI_Wait(req, MPI_STATUS_IGNORE); }
static int errorString(int code, char *buf) {
	int n = 0;
	MPI_Error_string(code, buf, &n);
	return n;
}
static int isInitialized(void) { int f = 0; MPI_Initialized(&f); return f; }
static int isFinalized(void) { int f = 0; MPI_Finalized(&f); return f; }
static int finalize(void) { return MPI_Finalize(); }
*/
import "C"

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"unsafe"
)

// Enabled reports whether this build has MPI (the build tag mpi).
const Enabled = true

// Init starts MPI (MPI_Init_thread, serialized calls) and locks the calling
// goroutine to its thread: make every later call from that goroutine. MPI
// errors are returned, not fatal. Init may be called once per process:
// MPI cannot start again after Finalize.
func Init() error {
	if C.isInitialized() != 0 {
		return errors.New("mpi: Init called twice")
	}
	if C.isFinalized() != 0 {
		return errors.New("mpi: Init after Finalize: MPI cannot be restarted in one process")
	}
	runtime.LockOSThread()
	var provided C.int
	if err := check("MPI_Init_thread", C.initSerialized(&provided)); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	// Every call comes from the locked thread: funneled is enough.
	if provided < C.MPI_THREAD_FUNNELED {
		return fmt.Errorf("mpi: the MPI library provides thread level %d; need at least MPI_THREAD_FUNNELED", provided)
	}
	return check("MPI_Comm_set_errhandler", C.errorsReturn())
}

// Initialized reports whether Init has run and Finalize has not.
func Initialized() bool { return C.isInitialized() != 0 && C.isFinalized() == 0 }

// Finalize shuts MPI down; every rank must call it before exiting.
func Finalize() error {
	if !Initialized() {
		return ErrNotInitialized
	}
	err := check("MPI_Finalize", C.finalize())
	runtime.UnlockOSThread()
	return err
}

// Comm is MPI_COMM_WORLD: every rank of the job.
type Comm struct {
	rank, size int
}

// World returns the communicator of every rank of the job.
func World() (*Comm, error) {
	if !Initialized() {
		return nil, ErrNotInitialized
	}
	var r, s C.int
	if err := check("MPI_Comm_rank", C.worldRank(&r)); err != nil {
		return nil, err
	}
	if err := check("MPI_Comm_size", C.worldSize(&s)); err != nil {
		return nil, err
	}
	return &Comm{rank: int(r), size: int(s)}, nil
}

// Rank returns this process's rank, 0 to Size()-1.
func (c *Comm) Rank() int { return c.rank }

// Size returns the number of ranks.
func (c *Comm) Size() int { return c.size }

// Barrier returns once every rank has called it.
func (c *Comm) Barrier() error {
	if !Initialized() {
		return ErrNotInitialized
	}
	return check("MPI_Barrier", C.barrier())
}

// Abort ends every rank of the job with the exit code code; it does not
// return.
func (c *Comm) Abort(code int) {
	C.abortWorld(C.int(code))
}

// Allgather sets recv to the concatenation, in rank order, of every
// rank's send. Every rank must send as many bytes; a rank that does not
// gets an error naming the sizes, on every rank.
func (c *Comm) Allgather(send, recv []byte) error {
	if !Initialized() {
		return ErrNotInitialized
	}
	if err := c.sameSize(len(send), "Allgather"); err != nil {
		return err
	}
	if len(recv) != len(send)*c.size {
		return fmt.Errorf("mpi: Allgather: receive buffer of %d bytes for %d ranks of %d bytes", len(recv), c.size, len(send))
	}
	if len(send) == 0 {
		return nil
	}
	return check("MPI_Allgather", C.allgatherBytes(unsafe.Pointer(&send[0]), C.int(len(send)), unsafe.Pointer(&recv[0])))
}

// sameSize checks that every rank passes the same n.
func (c *Comm) sameSize(n int, op string) error {
	if n > math.MaxInt32 {
		return fmt.Errorf("mpi: %s of %d elements: more than MPI's int count", op, n)
	}
	all := make([]C.int, c.size)
	if err := check("MPI_Allgather", C.allgatherInt(C.int(n), &all[0])); err != nil {
		return err
	}
	for r, m := range all {
		if int(m) != int(all[0]) {
			return fmt.Errorf("mpi: %s: size mismatch between ranks: rank 0 sends %d, rank %d sends %d", op, all[0], r, m)
		}
	}
	return nil
}

// Allgatherv gathers every rank's send (counts[r] floats from rank r) into
// recv at displs[r], in every rank.
func (c *Comm) Allgatherv(send, recv []float32, counts, displs []int) error {
	if !Initialized() {
		return ErrNotInitialized
	}
	if err := c.layout("Allgatherv", recv, counts, displs); err != nil {
		return err
	}
	if len(send) != counts[c.rank] {
		return fmt.Errorf("mpi: Allgatherv: rank %d sends %d floats, its count is %d", c.rank, len(send), counts[c.rank])
	}
	ci, free := cInts(counts, displs)
	defer free()
	return check("MPI_Allgatherv", C.allgathervFloat(fptr(send), C.int(len(send)), fptr(recv), ci[0], ci[1]))
}

// Alltoallv sends send[sendDispls[r]:][:sendCounts[r]] to rank r and
// receives rank r's block into recv[recvDispls[r]:][:recvCounts[r]].
func (c *Comm) Alltoallv(send []float32, sendCounts, sendDispls []int, recv []float32, recvCounts, recvDispls []int) error {
	if !Initialized() {
		return ErrNotInitialized
	}
	if err := c.layout("Alltoallv send", send, sendCounts, sendDispls); err != nil {
		return err
	}
	if err := c.layout("Alltoallv receive", recv, recvCounts, recvDispls); err != nil {
		return err
	}
	ci, free := cInts(sendCounts, sendDispls, recvCounts, recvDispls)
	defer free()
	return check("MPI_Alltoallv", C.alltoallvFloat(fptr(send), ci[0], ci[1], fptr(recv), ci[2], ci[3]))
}

// Request is a collective under way.
type Request struct {
	req  *C.MPI_Request
	pin  runtime.Pinner
	free func()
	done bool
}

// Ialltoallv starts an Alltoallv and returns at once. send and recv must
// not be touched until the Request is complete (Test or Wait).
func (c *Comm) Ialltoallv(send []float32, sendCounts, sendDispls []int, recv []float32, recvCounts, recvDispls []int) (*Request, error) {
	if !Initialized() {
		return nil, ErrNotInitialized
	}
	if err := c.layout("Ialltoallv send", send, sendCounts, sendDispls); err != nil {
		return nil, err
	}
	if err := c.layout("Ialltoallv receive", recv, recvCounts, recvDispls); err != nil {
		return nil, err
	}
	ci, free := cInts(sendCounts, sendDispls, recvCounts, recvDispls)
	r := &Request{req: (*C.MPI_Request)(C.malloc(C.size_t(unsafe.Sizeof(C.MPI_Request(nil)))))}
	r.free = func() { free(); C.free(unsafe.Pointer(r.req)) }
	// MPI reads and writes the buffers after this call returns.
	if len(send) > 0 {
		r.pin.Pin(&send[0])
	}
	if len(recv) > 0 {
		r.pin.Pin(&recv[0])
	}
	if err := check("MPI_Ialltoallv", C.ialltoallvFloat(fptr(send), ci[0], ci[1], fptr(recv), ci[2], ci[3], r.req)); err != nil {
		r.release()
		return nil, err
	}
	return r, nil
}

func (r *Request) release() {
	r.done = true
	r.pin.Unpin()
	r.free()
}

// Test reports whether the request is complete, letting MPI progress it.
func (r *Request) Test() (bool, error) {
	if r.done {
		return true, nil
	}
	var done C.int
	if err := check("MPI_Test", C.testReq(r.req, &done)); err != nil {
		r.release()
		return true, err
	}
	if done != 0 {
		r.release()
	}
	return r.done, nil
}

// Wait returns once the request is complete.
func (r *Request) Wait() error {
	if r.done {
		return nil
	}
	err := check("MPI_Wait", C.waitReq(r.req))
	r.release()
	return err
}

// Allreduce sums buf over every rank, in place, in the order MPI's
// algorithm chooses (so not bitwise reproducible across sizes).
func (c *Comm) Allreduce(buf []float32) error {
	if !Initialized() {
		return ErrNotInitialized
	}
	if len(buf) == 0 {
		return nil
	}
	return check("MPI_Allreduce", C.allreduceFloat(fptr(buf), C.int(len(buf))))
}

// layout checks per-rank counts and displacements against a buffer.
func (c *Comm) layout(op string, buf []float32, counts, displs []int) error {
	if len(counts) != c.size || len(displs) != c.size {
		return fmt.Errorf("mpi: %s: %d counts and %d displacements for %d ranks", op, len(counts), len(displs), c.size)
	}
	for r := range counts {
		if counts[r] < 0 || displs[r] < 0 || displs[r]+counts[r] > len(buf) || len(buf) > math.MaxInt32 {
			return fmt.Errorf("mpi: %s: block %d [%d, %d) outside the buffer of %d floats", op, r, displs[r], displs[r]+counts[r], len(buf))
		}
	}
	return nil
}

// cInts copies int slices into C memory, which MPI may keep using until a
// nonblocking call completes; free releases it.
func cInts(s ...[]int) ([]*C.int, func()) {
	out := make([]*C.int, len(s))
	for i, v := range s {
		p := (*C.int)(C.malloc(C.size_t(max(1, len(v)) * int(unsafe.Sizeof(C.int(0))))))
		a := unsafe.Slice(p, max(1, len(v)))
		for j, x := range v {
			a[j] = C.int(x)
		}
		out[i] = p
	}
	return out, func() {
		for _, p := range out {
			C.free(unsafe.Pointer(p))
		}
	}
}

// fptr returns a pointer to buf's first element, or a dummy for an empty
// buffer (MPI reads nothing of it).
func fptr(buf []float32) *C.float {
	if len(buf) == 0 {
		var dummy C.float
		return &dummy
	}
	return (*C.float)(unsafe.Pointer(&buf[0]))
}

// check turns an MPI error code into an error.
func check(op string, code C.int) error {
	if code == C.MPI_SUCCESS {
		return nil
	}
	buf := (*C.char)(C.malloc(C.MPI_MAX_ERROR_STRING))
	defer C.free(unsafe.Pointer(buf))
	n := C.errorString(code, buf)
	return fmt.Errorf("mpi: %s: %s", op, C.GoStringN(buf, n))
}
