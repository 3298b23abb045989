package serve

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"

	"golang.org/x/sys/cpu"

	"github.com/polysketch/polysketch/blas"
	"github.com/polysketch/polysketch/internal/atomicfile"
	"github.com/polysketch/polysketch/internal/regular"
	"github.com/polysketch/polysketch/model"
)

// The prefix cache on disk (Options.CacheDir): one file, written at
// shutdown through a temporary file renamed over the old one, and read
// back at start. It opens with a header naming what the states belong to
// (a digest of the model's configuration and weights, the tokenizer, the
// block size and the arithmetic of this machine, since a state computed
// with other kernels would not be the bits a cold start computes here);
// then the entries, least recently used first, each its token prefix and
// snapshot with a CRC-32C of both. A file whose header does not match is
// ignored; one that is damaged anywhere is ignored whole, with one log
// line: its states are never used.

// cacheFile is the name of the cache file in Options.CacheDir.
const cacheFile = "prefix-cache.bin"

// cacheMagic opens a cache file; the digit is the format's version.
const cacheMagic = "PSKPFX01"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// startCache gives l's scheduler a prefix cache if the options ask for
// one and the model's decoding state can be copied, filled from
// Options.CacheDir when it holds a cache of this model.
func (s *Server) startCache(l *loaded) {
	o := &s.opts
	if o.CacheMemory <= 0 {
		return
	}
	seq, err := l.m.NewSequence()
	if err == nil {
		_, err = seq.Snapshot()
	}
	if err != nil {
		o.Logger.Warn("prefix cache off: this model's decoding state cannot be copied", "error", err)
		return
	}
	c := newPrefixCache(o.PrefillChunk, o.CacheMemory, s.cacheMetrics)
	c.kvRow = l.kvRow
	if o.CacheDir != "" && !l.hasWeights {
		o.Logger.Warn("prefix cache not kept across restarts: the model's float32 weights, which name it in the file, were released before the server got it (set Options.Precision instead)")
	} else if o.CacheDir != "" {
		c.id = cacheIdentity(l, o.PrefillChunk)
		path := filepath.Join(o.CacheDir, cacheFile)
		switch n, err := c.load(path, c.id, l.m); {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			o.Logger.Warn("prefix cache file ignored", "file", path, "error", err)
		default:
			o.Logger.Info("prefix cache read", "file", path, "entries", n, "bytes", c.used)
		}
	}
	l.sched.cache = c
}

// CheckCacheDir makes the directory dir for Options.CacheDir if need be
// and checks that files can be written in it, so that a directory that
// SaveCache could not write at shutdown is refused at start.
func CheckCacheDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("cache directory: %w", err)
	}
	f, err := os.CreateTemp(dir, "."+cacheFile+".check*")
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return fmt.Errorf("cache directory %s is not writable (%v): the prefix cache is written there at shutdown; choose another directory or make it writable", dir, err)
	}
	f.Close()
	os.Remove(f.Name())
	return nil
}

// SaveCache writes the prefix cache to Options.CacheDir, if both are set.
// Call it after Close.
func (s *Server) SaveCache() error {
	l := s.loaded()
	if l == nil || l.sched.cache == nil || s.opts.CacheDir == "" {
		return nil
	}
	path := filepath.Join(s.opts.CacheDir, cacheFile)
	if err := l.sched.cache.save(path, l.sched.cache.id); err != nil {
		return fmt.Errorf("prefix cache: writing %s: %w", path, err)
	}
	return nil
}

// cacheIdentity is the digest that a cache file must name to be used by
// l with blocks of block tokens.
func cacheIdentity(l *loaded, block int) [32]byte {
	h := sha256.New()
	cfg, _ := l.m.Config().MarshalJSON()
	fmt.Fprintf(h, "%s\n%s\ntokenizer %s\nblock %d\n", cacheMagic, cfg, l.tok.Name(), block)
	// The arithmetic: the kernels blas and vec choose depend on these.
	fmt.Fprintf(h, "%s %v %v %v %v %q %q\n", runtime.GOARCH, cpu.X86.HasAVX512F, cpu.X86.HasAVX2, cpu.X86.HasFMA, cpu.X86.HasBMI2,
		os.Getenv("POLYSKETCH_NOASM"), os.Getenv("POLYSKETCH_KERNEL"))
	fmt.Fprintf(h, "precision %s bf16 kernel %s\n", l.m.Precision(), blas.KernelBF16())
	h.Write(l.weights[:])
	var id [32]byte
	h.Sum(id[:0])
	return id
}

// weightDigest hashes the names, shapes and float32 values of m's
// parameters; ok is false if some of those values were released (bf16
// inference), so that they cannot name the model.
func weightDigest(m *model.Model) (d [32]byte, ok bool) {
	h := sha256.New()
	var buf []byte
	for _, p := range m.Params() {
		if len(p.Value.Data) != p.Value.Len() {
			return d, false
		}
		fmt.Fprintf(h, "%s %v\n", p.Name, p.Value.Shape)
		buf = buf[:0]
		for _, x := range p.Value.Data {
			buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(x))
		}
		h.Write(buf)
	}
	h.Sum(d[:0])
	return d, true
}

