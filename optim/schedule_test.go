package optim

import (
	"math"
	"testing"
)

func TestScheduleLR(t *testing.T) {
	s := Schedule{Peak: 1e-3, Min: 1e-4, Warmup: 10, Total: 110}
	for _, tc := range []struct {
		step int
		want float64
	}{
		{0, 1e-4},      // first warm-up step: Peak/10
		{4, 5e-4},      // half way up
		{9, 1e-3},      // last warm-up step reaches Peak
		{10, 1e-3},     // decay starts at Peak
		{60, 5.5e-4},   // half way down: (1e-3 + 1e-4)/2
		{109, 1.09e-4}, // one step before the end
		{110, 1e-4},    // end of decay
		{5000, 1e-4},   // stays at Min
	} {
		if got := s.LR(tc.step); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("LR(%d) = %.6g, want %.6g", tc.step, got, tc.want)
		}
	}
	noWarmup := Schedule{Peak: 2, Min: 0, Warmup: 0, Total: 4}
	for step, want := range []float64{2, 1.5, 1, 0.5, 0} {
		if got := noWarmup.LR(step); math.Abs(got-want) > 1e-12 {
			t.Errorf("no warm-up: LR(%d) = %v, want %v", step, got, want)
		}
	}
}

func TestScheduleValidate(t *testing.T) {
	for _, tc := range []struct {
		s  Schedule
		ok bool
	}{
		{Schedule{Peak: 7e-4, Warmup: 10000, Total: 125000}, true},
		{Schedule{Peak: 1, Min: 1, Warmup: 5, Total: 5}, true},
		{Schedule{Peak: 0, Warmup: 1, Total: 2}, false},
		{Schedule{Peak: 1, Min: 2, Warmup: 1, Total: 2}, false},
		{Schedule{Peak: 1, Warmup: -1, Total: 2}, false},
		{Schedule{Peak: 1, Warmup: 3, Total: 2}, false},
	} {
		if err := tc.s.Validate(); (err == nil) != tc.ok {
			t.Errorf("%+v: error %v, want ok=%v", tc.s, err, tc.ok)
		}
	}
}
