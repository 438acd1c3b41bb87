package serve

import "testing"

// A source's digest changes with any of its three files: a canary or
// rollout file that appears empty is a change from one that is absent,
// bytes moved from one file to the next are a change, and plan.json,
// always there, reads the same empty or absent.
func TestSourceDigest(t *testing.T) {
	d := func(data, canary, rollout []byte) [32]byte {
		return (&source{data: data, canary: canary, rollout: rollout}).digest()
	}
	p := []byte("plan")
	if d(p, nil, nil) == d(p, []byte{}, nil) || d(p, nil, nil) == d(p, nil, []byte{}) || d(p, []byte{}, nil) == d(p, nil, []byte{}) {
		t.Error("an empty canary or rollout file reads as an absent one")
	}
	if d([]byte("planc"), nil, nil) == d(p, []byte("c"), nil) || d(p, []byte("cr"), nil) == d(p, []byte("c"), []byte("r")) {
		t.Error("bytes moved between files read the same")
	}
	if d(nil, nil, nil) != d([]byte{}, nil, nil) {
		t.Error("plan.json empty and absent read differently")
	}
	if d(p, []byte("c"), []byte("r")) != d([]byte("plan"), []byte("c"), []byte("r")) {
		t.Error("the same files read differently")
	}
}
