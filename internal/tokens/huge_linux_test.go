//go:build linux

package tokens

import (
	"testing"
	"unsafe"
)

// hugeSlice's contract: from 1 MiB up a table starts on a 2 MiB boundary
// (so that transparent huge pages can back it), below it is an ordinary
// slice; either way it has n zero values, all writable. Heap allocations
// of a few MiB land on a 2 MiB boundary about once in 256, so four of
// them all aligned is not chance.
func TestHugeSliceAlignsFromOneMiB(t *testing.T) {
	if !useHugePages {
		t.Fatal("useHugePages is off on linux")
	}
	for _, n := range []int{1 << 18, 1<<18 + 1, 3<<18 + 5, 1 << 20} { // uint32s: 1 MiB exactly, and more
		s := hugeSlice[uint32](n)
		if len(s) != n {
			t.Fatalf("hugeSlice(%d): len %d", n, len(s))
		}
		if addr := uintptr(unsafe.Pointer(&s[0])); addr%(2<<20) != 0 {
			t.Errorf("hugeSlice(%d) (%d bytes) starts at %#x, not on a 2 MiB boundary", n, 4*n, addr)
		}
		if s[0] != 0 || s[n-1] != 0 {
			t.Errorf("hugeSlice(%d): not zeroed", n)
		}
		s[0], s[n-1] = 1, 2 // the whole length is mapped and writable
	}
	if s := hugeSlice[uint32](1<<18 - 1); len(s) != 1<<18-1 || s[len(s)-1] != 0 {
		t.Errorf("hugeSlice below 1 MiB: len %d", len(s))
	}
}
