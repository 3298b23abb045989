package main

import (
	"errors"
	"fmt"
	"math"
	"strconv"
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

// byteSize is a number of bytes as a flag: 8GiB, 512MiB, 1.5GB, 4096.
type byteSize int64

var byteUnits = []struct {
	suffix string
	scale  float64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40},
	{"B", 1},
}

func (b *byteSize) Set(s string) error {
	num, scale := strings.TrimSpace(s), 1.0
	for _, u := range byteUnits {
		if rest, ok := strings.CutSuffix(num, u.suffix); ok {
			num, scale = strings.TrimSpace(rest), u.scale
			break
		}
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || !(v*scale >= 1) || v*scale > math.MaxInt64/2 {
		return errors.New("want a positive size such as 8GiB, 512MiB or 1000000")
	}
	*b = byteSize(v * scale)
	return nil
}

func (b byteSize) String() string {
	switch v := float64(b); {
	case v >= 1<<30:
		return fmt.Sprintf("%.4gGiB", v/(1<<30))
	case v >= 1<<20:
		return fmt.Sprintf("%.4gMiB", v/(1<<20))
	case v >= 1<<10:
		return fmt.Sprintf("%.4gKiB", v/(1<<10))
	}
	return strconv.FormatInt(int64(b), 10) + "B"
}
