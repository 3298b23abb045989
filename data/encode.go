package data

import (
	"context"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/polysketch/polysketch/data/tokenizer"
	"github.com/polysketch/polysketch/internal/regular"
)

// chunkSize is the most text tokenized at once. Files are read in chunks
// of about this size, tokenized in parallel and written in order, so
// memory use is bounded whatever the size of the corpus or its files.
const chunkSize = 1 << 20

// A chunk is text from one or more consecutive documents; each document's
// part is tokenized on its own, so no token spans two documents.
type chunk struct {
	text  []byte
	parts []part
	ids   []int32
	err   error // of encoding the text
	done  chan struct{}
}

// A part is the text of one document in a chunk.
type part struct {
	// end is where the part ends in the chunk's text; it starts where
	// the part before it ends.
	end int
	// newDoc is set if the part starts a document that follows other text:
	// its tokens come after an end-of-text token.
	newDoc bool
	// cont is set if the part continues a document begun in an earlier
	// chunk (tokenizer.Continue).
	cont bool
}

// encodeFiles tokenizes the documents of the files, in order, into w (the
// text of records in their field; see Format): up to workers chunks
// at once, cut every size bytes of text (see cutPoint), so the tokens do
// not depend on the number of workers. It returns the number of cuts
// forced where text had no cut point.
//
// Each text file, and each record of JSON lines and Parquet, is a
// document. If tok has an end-of-text token, one goes between consecutive
// documents, as in GPT-2's training, so that a model sees where one ends
// and an unrelated one starts; empty files and records are no documents
// and add none. Without one, as for the byte tokenizer, whose
// every id is a byte of text, the documents are simply concatenated.
func encodeFiles(ctx context.Context, files []File, rec records, tok tokenizer.Tokenizer, w *tokenWriter, size, workers int) (forced int, err error) {
	eot, sep := tokenizer.EndOfText(tok)
	workers = max(workers, 1)
	inFlight := 2*workers + 1
	free := make(chan *chunk, inFlight)
	for range inFlight {
		free <- &chunk{text: make([]byte, 0, size), done: make(chan struct{}, 1)}
	}
	todo := make(chan *chunk, inFlight)
	ordered := make(chan *chunk, inFlight)
	quit := make(chan struct{})

	r := &fileReader{files: files, rec: rec, size: size}
	var readErr error
	go func() {
		defer close(ordered)
		defer close(todo)
		defer r.close()
		for {
			select {
			case <-quit:
				return
			case <-ctx.Done():
				readErr = ctx.Err()
				return
			default:
			}
			var c *chunk
			select {
			case c = <-free:
			case <-quit:
				return
			}
			more, err := r.fill(c)
			if err != nil {
				readErr = err
				return
			}
			if len(c.text) > 0 {
				ordered <- c
				todo <- c
			}
			if !more {
				return
			}
		}
	}()
	for range workers {
		go func() {
			for c := range todo {
				c.ids, c.err = c.ids[:0], nil
				start := 0
				for _, p := range c.parts {
					if sep && p.newDoc {
						c.ids = append(c.ids, eot)
					}
					if p.cont {
						c.ids, c.err = tokenizer.Continue(ctx, tok, c.ids, c.text[start:p.end])
					} else {
						c.ids, c.err = tok.Encode(ctx, c.ids, c.text[start:p.end])
					}
					if c.err != nil {
						break
					}
					start = p.end
				}
				c.done <- struct{}{}
			}
		}()
	}
	var writeErr error
	for c := range ordered {
		<-c.done
		if writeErr == nil {
			if writeErr = c.err; writeErr == nil {
				writeErr = w.write(c.ids)
			}
			if writeErr != nil {
				close(quit)
			}
		}
		free <- c
	}
	if readErr != nil {
		return r.forced, readErr
	}
	return r.forced, writeErr
}

// fileReader reads the documents of the files of a corpus into chunks.
type fileReader struct {
	files  []File
	rec    records
	size   int
	next   int       // index of the next file to open
	file   docReader // the file being read, or nil
	doc    io.Reader // the document being read, or nil
	carry  []byte    // text of doc read but left for the next chunk
	forced int       // cuts made by forcedCut
	docs   int       // documents with text begun
	// newDoc is set from beginning a document that follows other text to
	// writing its first part.
	newDoc bool
	// parted is set once the document being read has a part in a chunk.
	parted bool
}

