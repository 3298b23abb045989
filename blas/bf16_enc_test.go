package blas

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestEncodings checks every instruction the generator in _asm encodes as
// bytes (AVX512_BF16 and AMX, which Go's assembler does not know) against
// GNU as: each is marked in kernel_amd64.s by a comment "bf16enc: <Intel
// syntax>" followed by its BYTE lines.
func TestEncodings(t *testing.T) {
	want, order := encodedInstructions(t, "kernel_amd64.s")
	for _, mn := range []string{"vdpbf16ps", "vcvtne2ps2bf16", "vcvtneps2bf16", "tdpbf16ps", "tileloadd", "tilestored", "ldtilecfg", "tilezero", "tilerelease"} {
		found := false
		for _, ins := range order {
			found = found || strings.Fields(ins)[0] == mn
		}
		if !found {
			t.Errorf("kernel_amd64.s encodes no %s: the test would not check its helper", mn)
		}
	}
	as, err := exec.LookPath("as")
	if err != nil {
		t.Skip("GNU as is not installed (apt-get install binutils): the byte encodings were not checked")
	}
	objcopy, err := exec.LookPath("objcopy")
	if err != nil {
		t.Skip("objcopy is not installed (apt-get install binutils): the byte encodings were not checked")
	}
	dir := t.TempDir()
	assemble := func(lines []string) []byte {
		src := filepath.Join(dir, "x.s")
		text := ".intel_syntax noprefix\n" + strings.Join(lines, "\n") + "\n"
		if err := os.WriteFile(src, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(as, "--64", "-o", filepath.Join(dir, "x.o"), src).CombinedOutput(); err != nil {
			t.Fatalf("as: %v\n%s\n%s", err, out, text)
		}
		if out, err := exec.Command(objcopy, "-O", "binary", "-j", ".text", filepath.Join(dir, "x.o"), filepath.Join(dir, "x.bin")).CombinedOutput(); err != nil {
			t.Fatalf("objcopy: %v\n%s", err, out)
		}
		b, err := os.ReadFile(filepath.Join(dir, "x.bin"))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	var all []byte
	for _, ins := range order {
		all = append(all, want[ins]...)
	}
	if bytes.Equal(assemble(order), all) {
		t.Logf("%d distinct instructions match GNU as", len(order))
		return
	}
	for _, ins := range order { // find the ones that differ
		if got := assemble([]string{ins}); !bytes.Equal(got, want[ins]) {
			t.Errorf("%s: generator emits % x, GNU as % x", ins, want[ins], got)
		}
	}
}

// encodedInstructions reads the marked instructions of an assembly file:
// their bytes by Intel syntax, and the distinct ones in order.
func encodedInstructions(t *testing.T, path string) (map[string][]byte, []string) {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := map[string][]byte{}
	var order []string
	cur := ""
	var code []byte
	flush := func() {
		if cur == "" {
			return
		}
		if old, ok := want[cur]; ok && !bytes.Equal(old, code) {
			t.Errorf("%s encoded two ways: % x and % x", cur, old, code)
		} else if !ok {
			want[cur] = code
			order = append(order, cur)
		}
		cur, code = "", nil
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if ins, ok := strings.CutPrefix(line, "// bf16enc: "); ok {
			flush()
			cur = ins
			continue
		}
		if arg, ok := strings.CutPrefix(line, "BYTE"); ok && cur != "" {
			v, err := strconv.ParseUint(strings.TrimPrefix(strings.TrimSpace(arg), "$"), 0, 8)
			if err != nil {
				t.Fatalf("%s: bad BYTE line %q", path, line)
			}
			code = append(code, byte(v))
			continue
		}
		flush()
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	flush()
	return want, order
}
