package serve

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// PlanFile is the name of a plan in a mounted ConfigMap or render output.
const PlanFile = "plan.json"

// maxPlanBytes bounds one plan.json: a ConfigMap holds at most 1 MiB.
const maxPlanBytes = 1 << 20

// readDir reads every plan.json under dir: a mounted ConfigMap (plan.json at
// its root, a symlink into ..data), a tree of them, or `render --out-dir`
// output (DIR/<namespace>/<name>/plan.json). The kubelet's ..data link and
// ..<timestamp> directories are skipped, so each plan is read once, through
// the link the kubelet swaps atomically.
func readDir(dir string) (map[string][]byte, error) {
	out := map[string][]byte{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == dir {
				return err
			}
			return nil // a mount being swapped; the next poll sees it
		}
		if strings.HasPrefix(d.Name(), "..") && path != dir {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Name() != PlanFile || d.IsDir() {
			return nil
		}
		data, err := readRegularFile(path, maxPlanBytes)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			data = []byte("unreadable: " + err.Error()) // reported as a load error
		}
		out[path] = data
		return nil
	})
	return out, err
}

func readPlanFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	if st.Size() > maxPlanBytes {
		return nil, errors.New("larger than 1 MiB")
	}
	buf := make([]byte, st.Size())
	_, err = io.ReadFull(f, buf)
	return buf, err
}
