// Package parallel runs independent pieces of work on up to GOMAXPROCS
// goroutines. Work is split by output, never by the order of a sum, so
// results are bitwise identical whatever the number of threads.
package parallel

import (
	"runtime"
	"sync"
)

// For calls fn(i) for every i in [0, n), on up to GOMAXPROCS goroutines,
// and returns when all calls have returned. With one thread, or n ≤ 1, it
// runs on the calling goroutine.
func For(n int, fn func(i int)) {
	Workers(n, runtime.GOMAXPROCS(0), fn)
}

// Workers is For with an explicit bound on the number of goroutines.
func Workers(n, workers int, fn func(i int)) {
	if workers > n {
		workers = n
	}
	if workers <= 1 {
		for i := 0; i < n; i++ {
			fn(i)
		}
		return
	}
	var (
		mu   sync.Mutex
		next int
		wg   sync.WaitGroup
	)
	take := func() int {
		mu.Lock()
		i := next
		next++
		mu.Unlock()
		return i
	}
	wg.Add(workers - 1)
	worker := func() {
		for i := take(); i < n; i = take() {
			fn(i)
		}
	}
	for w := 1; w < workers; w++ {
		go func() { defer wg.Done(); worker() }()
	}
	worker()
	wg.Wait()
}
