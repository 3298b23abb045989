//go:build !linux

package checkpoint

// exchangeDirs is not available here; swap falls back to two renames.
func exchangeDirs(a, b string) error { return errUnsupported }
