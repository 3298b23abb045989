package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"

	"github.com/polysketch/polysketch/internal/atomicfile"
)

// cpuProfile is the --cpuprofile flag of the benchmarks: a CPU profile of
// the whole command, for go tool pprof.
type cpuProfile struct {
	path string
	buf  bytes.Buffer
}

func (p *cpuProfile) register(fs *flag.FlagSet) {
	fs.StringVar(&p.path, "cpuprofile", "", "write a CPU profile of the command to `FILE` (read it with go tool pprof)")
}

// start begins the profile, if one was asked for; the caller defers
// p.stop(&err), which writes it (whole, or not at all) and reports a
// failure to write it unless the command failed first.
func (p *cpuProfile) start() error {
	if p.path == "" {
		return nil
	}
	// Refuse a profile that could not be written before measuring, not after.
	if dir := filepath.Dir(p.path); !isDir(dir) {
		return fmt.Errorf("--cpuprofile %s: no directory %s to write it in", p.path, dir)
	}
	if err := pprof.StartCPUProfile(&p.buf); err != nil {
		return fmt.Errorf("--cpuprofile: %w", err)
	}
	return nil
}

func (p *cpuProfile) stop(err *error) {
	if p.path == "" {
		return
	}
	pprof.StopCPUProfile()
	if werr := atomicfile.WriteBytes(p.path, p.buf.Bytes()); werr != nil && *err == nil {
		*err = fmt.Errorf("--cpuprofile: %w", werr)
	}
}

// isDir reports whether path names a directory: where an output file is
// to be written, checked before minutes of measuring.
func isDir(path string) bool {
	info, err := os.Stat(path)
	return err == nil && info.IsDir()
}
