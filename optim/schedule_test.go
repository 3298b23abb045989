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

// TestScheduleCosine checks the cosine decay at points where the cosine
// is known exactly: cos 0 = 1, cos π/3 = 1/2, cos π/2 = 0, cos 2π/3 = −1/2,
// cos π = −1.
func TestScheduleCosine(t *testing.T) {
	s := Schedule{Peak: 1e-3, Min: 1e-4, Warmup: 10, Total: 70, Cosine: true}
	for _, tc := range []struct {
		step int
		want float64
	}{
		{0, 1e-4},     // warm-up as for the linear schedule
		{9, 1e-3},     // last warm-up step reaches Peak
		{10, 1e-3},    // decay starts at Peak
		{30, 7.75e-4}, // a third of the way: Min + 0.9e-3·3/4
		{40, 5.5e-4},  // half way: (Peak+Min)/2, as for the line
		{50, 3.25e-4}, // two thirds: Min + 0.9e-3·1/4
		{70, 1e-4},    // end of decay
		{1000, 1e-4},  // stays at Min
		// cos(π/6) = √3/2 = 0.866025404: (1 ± it)/2 = 0.933012702, 0.066987298.
		{20, 9.39711432e-4}, // a sixth: 1e-4 + 0.9e-3·0.933012702
		{60, 1.60288568e-4}, // five sixths: 1e-4 + 0.9e-3·0.066987298
		// cos(π/60) = 0.998629535: (1 ± it)/2 = 0.999314767, 0.000685232.
		{11, 9.99383291e-4}, // one step in: barely below Peak
		{69, 1.00616709e-4}, // one step before the end: barely above Min
	} {
		if got := s.LR(tc.step); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("LR(%d) = %.10g, want %.10g", tc.step, got, tc.want)
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
