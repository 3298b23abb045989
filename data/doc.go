// Package data turns text files into batches of token ids for training and
// evaluating language models.
//
// A [Corpus] lists text files: [NewCorpus] makes one from files,
// directories and glob patterns, and [GoSource] is the default, the Go
// toolchain's own source, present wherever Go is. Files hold plain text,
// JSON lines or Parquet, gzip-compressed or not, as their names say (see
// [Format]); the records of JSON lines and Parquet keep their text in a
// field, [Corpus.TextField]. NewCorpus leaves out text files that look
// like binary data. [Load] splits a corpus
// into training and validation files, tokenizes each split once (with a
// tokenizer from package data/tokenizer, its end-of-text token, if it has
// one, between files) into a file in a cache directory, where it replaces
// the files of the corpus's earlier states, and returns both splits as
// [Tokens], read from disk on demand, so corpora larger than memory work. A [Batcher] cuts windows of tokens out of
// them: at random for training, in order for evaluation.
package data
