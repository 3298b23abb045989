package main

import (
	"errors"
	"strings"
)

// memorySize is a number of bytes as a flag, as byteSize, that may also
// be 0 (to turn something off).
type memorySize int64

func (m *memorySize) Set(s string) error {
	if strings.TrimSpace(s) == "0" {
		*m = 0
		return nil
	}
	var b byteSize
	if err := b.Set(s); err != nil {
		return errors.New("want 0 or a size such as 512MiB, 1GiB or 1000000")
	}
	*m = memorySize(b)
	return nil
}

func (m memorySize) String() string {
	if m == 0 {
		return "0"
	}
	return byteSize(m).String()
}
