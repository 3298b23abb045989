package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/polysketch/polysketch/train"
)

// distRun is this process's part of a data-parallel train under mpirun;
// nil when the process trains alone. Its methods work on a nil distRun,
// as a single process.
type distRun struct {
	comm     train.Comm
	abort    func(code int)
	finalize func() error
	checked  bool // train.Start ran: every rank is past the agreement
	started  bool // training started: a failure must end every rank
}

// errReported is the error of a rank other than 0 whose failure rank 0
// reports: main exits non-zero without printing it again.
var errReported = errors.New("failure reported by rank 0")

// rank returns the process's rank, 0 for a single process.
func (d *distRun) rank() int {
	if d == nil {
		return 0
	}
	return d.comm.Rank()
}

// output returns w on rank 0 and io.Discard on the others, which print
// nothing.
func (d *distRun) output(w io.Writer) io.Writer {
	if d.rank() != 0 {
		return io.Discard
	}
	return w
}

// startAgreement notes that train.Start, about to be called, takes part
// in the ranks' start-up agreement.
func (d *distRun) startAgreement() {
	if d != nil {
		d.checked = true
	}
}

// startTraining notes that the ranks started training: a failure must
// end them all.
func (d *distRun) startTraining() {
	if d != nil {
		d.started = true
	}
}

// commOrNil returns the process's train.Comm, nil for a single process.
func (d *distRun) commOrNil() train.Comm {
	if d == nil {
		return nil
	}
	return d.comm
}

// finish ends the process's part: if the ranks' start-up agreement has
// not run (an error came before train.Start), it withdraws from it with
// the error, so that the other ranks learn of it instead of waiting; a
// failure after training started aborts every rank. It then shuts MPI
// down. Deferred by runTrain with its error.
func (d *distRun) finish(errp *error) {
	if d == nil {
		return
	}
	help := errors.Is(*errp, flag.ErrHelp)
	if !d.checked {
		*errp = train.Withdraw(d.comm, *errp)
	}
	if errors.Is(*errp, train.ErrStartup) {
		*errp = errReported // rank 0 says why
	}
	if *errp != nil && d.started && !errors.Is(*errp, errReported) {
		fmt.Fprintf(os.Stderr, "polysketch: rank %d: %v; ending every rank\n", d.rank(), *errp)
		d.abort(1)
	}
	if *errp != nil && !d.started && !help {
		// Every rank failed the start-up check together. Rank 0 prints
		// the reason now, and no rank leaves before it has: mpirun ends
		// the job as soon as one rank exits non-zero, which could kill
		// rank 0 before it printed.
		if d.rank() == 0 && !errors.Is(*errp, errReported) {
			fmt.Fprintln(os.Stderr, "polysketch:", *errp)
			*errp = errReported
		}
		one := []byte{0}
		d.comm.Allgather(one, make([]byte, d.comm.Size())) // a barrier; its own failure changes nothing
	}
	if err := d.finalize(); err != nil && *errp == nil {
		*errp = err
	}
	if help {
		*errp = flag.ErrHelp // -h: rank 0 printed the usage; every rank exits 0
	} else if d.rank() != 0 && *errp != nil && !errors.Is(*errp, errReported) {
		fmt.Fprintf(os.Stderr, "polysketch: rank %d: %v\n", d.rank(), *errp)
		*errp = errReported
	}
}
