package serve

import (
	"fmt"
	"io"
	"os"
	"syscall"
)

// readRegularFile reads a plan source that cannot hang the poller: it opens
// with O_NONBLOCK, so that opening a FIFO (or a device) returns at once
// instead of waiting for a writer, reads only a regular file (checked on the
// open descriptor, so a swap between a check and the open cannot fool it),
// and reads at most max bytes, whatever size the file claims.
//
// Symbolic links are followed: a mounted ConfigMap's plan.json is a link
// into ..data, which the kubelet swaps; O_NOFOLLOW would refuse it.
func readRegularFile(path string, max int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("not a regular file (%s)", st.Mode().Type())
	}
	if st.Size() > max {
		return nil, fmt.Errorf("larger than %d bytes", max)
	}
	// The size is a hint: the file may grow between Stat and the read.
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("larger than %d bytes", max)
	}
	return data, nil
}
