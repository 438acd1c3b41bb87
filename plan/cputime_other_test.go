//go:build !unix

package plan

import "time"

// cpuTime is not measured here.
func cpuTime() time.Duration { return 0 }
