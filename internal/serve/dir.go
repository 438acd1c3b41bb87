package serve

import (
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
)

// PlanFile is the name of a plan in a mounted ConfigMap or render output.
const PlanFile = "plan.json"

// maxPlanBytes bounds one plan.json: a ConfigMap holds at most 1 MiB.
const maxPlanBytes = 1 << 20

// readDir reads every plan.json under dir, and names the template of each
// from where it is, for the loader to check against what the plan claims:
//
//   - DIR/plan.json: dir is one mounted ConfigMap (the kubelet's ..data
//     link). The plan names itself: the pod spec chose the ConfigMap, and a
//     ConfigMap volume is always of the pod's own namespace. It must then be
//     the only plan under dir.
//   - DIR/<namespace>/<name>/plan.json: `render --out-dir` output, or a tree
//     of mounted ConfigMaps, each mounted at <namespace>/<name>. The plan
//     must claim that namespace and name.
//
// A plan.json anywhere else is refused. The kubelet's ..data link and
// ..<timestamp> directories are skipped, so each plan is read once, through
// the link the kubelet swaps atomically.
func readDir(dir string) (map[string]source, error) {
	out := map[string]source{}
	root := ""
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
		src := source{data: data}
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			src.unreadable = err.Error() // reported as a load error
		}
		rel, _ := filepath.Rel(dir, path)
		switch parts := strings.Split(filepath.ToSlash(rel), "/"); len(parts) {
		case 1:
			root = path
		case 3:
			src.want = Key{parts[0], parts[1]}
		default:
			src.refused = "plan.json is neither at the directory's root nor at <namespace>/<name>/plan.json"
		}
		out[path] = src
		return nil
	})
	if root != "" && len(out) > 1 {
		out[root] = source{data: out[root].data, refused: "a plan.json at the directory's root must be its only plan; use <namespace>/<name>/plan.json for several"}
	}
	return out, err
}
