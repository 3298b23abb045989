//go:build !purego

#include "textflag.h"

// func pause(n int)
TEXT ·pause(SB), NOSPLIT, $0-8
	MOVD n+0(FP), R0
	CMP $0, R0
	BLE done
loop:
	YIELD
	SUB $1, R0
	CBNZ R0, loop
done:
	RET
