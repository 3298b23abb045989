package main

import (
	"errors"
	"io"
)

// STUB: replaced by the real implementation.
func benchAttention(args []string, stdout io.Writer) error { return errors.New("not implemented yet") }
