package attention

import "testing"

func BenchmarkZZFlash(b *testing.B) {
	benchMechanism(b, Flash, DefaultOptions(), []benchShape{{1, 1, 2048, 64}, {1, 1, 32768, 64}}, nil)
}
