package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	"github.com/mmcloughlin/avo/ir"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// Neither Go's assembler nor avo knows the AVX512_BF16 and AMX
// instructions, so they are emitted as bytes, one helper per instruction.
// Each emits a comment "bf16enc: <Intel syntax>" and then BYTE lines;
// TestEncodings in package blas assembles every such comment in the
// generated file with GNU as and compares the bytes.

// emit writes the bytes of one instruction, after its Intel syntax.
func emit(intel string, code []byte) {
	Comment("bf16enc: " + intel)
	for _, b := range code {
		Instruction(&ir.Instruction{Opcode: "BYTE", Operands: []Op{U8(b)}})
	}
}

// num returns a physical register's number (0-31 for vectors, 0-15 for
// general-purpose registers).
func num(r reg.Register) int {
	p, ok := r.(reg.Physical)
	if !ok {
		panic(fmt.Sprintf("%s is not a physical register", r.Asm()))
	}
	return int(p.PhysicalIndex())
}

// inv returns bit i of x inverted, as the EVEX and VEX prefixes store
// register-number extensions.
func inv(x, i int) byte { return byte(^x>>i) & 1 }

// evexZZZ encodes a 512-bit EVEX instruction with three vector register
// operands: dst in ModRM.reg, src1 in EVEX.vvvv, src2 in ModRM.rm, no
// masking. pp selects the implied prefix (1: 66, 2: F3, 3: F2); the
// opcode map is 0F38.
func evexZZZ(pp byte, opcode byte, dst, src1, src2 int) []byte {
	p0 := inv(dst, 3)<<7 | inv(src2, 4)<<6 | inv(src2, 3)<<5 | inv(dst, 4)<<4 | 2 // map 0F38
	p1 := byte(^src1&0xf)<<3 | 1<<2 | pp                                          // W0
	p2 := byte(2)<<5 | inv(src1, 4)<<3                                            // L'L = 512 bits
	return []byte{0x62, p0, p1, p2, opcode, 0xc0 | byte(dst&7)<<3 | byte(src2&7)}
}

// vex0F38 encodes a 128-bit (L0) W0 VEX instruction of map 0F38 with
// implied prefix pp (0: none, 2: F3, 3: F2), vvvv (unused: 0b1111) and
// a ModRM byte (and SIB) whose register extensions are r, x, b.
func vex0F38(pp, opcode byte, r, x, b, vvvv int, modrm ...byte) []byte {
	b1 := inv(r, 3)<<7 | inv(x, 3)<<6 | inv(b, 3)<<5 | 2
	b2 := byte(^vvvv&0xf)<<3 | pp
	return append([]byte{0xc4, b1, b2, opcode}, modrm...)
}

var zname = func(i int) string { return fmt.Sprintf("zmm%d", i) }

// vdpbf16ps emits VDPBF16PS dst, src1, src2 (zmm): for each of the 16
// lanes, dst += src1.hi·src2.hi, then += src1.lo·src2.lo, each rounded
// once (to nearest even, denormals flushed).
func vdpbf16ps(dst, src1, src2 reg.Register) {
	d, s1, s2 := num(dst), num(src1), num(src2)
	emit(fmt.Sprintf("vdpbf16ps %s, %s, %s", zname(d), zname(s1), zname(s2)), evexZZZ(2, 0x52, d, s1, s2))
}

// vcvtne2ps2bf16 emits VCVTNE2PS2BF16 dst, src1, src2 (zmm): the 16
// floats of src2 rounded to bf16 in the low half of dst, those of src1
// in the high half.
func vcvtne2ps2bf16(dst, src1, src2 reg.Register) {
	d, s1, s2 := num(dst), num(src1), num(src2)
	emit(fmt.Sprintf("vcvtne2ps2bf16 %s, %s, %s", zname(d), zname(s1), zname(s2)), evexZZZ(3, 0x72, d, s1, s2))
}

// vcvtneps2bf16 emits VCVTNEPS2BF16 dst (ymm), src (zmm): the 16 floats of
// src rounded to bf16 as VCVTNE2PS2BF16 rounds them.
func vcvtneps2bf16(dst, src reg.Register) {
	d, s := num(dst), num(src)
	emit(fmt.Sprintf("vcvtneps2bf16 ymm%d, %s", d, zname(s)), evexZZZ(2, 0x72, d, 0, s))
}