// fill fills c with up to r.size bytes of text and reports whether there
// is more.
func (r *fileReader) fill(c *chunk) (more bool, err error) {
	c.text = append(c.text[:0], r.carry...)
	c.parts = c.parts[:0]
	r.carry = r.carry[:0]
	start := 0 // of the current document's part
	for len(c.text) < r.size {
		if r.doc == nil {
			if r.file == nil {
				if r.next == len(r.files) {
					break
				}
				if err := r.open(); err != nil {
					return false, err
				}
				continue
			}
			doc, err := r.file.next()
			if err == io.EOF {
				r.file.close()
				r.file = nil
				continue
			}
			if err != nil {
				return false, err
			}
			r.doc = doc
			r.newDoc = r.docs > 0
			r.parted = false
			r.docs++
			start = len(c.text)
			continue
		}
		n, err := r.doc.Read(c.text[len(c.text):r.size])
		c.text = c.text[:len(c.text)+n]
		if err == io.EOF {
			r.doc = nil
			r.endPart(c, len(c.text))
			start = len(c.text)
		} else if err != nil {
			return false, err
		}
	}
	if r.doc != nil {
		// The current document goes on in the next chunk.
		cut := start + cutPoint(c.text[start:])
		if cut == start && start == 0 {
			cut = forcedCut(c.text)
			r.forced++
		}
		r.carry = append(r.carry, c.text[cut:]...)
		c.text = c.text[:cut]
		if cut > start {
			r.endPart(c, cut)
		}
		// Else all of the document's text in c goes to the next chunk,
		// and with it r.newDoc.
	}
	return r.doc != nil || r.file != nil || r.next < len(r.files), nil
}

// endPart ends the current document's part of c at end.
func (r *fileReader) endPart(c *chunk, end int) {
	c.parts = append(c.parts, part{end: end, newDoc: r.newDoc, cont: r.parted})
	r.newDoc = false
	r.parted = true
}

// open opens the next file, checking that it is the file that was listed.
func (r *fileReader) open() error {
	want := r.files[r.next]
	r.next++
	if want.Size == 0 {
		return nil
	}
	f, err := regular.Open(want.Path)
	var nr *regular.NotRegularError
	switch {
	case errors.As(err, &nr):
		return fmt.Errorf("corpus file %q is now %s, not a regular file: run again, or remove it from the corpus", want.Path, regular.Kind(nr.Mode))
	case err != nil:
		return pathError("cannot read corpus file", want.Path, err)
	}
	info, err := f.Stat()
	switch {
	case err != nil:
		err = pathError("cannot read corpus file", want.Path, err)
	case info.Size() != want.Size || !info.ModTime().Equal(want.ModTime):
		err = fmt.Errorf("corpus file %q changed since the corpus was listed: run again", want.Path)
	}
	var d docReader
	if err == nil {
		d, err = openDocs(f, want, r.rec)
	}
	if err != nil {
		f.Close()
		return err
	}
	r.file = d
	return nil
}

func (r *fileReader) close() {
	if r.file != nil {
		r.file.close()
	}
}

// cutPoint returns the last place in text where it can be cut into two
// parts that tokenize to the same tokens as the whole, or 0 if there is
// none: before an ASCII space that follows a printable ASCII character.
// That holds for the byte tokenizer, trivially, and for GPT-2, whose
// pieces never hold a space after a non-space: a space only ever leads a
// piece or joins other white space.
func cutPoint(text []byte) int {
	for i := len(text) - 1; i > 0; i-- {
		if text[i] == ' ' && text[i-1] > ' ' && text[i-1] < 0x7f {
			return i
		}
	}
	return 0
}

// forcedCut returns where to cut text that has no cut point: at its end,
// or before a last character that is incomplete. Tokens on either side may
// then differ from those of the whole (only for text without a space in
// a whole chunk).
func forcedCut(text []byte) int {
	for i := len(text) - 1; i >= 0 && i >= len(text)-utf8.UTFMax; i-- {
		if utf8.RuneStart(text[i]) {
			if !utf8.FullRune(text[i:]) && i > 0 {
				return i
			}
			break
		}
	}
	return len(text)
}

// Texts calls fn with the text of c's documents (see Format), in order, in
// pieces of up to about a megabyte, streamed as Load reads them: start is
// set for the first piece of each document. A document is cut only where
// its two sides tokenize as the whole does with a GPT-2-style
// pre-tokenizer (before a space that follows a printable character), but
// where it has no such place for a megabyte. fn must not keep text after
// it returns. Texts stops at the first error, fn's or a file's.
func (c *Corpus) Texts(fn func(text []byte, start bool) error) error {
	r := &fileReader{files: c.Files, rec: c.records(), size: chunkSize}
	defer r.close()
	ch := &chunk{text: make([]byte, 0, chunkSize)}
	first := true
	for {
		more, err := r.fill(ch)
		if err != nil {
			return err
		}
		begin := 0
		for _, p := range ch.parts {
			if p.end > begin {
				if err := fn(ch.text[begin:p.end], p.newDoc || first); err != nil {
					return err
				}
				first = false
			}
			begin = p.end
		}
		if !more {
			return nil
		}
	}
}
