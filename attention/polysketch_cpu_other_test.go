//go:build !unix

package attention

import "time"

// psCPUTime is unavailable here; benchmarks then report wall-clock only.
func psCPUTime() time.Duration { return 0 }