var gpName = []string{"rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15"}

// sib returns the ModRM (mod 00, rm = SIB) and SIB bytes for [base +
// index·1], for a tile register t in ModRM.reg. RBP/R13 as base would
// mean no base at mod 00, and RSP as index no index: both refused.
func sib(t, base, index int) []byte {
	if base&7 == 5 || index == 4 {
		panic(fmt.Sprintf("sib: base %s, index %s cannot be encoded without a displacement", gpName[base], gpName[index]))
	}
	return []byte{byte(t&7)<<3 | 4, byte(index&7)<<3 | byte(base&7)}
}

// sibDisp returns the ModRM and SIB bytes and the displacement for
// [base + index·1 + disp], for a tile register t in ModRM.reg: mod 01
// with 8 bits of displacement where they suffice, else mod 10 with 32.
// Without a displacement (and a base other than RBP/R13) it is sib's.
func sibDisp(t, base, index, disp int) []byte {
	if index == 4 {
		panic("sibDisp: RSP cannot be an index")
	}
	if disp == 0 && base&7 != 5 {
		return sib(t, base, index)
	}
	s := byte(index&7)<<3 | byte(base&7)
	if disp >= -128 && disp < 128 {
		return []byte{0x40 | byte(t&7)<<3 | 4, s, byte(int8(disp))}
	}
	d := uint32(int32(disp))
	return []byte{0x80 | byte(t&7)<<3 | 4, s, byte(d), byte(d >> 8), byte(d >> 16), byte(d >> 24)}
}

// memName is the Intel syntax of [base + index·1 + disp].
func memName(base, index, disp int) string {
	if disp == 0 {
		return fmt.Sprintf("[%s+%s*1]", gpName[base], gpName[index])
	}
	return fmt.Sprintf("[%s+%s*1%+d]", gpName[base], gpName[index], disp)
}

// tileloadd emits TILELOADD tmm(t), [base + stride·1 + disp]: rows of
// the tile from memory stride bytes apart, from base+disp on.
func tileloadd(t int, base, stride reg.Register, disp int) {
	b, s := num(base), num(stride)
	emit("tileloadd tmm"+fmt.Sprint(t)+", "+memName(b, s, disp), vex0F38(3, 0x4b, t, s, b, 0, sibDisp(t, b, s, disp)...))
}

// tilestored emits TILESTORED [base + stride·1 + disp], tmm(t).
func tilestored(base, stride reg.Register, disp, t int) {
	b, s := num(base), num(stride)
	emit("tilestored "+memName(b, s, disp)+", tmm"+fmt.Sprint(t), vex0F38(2, 0x4b, t, s, b, 0, sibDisp(t, b, s, disp)...))
}

// tdpbf16ps emits TDPBF16PS tmm(dst), tmm(a), tmm(b): dst (16 rows of
// 16 floats) += a (rows of 16 bf16 pairs) · b (16 rows of pairs of 16
// columns).
func tdpbf16ps(dst, a, b int) {
	emit(fmt.Sprintf("tdpbf16ps tmm%d, tmm%d, tmm%d", dst, a, b), vex0F38(2, 0x5c, dst, 0, a, b, 0xc0|byte(dst)<<3|byte(a)))
}

// ldtilecfg emits LDTILECFG [base]: the 64-byte tile configuration.
func ldtilecfg(base reg.Register) {
	b := num(base)
	if b&7 == 4 || b&7 == 5 {
		panic("ldtilecfg: base needs a SIB or displacement")
	}
	emit(fmt.Sprintf("ldtilecfg [%s]", gpName[b]), vex0F38(0, 0x49, 0, 0, b, 0, byte(b&7)))
}

// tilezero emits TILEZERO tmm(t).
func tilezero(t int) {
	emit(fmt.Sprintf("tilezero tmm%d", t), vex0F38(3, 0x49, t, 0, 0, 0, 0xc0|byte(t)<<3))
}

// tilerelease emits TILERELEASE: the tiles back to their initial state,
// so that the OS need not save them.
func tilerelease() {
	emit("tilerelease", vex0F38(0, 0x49, 0, 0, 0, 0, 0xc0))
}
