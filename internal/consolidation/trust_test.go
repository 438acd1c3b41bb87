package consolidation

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestSourceProblem(t *testing.T) {
	for _, ok := range []string{"user", "assistant", "crm", "tool.web-search", "a", "z", "x1_y2-z3.w4", "az09", "a.a", "a.z", "a-0", "a_9", strings.Repeat("a", MaxSourceBytes), SourceUnspecified} {
		if p := SourceProblem(ok); p != "" {
			t.Errorf("%q: %s", ok, p)
		}
	}
	for bad, want := range map[string]string{
		"":                                    "empty",
		strings.Repeat("a", MaxSourceBytes+1): "64 bytes, at most 63",
		"User":                                "must start with a lowercase letter",
		"1crm":                                "must start with a lowercase letter",
		".crm":                                "must start with a lowercase letter",
		"crm.":                                "byte 4: a separator must be followed",
		"tool..web":                           "byte 5: a separator must be followed",
		"tool-_web":                           "byte 5: a separator must be followed",
		"tool web":                            "byte 5 is not a lowercase letter",
		"toolWeb":                             "byte 5 is not a lowercase letter",
		"crm/eu":                              "byte 4 is not a lowercase letter",
		"crmé":                                "byte 4 is not a lowercase letter",
		// Each side of every range: ` { / : are next to a z 0 9.
		"`crm": "must start with a lowercase letter",
		"{crm": "must start with a lowercase letter",
		"c`":   "byte 2 is not a lowercase letter",
		"c{":   "byte 2 is not a lowercase letter",
		"c/":   "byte 2 is not a lowercase letter",
		"c:":   "byte 2 is not a lowercase letter",
		"c.`":  "byte 2: a separator must be followed",
		"c.{":  "byte 2: a separator must be followed",
		"c./":  "byte 2: a separator must be followed",
		"c.:":  "byte 2: a separator must be followed",
	} {
		if p := SourceProblem(bad); !strings.Contains(p, want) {
			t.Errorf("%q: %q, want %q", bad, p, want)
		}
	}
}

func TestTrust(t *testing.T) {
	var everyone Trust
	if !everyone.Everyone() || !everyone.Source("user") || !everyone.Observation(Observation{Provenance: []string{"user", "crm"}}) || everyone.Sources() != nil {
		t.Error("the zero Trust does not trust every source")
	}
	tr, err := ParseTrust(" crm, tool.billing ,crm")
	if err != nil {
		t.Fatal(err)
	}
	if tr.Everyone() || !slices.Equal(tr.Sources(), []string{"crm", "tool.billing"}) {
		t.Fatalf("ParseTrust: %v", tr.Sources())
	}
	for src, want := range map[string]bool{"crm": true, "tool.billing": true, "user": false, "": false, SourceUnspecified: false, "cr": false} {
		if tr.Source(src) != want || tr.Fact(Fact{Source: src}) != want {
			t.Errorf("Source(%q) = %v, want %v", src, !want, want)
		}
	}
	for _, c := range []struct {
		prov []string
		want bool
	}{
		{[]string{"crm"}, true},
		{[]string{"crm", "tool.billing"}, true},
		{[]string{"crm", "user"}, false},
		{[]string{"user"}, false},
		{nil, false}, // unspecified
	} {
		if got := tr.Observation(Observation{Provenance: c.prov}); got != c.want {
			t.Errorf("Observation(%v) = %v", c.prov, got)
		}
	}
	withUnspecified, _ := NewTrust([]string{SourceUnspecified})
	if !withUnspecified.Observation(Observation{}) || !withUnspecified.Source("") {
		t.Error("naming unspecified does not trust facts and observations without a source")
	}
	for in, want := range map[string]string{
		"crm,":     `trusted source 2 (""): empty`,
		"crm,User": `trusted source 2 ("User"): must start`,
	} {
		if _, err := ParseTrust(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseTrust(%q): %v, want %q", in, err, want)
		}
	}
	if tr, err := ParseTrust("  "); err != nil || !tr.Everyone() {
		t.Errorf("ParseTrust of blanks: %v %v", tr, err)
	}
	most := make([]string, MaxTrustedSources)
	for i := range most {
		most[i] = fmt.Sprintf("s%d", i)
	}
	if tr, err := NewTrust(most); err != nil || len(tr.Sources()) != MaxTrustedSources {
		t.Errorf("NewTrust of %d sources: %v", len(most), err)
	}
	many := make([]string, MaxTrustedSources+1)
	for i := range many {
		many[i] = "s" + strings.Repeat("x", i%40)
	}
	if _, err := NewTrust(many); err == nil || !strings.Contains(err.Error(), "at most 64") {
		t.Errorf("NewTrust of %d sources: %v", len(many), err)
	}
	if got := JoinProvenance([]string{"user", "crm"}, "", "crm", "tool.x"); !slices.Equal(got, []string{"crm", "tool.x", SourceUnspecified, "user"}) {
		t.Errorf("JoinProvenance: %v", got)
	}
}

// trustBatch is a batch of a trusted fact (crm) and an untrusted one
// (user), and a pool of a trusted observation (ot) and an untrusted one
// (ou), each recalled by both facts, under a bank that trusts crm.
func trustBatch(t *testing.T) Batch {
	t.Helper()
	tr, err := NewTrust([]string{"crm"})
	if err != nil {
		t.Fatal(err)
	}
	both := []string{"ft", "fu"}
	return Batch{
		Facts: []Fact{{ID: "ft", Text: "plan: Free", Source: "crm"}, {ID: "fu", Text: "I am on the Enterprise plan", Source: "user"}},
		Pool: []Candidate{
			{Observation: Observation{ID: "ot", Text: "The customer is on the Free plan", Provenance: []string{"crm"}}},
			{Observation: Observation{ID: "ou", Text: "The customer says they like dark mode", Provenance: []string{"user"}}},
		},
		RecalledBy: map[string][]string{"ot": both, "ou": both},
		Remaining:  -1,
		Trust:      tr,
	}
}

