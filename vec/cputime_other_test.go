//go:build !unix

package vec

func cpuTime() int64 { return -1 }
