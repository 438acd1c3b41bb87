//go:build linux

package tokens

import (
	"syscall"
	"unsafe"
)

// hugeSlice returns n zero values of T for a table that lives as long as the
// process and is read at random. From 1 MB up it is mapped outside the Go
// heap, aligned to 2 MB and advised for transparent huge pages: a random
// read into a table of several megabytes then costs a cache miss but rarely
// also a TLB miss and a page walk. The mapping is never unmapped; the
// tables hold no pointers.
func hugeSlice[T any](n int) []T {
	const huge = 2 << 20
	var zero T
	size := n * int(unsafe.Sizeof(zero))
	if !useHugePages || size < 1<<20 {
		return make([]T, n)
	}
	b, err := syscall.Mmap(-1, 0, size+huge, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		return make([]T, n)
	}
	off := (huge - int(uintptr(unsafe.Pointer(&b[0]))%huge)) % huge
	b = b[off : off+size]
	_ = syscall.Madvise(b, syscall.MADV_HUGEPAGE) // best effort
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), n)
}