// save writes every state of the cache to path, least recently used
// first.
func (c *prefixCache) save(path string, id [32]byte) error {
	return atomicfile.Write(path, func(w io.Writer) error {
		bw := bufio.NewWriterSize(w, 1<<20)
		hdr := append([]byte(cacheMagic), id[:]...)
		hdr = binary.LittleEndian.AppendUint32(hdr, uint32(c.block))
		hdr = binary.LittleEndian.AppendUint32(hdr, crc32.Checksum(hdr, castagnoli))
		bw.Write(hdr)
		var entry []byte
		for e := c.lru.Back(); e != nil; e = e.Prev() {
			n := e.Value.(*node)
			if n.snap == nil {
				continue
			}
			var path []string
			for p := n; p.parent != nil; p = p.parent {
				path = append(path, p.key)
			}
			slices.Reverse(path)
			entry = binary.LittleEndian.AppendUint64(entry[:0], 0) // the length, below
			entry = binary.LittleEndian.AppendUint32(entry, uint32(len(path)*c.block))
			for _, k := range path {
				entry = append(entry, k...)
			}
			var err error
			if entry, err = n.snap.AppendBinary(entry); err != nil {
				return err
			}
			binary.LittleEndian.PutUint64(entry, uint64(len(entry)-8))
			entry = binary.LittleEndian.AppendUint32(entry, crc32.Checksum(entry, castagnoli))
			if _, err := bw.Write(entry); err != nil {
				return err
			}
		}
		return bw.Flush()
	})
}

// load reads the states of a cache file written by save for the model
// of identity id, checking the whole file before keeping any of it, and
// returns how many it kept (the budget may drop the oldest).
func (c *prefixCache) load(path string, id [32]byte, m *model.Model) (int, error) {
	f, err := regular.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	left := st.Size()
	r := bufio.NewReaderSize(f, 1<<20)
	hdr := make([]byte, len(cacheMagic)+32+4+4)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return 0, errors.New("truncated header")
	}
	left -= int64(len(hdr))
	body := len(hdr) - 4
	switch {
	case string(hdr[:len(cacheMagic)]) != cacheMagic:
		return 0, errors.New("not a prefix cache file of this version")
	case binary.LittleEndian.Uint32(hdr[body:]) != crc32.Checksum(hdr[:body], castagnoli):
		return 0, errors.New("header checksum mismatch: the file is damaged")
	case [32]byte(hdr[len(cacheMagic):len(cacheMagic)+32]) != id:
		return 0, errors.New("written for another model, tokenizer, prefill chunk or CPU")
	case binary.LittleEndian.Uint32(hdr[len(cacheMagic)+32:]) != uint32(c.block):
		return 0, errors.New("written for another prefill chunk")
	}
	seq, err := m.NewSequence()
	if err != nil {
		return 0, err
	}
	vocab := m.Config().Vocab
	type entry struct {
		tokens []int32
		snap   *model.Snapshot
	}
	var entries []entry
	var total int64
	for i := 0; left > 0; i++ {
		bad := func(format string, args ...any) (int, error) {
			return 0, fmt.Errorf("entry %d: %s", i, fmt.Sprintf(format, args...))
		}
		var lb [8]byte
		if _, err := io.ReadFull(r, lb[:]); err != nil {
			return bad("truncated")
		}
		size := binary.LittleEndian.Uint64(lb[:])
		left -= 8
		// Checked before allocating: the entry must fit in what the file
		// has left, and in the budget.
		if size < 4 || size > uint64(left) || uint64(left)-size < 4 || size > uint64(c.budget) {
			return bad("length %d with %d bytes left in the file and a budget of %d", size, left, c.budget)
		}
		buf := make([]byte, 8+size+4)
		copy(buf, lb[:])
		if _, err := io.ReadFull(r, buf[8:]); err != nil {
			return bad("truncated")
		}
		left -= int64(size) + 4
		if binary.LittleEndian.Uint32(buf[8+size:]) != crc32.Checksum(buf[:8+size], castagnoli) {
			return bad("checksum mismatch: the file is damaged")
		}
		b := buf[8 : 8+size]
		n := binary.LittleEndian.Uint32(b)
		b = b[4:]
		if n == 0 || n%uint32(c.block) != 0 || uint64(n)*4 > uint64(len(b)) {
			return bad("a prefix of %d tokens", n)
		}
		tokens := make([]int32, n)
		for k := range tokens {
			t := int32(binary.LittleEndian.Uint32(b[4*k:]))
			if t < 0 || int(t) >= vocab {
				return bad("token %d outside the vocabulary", t)
			}
			tokens[k] = t
		}
		snap := &model.Snapshot{}
		if err := snap.UnmarshalBinary(b[4*n:]); err != nil {
			return bad("%v", err)
		}
		if snap.Len() != int(n) {
			return bad("a state at position %d for a prefix of %d tokens", snap.Len(), n)
		}
		if err := seq.Check(snap); err != nil {
			return bad("%v", err)
		}
		// Older entries beyond the budget would be evicted at once: keep
		// at most a budget's worth while reading.
		entries = append(entries, entry{tokens, snap})
		total += snap.Bytes()
		for total > c.budget {
			total -= entries[0].snap.Bytes()
			entries = entries[1:]
		}
	}
	for _, e := range entries {
		c.insert(e.tokens, e.snap)
	}
	return c.entries, nil
}
