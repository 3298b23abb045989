//go:build linux && amd64 && !purego

package blas

import "golang.org/x/sys/unix"

// requestAMX asks Linux for the AMX tile data state:
// arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA). (0x1022 is the GET
// call, which asks nothing.)
func requestAMX() error {
	const archReqXcompPerm, xfeatureXTileData = 0x1023, 18
	if _, _, errno := unix.Syscall(unix.SYS_ARCH_PRCTL, archReqXcompPerm, xfeatureXTileData, 0); errno != 0 {
		return errno
	}
	return nil
}
