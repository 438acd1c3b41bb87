// Package proc reads a process's memory figures from /proc (Linux) and
// evicts a binary from the page cache before it is measured.
package proc

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Status is a field of /proc/PID/status given in kB (VmHWM, VmRSS,
// RssAnon, ...), in bytes.
func Status(pid int, field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if ok && name == field {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New(field + " not found")
}

// ResetPeak sets the process's VmHWM (peak resident set) back to its
// resident set now, so that a later VmHWM is the peak of what came after.
func ResetPeak(pid int) error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
}

// Evict drops a file's pages from the page cache, so that a process
// started from it next reads it from disk, as a node starting a pod does.
// Pages a build has just written stay cached as larger folios, each mapped
// whole on a fault: the file-backed part of a process's resident set came
// out 70-100 MiB instead of 60 and different from run to run.
func Evict(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
}

// MiB formats bytes in MiB.
func MiB(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
