package data

import (
	"runtime"
	"sync"
)

// EachText calls f with all the text of the corpus, a chunk at a time, from
// workers goroutines at once (GOMAXPROCS if workers < 1); worker, in [0,
// workers), tells which one calls. Each call gets text of one file: a whole
// file, or a part of one cut where Load cuts it, before an ASCII space that
// follows a printable ASCII character, so that a GPT-2-style split of the
// parts gives the pieces of the whole. It is for reading a corpus other
// than to tokenize it, such as to fit a tokenizer to it.
func (c *Corpus) EachText(workers int, f func(worker int, text []byte)) error {
	if workers < 1 {
		workers = runtime.GOMAXPROCS(0)
	}
	if err := c.checkNotEmpty(); err != nil {
		return err
	}
	free := make(chan *chunk, 2*workers)
	for range cap(free) {
		free <- &chunk{text: make([]byte, 0, chunkSize)}
	}
	todo := make(chan *chunk)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for ch := range todo {
				start := 0
				for _, p := range ch.parts {
					if p.end > start {
						f(w, ch.text[start:p.end])
					}
					start = p.end
				}
				free <- ch
			}
		})
	}
	r := &fileReader{files: c.Files, rec: c.records(), size: chunkSize}
	defer r.close()
	var err error
	for more := true; more && err == nil; {
		ch := <-free
		if more, err = r.fill(ch); err == nil {
			todo <- ch
		}
	}
	close(todo)
	wg.Wait()
	return err
}
