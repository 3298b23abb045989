package parallel

import (
	"cmp"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// A Report describes the parallel phases run while a profile was on: how
// much of the time they took, and how many items each had. It is meant
// for one goroutine running one piece of work (a training step). At
// GOMAXPROCS=1 the time outside phases is the serial part that more
// threads cannot shorten, and every phase is recorded, nested ones too.
// On more threads the items of a phase run on several goroutines at once,
// and the phases nested in them overlap: only the outermost phases,
// those the working goroutine calls itself, are recorded, so that each
// one's time can be set against its time on one thread.
type Report struct {
	Width   int           // the threads the phases planned for
	Threads int           // GOMAXPROCS while the profile ran
	Total   time.Duration // between StartProfile and StopProfile
	Phases  []Phase       // by time, longest first
}

// A Phase sums the calls of Run (or For) made from one place.
type Phase struct {
	Site string // the function and line that called Run, and the first caller outside its package
	// Nested phases ran inside an item of another phase; their time is
	// part of the outer phase's.
	Nested             bool
	Calls              int
	Items              int // over all calls
	MinItems, MaxItems int // of one call
	// Workers is the most goroutines one call asked for; a call of one
	// item, or one worker, runs serially.
	Workers int
	Time    time.Duration
	// Serial is the part of Time spent in calls that ran on one goroutine
	// only (one item or one worker).
	Serial time.Duration
}

// Serial returns the time spent outside parallel phases, counting calls
// of one item or one worker as outside.
func (r Report) Serial() time.Duration {
	s := r.Total
	for _, p := range r.Phases {
		if !p.Nested {
			s -= p.Time - p.Serial
		}
	}
	return s
}

// Bound returns the time Total would take on threads threads if the
// serial part stayed serial and every phase of k items ran k-fold faster,
// up to threads-fold (Amdahl's law, phase by phase): a bound that uneven
// items, memory bandwidth and waking goroutines keep real times above.
func (r Report) Bound(threads int) time.Duration {
	t := r.Serial()
	for _, p := range r.Phases {
		if p.Nested || p.Calls == 0 {
			continue
		}
		par := p.Time - p.Serial
		// Items per call as the average of a call, workers as asked.
		per := max(1, min(threads, p.Workers, p.Items/p.Calls))
		t += par / time.Duration(per)
	}
	return t
}

var prof atomic.Pointer[profile]

type profile struct {
	width   int
	threads int // GOMAXPROCS at the start; above 1, nested phases are not recorded
	start   time.Time
	mu      sync.Mutex
	depth   int
	stack   []region
	sites   map[string]*Phase
}

type region struct {
	start   time.Time
	site    string
	items   int
	workers int
}

// StartProfile starts recording the phases Run and For run, and makes
// Threads return width, so that phases split as they would on width
// threads whatever GOMAXPROCS is. It is for measurement: one goroutine
// should run phases while it is on, and no other should start any but
// the items of its phases (see Report).
func StartProfile(width int) {
	prof.Store(&profile{width: max(width, 1), threads: runtime.GOMAXPROCS(0), start: time.Now(), sites: map[string]*Phase{}})
}

// StopProfile ends the profile started by StartProfile and returns its
// report.
func StopProfile() Report {
	p := prof.Swap(nil)
	if p == nil {
		return Report{}
	}
	r := Report{Width: p.width, Threads: p.threads, Total: time.Since(p.start)}
	for _, ph := range p.sites {
		r.Phases = append(r.Phases, *ph)
	}
	slices.SortFunc(r.Phases, func(a, b Phase) int {
		return cmp.Or(cmp.Compare(b.Time, a.Time), strings.Compare(a.Site, b.Site))
	})
	return r
}

// begin opens the region of a call of Run and reports whether it is
// recorded: end must be given what it returned.
func (p *profile) begin(n, workers int) bool {
	p.mu.Lock()
	nested := p.depth > 0
	p.depth++
	p.mu.Unlock()
	if nested && p.threads > 1 {
		return false
	}
	site := callSite()
	p.mu.Lock()
	p.stack = append(p.stack, region{site: site, items: n, workers: workers, start: time.Now()})
	p.mu.Unlock()
	return true
}

func (p *profile) end(recorded bool) {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.depth--
	if !recorded {
		return
	}
	r := p.stack[len(p.stack)-1]
	p.stack = p.stack[:len(p.stack)-1]
	ph := p.sites[r.site]
	if ph == nil {
		ph = &Phase{Site: r.site, MinItems: r.items}
		p.sites[r.site] = ph
	}
	d := now.Sub(r.start)
	ph.Nested = ph.Nested || p.depth > 0
	ph.Calls++
	ph.Items += r.items
	ph.MinItems = min(ph.MinItems, r.items)
	ph.MaxItems = max(ph.MaxItems, r.items)
	ph.Workers = max(ph.Workers, r.workers)
	ph.Time += d
	if r.items <= 1 || r.workers <= 1 {
		ph.Serial += d
	}
}

// callSite names the place that called Run or For: the function and line,
// its caller's, and the first function up the stack in another package,
// as "f:line ← g:line (via h)".
func callSite() string {
	var pcs [24]uintptr
	n := runtime.Callers(3, pcs[:])
	frames := runtime.CallersFrames(pcs[:n])
	var site, pkg string
	depth := 0
	for {
		f, more := frames.Next()
		name := f.Function
		if name != "" && !ownFrame(name) {
			short := name[strings.LastIndex(name, "/")+1:]
			p := short[:strings.Index(short, ".")]
			switch depth++; {
			case depth == 1:
				site, pkg = fmt.Sprintf("%s:%d", short, f.Line), p
			case depth == 2:
				site += fmt.Sprintf(" ← %s:%d", short, f.Line)
			}
			if p != pkg {
				return site + " (via " + short + ")"
			}
		}
		if !more {
			return site
		}
	}
}

// ownFrame reports whether the function named is the runtime's: Run,
// For, or what they call.
func ownFrame(name string) bool {
	i := strings.LastIndex(name, "internal/parallel.")
	if i < 0 {
		return false
	}
	switch name[i+len("internal/parallel."):] {
	case "run", "Run", "For", "(*profile).begin", "callSite":
		return true
	}
	return false
}