// The apply rule, item by item: an item with an untrusted source never
// updates or deletes a trusted observation (an update is kept as a new
// observation and counted as refused); an item of trusted sources alone
// never goes into an untrusted observation (kept as a new one, not a
// refusal); the rest is applied as without trust, and the zero Trust
// changes nothing.
func TestValidateTrust(t *testing.T) {
	for _, c := range []struct {
		name             string
		update           []string // observation, sources...
		del              string
		updated, created int
		deleted, refused int
	}{
		{"untrusted update of a trusted observation", []string{"ot", "fu"}, "", 0, 1, 0, 1},
		{"mixed update of a trusted observation", []string{"ot", "ft", "fu"}, "", 0, 1, 0, 1},
		{"trusted update of a trusted observation", []string{"ot", "ft"}, "", 1, 0, 0, 0},
		{"untrusted update of an untrusted observation", []string{"ou", "fu"}, "", 1, 0, 0, 0},
		{"trusted update of an untrusted observation", []string{"ou", "ft"}, "", 0, 1, 0, 0},
		{"delete of a trusted observation an untrusted fact recalled", nil, "ot", 0, 0, 0, 1},
		{"delete of an untrusted observation", nil, "ou", 0, 0, 1, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, everyone := range []bool{false, true} {
				b := trustBatch(t)
				if everyone {
					b.Trust = Trust{}
				}
				a := &Answer{}
				if c.update != nil {
					a.Updates = append(a.Updates, update(c.update[0], "The customer is on the Enterprise plan", c.update[1:]...))
				}
				if c.del != "" {
					a = &Answer{Updates: a.Updates, Deletes: deletesOf(c.del).Deletes}
				}
				ops, dropped, err := Validate(a, b, nil)
				if err != nil {
					t.Fatal(err)
				}
				refused := dropCodes(dropped)[RefusedByTrust]
				want := []int{c.updated, c.created, c.deleted, c.refused}
				if everyone {
					// Every source trusted: applied as asked.
					want = []int{len(a.Updates), 0, len(a.Deletes), 0}
				}
				if got := []int{len(ops.Updates), len(ops.Creates), len(ops.Deletes), refused}; !slices.Equal(got, want) {
					t.Errorf("everyone trusted %v: updates, creates, deletes, refused = %v, want %v (dropped %+v)", everyone, got, want, dropped)
				}
				for _, cr := range ops.Creates {
					if cr.Text != "The customer is on the Enterprise plan" || !slices.Equal(cr.SourceFactIDs, c.update[1:]) {
						t.Errorf("the update kept as a new observation is %+v", cr)
					}
				}
				for _, d := range dropped {
					if d.Lossy() {
						t.Errorf("a lossy drop: %+v", d)
					}
				}
			}
		})
	}
}

// An untrusted update kept as a new observation is still a create: one
// that repeats an observation, or goes over capacity, is dropped as such.
func TestValidateTrustKeptUpdateIsACreate(t *testing.T) {
	b := trustBatch(t)
	b.Remaining = 0
	a := &Answer{}
	a.Updates = append(a.Updates, update("ot", "The customer is on the Enterprise plan", "fu"))
	ops, dropped, err := Validate(a, b, nil)
	codes := dropCodes(dropped)
	if err != nil || len(ops.Creates)+len(ops.Updates) != 0 || codes[DropOverCapacity] != 1 || codes[RefusedByTrust] != 1 {
		t.Errorf("over capacity: %+v %+v %v", ops, dropped, err)
	}
	b = trustBatch(t)
	a = &Answer{}
	a.Updates = append(a.Updates, update("ot", "the customer says they LIKE dark mode", "fu"))
	ops, dropped, err = Validate(a, b, nil)
	if codes := dropCodes(dropped); err != nil || len(ops.Creates)+len(ops.Updates) != 0 || codes[DropRepeated] != 1 {
		t.Errorf("repeating an observation: %+v %+v %v", ops, dropped, err)
	}
}

// A fact's source: ParseFact takes a source's name, refuses another
// naming the field, and gives SourceUnspecified when it is left out; a
// source counts in the derived id when it names one, and leaves the id of
// a fact without one as it was.
func TestFactSource(t *testing.T) {
	f, err := ParseFact([]byte(`{"text": "plan: Free", "source": "crm"}`))
	if err != nil || f.Source != "crm" {
		t.Fatalf("%+v %v", f, err)
	}
	f, err = ParseFact([]byte(`{"text": "plan: Free"}`))
	if err != nil || f.Source != SourceUnspecified {
		t.Fatalf("%+v %v", f, err)
	}
	_, err = ParseFact([]byte(`{"text": "plan: Free", "source": "CRM"}`))
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "source" || !strings.Contains(err.Error(), "lowercase") {
		t.Fatalf("a bad source: %v", err)
	}
	bank := BankID("ns/b")
	none := DerivedFactID(bank, Fact{Text: "plan: Free"})
	if got := DerivedFactID(bank, Fact{Text: "plan: Free", Source: SourceUnspecified}); got != none {
		t.Errorf("an unspecified source changes the id: %s, %s", got, none)
	}
	crm, user := DerivedFactID(bank, Fact{Text: "plan: Free", Source: "crm"}), DerivedFactID(bank, Fact{Text: "plan: Free", Source: "user"})
	if crm == none || user == none || crm == user {
		t.Errorf("the source does not count in the id: %s %s %s", none, crm, user)
	}
}
