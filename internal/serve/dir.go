package serve

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/promptops/promptops/plan"
)

// PlanFile is the name of a plan in a mounted ConfigMap or render output.
const PlanFile = "plan.json"

// maxPlanBytes bounds one plan.json: a ConfigMap holds at most 1 MiB.
const maxPlanBytes = 1 << 20

// readDir reads every plan.json under dir, with the canary.plan.json and
// rollout.json beside it during a rollout (readPlanFiles), and names the
// template of each from where it is, for the loader to check against what
// the plan claims:
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
		files, err := readPlanFiles(filepath.Dir(path))
		src := source{data: files.plan, canary: files.canary, rollout: files.rollout}
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

// readPlanFiles reads a template's plan.json, and its canary.plan.json and
// rollout.json when there (nil when not), as one set. In a mounted
// ConfigMap they are read inside the directory the kubelet's ..data link
// points at, which the kubelet never changes (it writes a new one and
// swaps the link): all three of one version, even while the kubelet swaps.
func readPlanFiles(dir string) (planFiles, error) {
	for range 3 {
		at, linked := dataDir(dir)
		files, err := readPlanFilesIn(at)
		if !linked {
			return files, err
		}
		if again, _ := dataDir(dir); again == at {
			return files, err
		}
		// Swapped while reading: read the new version.
	}
	return planFiles{}, errors.New("the mounted ConfigMap kept changing while it was read")
}

// dataDir is where a directory's files are: the target of its kubelet
// ..data link when it has one, else the directory itself.
func dataDir(dir string) (at string, linked bool) {
	if t, err := filepath.EvalSymlinks(filepath.Join(dir, "..data")); err == nil {
		return t, true
	}
	return dir, false
}

func readPlanFilesIn(dir string) (planFiles, error) {
	var f planFiles
	var err error
	if f.plan, err = readRegularFile(filepath.Join(dir, PlanFile), maxPlanBytes); err != nil {
		return f, err
	}
	for _, opt := range []struct {
		name string
		to   *[]byte
	}{{plan.CanaryPlanFile, &f.canary}, {plan.RolloutFile, &f.rollout}} {
		data, err := readRegularFile(filepath.Join(dir, opt.name), maxPlanBytes)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return f, fmt.Errorf("%s: %w", opt.name, err)
		default:
			*opt.to = data
		}
	}
	return f, nil
}
