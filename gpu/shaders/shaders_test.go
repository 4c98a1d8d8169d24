package shaders

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestRegenerate compiles every .comp with gen.sh into a temporary
// directory and checks the result is byte for byte the committed .spv: a
// source edited without `go generate` fails here.
func TestRegenerate(t *testing.T) {
	if _, err := exec.LookPath("glslc"); err != nil {
		t.Skip("glslc not installed (Debian package glslc): cannot check the committed SPIR-V")
	}
	dir := t.TempDir()
	out, err := exec.Command("sh", "gen.sh", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("gen.sh: %v\n%s", err, out)
	}
	srcs, err := filepath.Glob("*.comp")
	if err != nil || len(srcs) == 0 {
		t.Fatalf("no shader sources (%v)", err)
	}
	spvs, _ := filepath.Glob("*.spv")
	if len(spvs) != len(srcs) {
		t.Errorf("%d .spv files for %d .comp sources: run go generate and remove stale .spv", len(spvs), len(srcs))
	}
	for _, src := range srcs {
		name := strings.TrimSuffix(src, ".comp")
		want, err := os.ReadFile(filepath.Join(dir, name+".spv"))
		if err != nil {
			t.Fatal(err)
		}
		got, err := SPIRV(name)
		if err != nil {
			t.Errorf("%s: not embedded: %v", name, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s.spv differs from what %s compiles to (%d vs %d bytes): run go generate ./gpu/shaders", name, src, len(got), len(want))
		}
	}
}

func TestSPIRVUnknown(t *testing.T) {
	if _, err := SPIRV("no_such_shader"); err == nil {
		t.Fatal("SPIRV of an unknown name succeeded")
	}
	for _, n := range []string{MulMatVecF32, MulMatVecF16, MulMatVecQ8_0, MulMatVecQ4_K, RMSNorm, SwiGLU, Add, Noop} {
		b, err := SPIRV(n)
		if err != nil || len(b) < 20 || b[0] != 0x03 || b[1] != 0x02 || b[2] != 0x23 || b[3] != 0x07 {
			t.Errorf("%s: not SPIR-V (err %v, %d bytes)", n, err, len(b))
		}
	}
}
