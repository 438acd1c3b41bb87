//go:build !linux

package tokens

// hugeSlice returns n zero values of T (see huge_linux.go).
func hugeSlice[T any](n int) []T { return make([]T, n) }
