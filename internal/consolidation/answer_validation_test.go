package consolidation

// The answer's parser and validation at their edges: each test fails when
// an item that should be dropped is applied, or one that should be applied
// is dropped (docs/mutation.md).

import (
	"fmt"
	"strings"
	"testing"
)

// deleteBatch is a batch of nFacts facts and a pool of nPool observations,
// each recalled by every fact.
func deleteBatch(nFacts, nPool int) Batch {
	b := Batch{RecalledBy: map[string][]string{}, Remaining: -1}
	var ids []string
	for i := 1; i <= nFacts; i++ {
		id := fmt.Sprintf("f%d", i)
		ids = append(ids, id)
		b.Facts = append(b.Facts, Fact{ID: id, Text: "fact " + id})
	}
	for i := 1; i <= nPool; i++ {
		id := fmt.Sprintf("o%d", i)
		b.Pool = append(b.Pool, Candidate{Observation: Observation{ID: id, Text: "observation number " + id}})
		b.RecalledBy[id] = ids
	}
	return b
}

func deletesOf(ids ...string) *Answer {
	a := &Answer{}
	for _, id := range ids {
		a.Deletes = append(a.Deletes, struct {
			ObservationID string `json:"observation_id"`
		}{id})
	}
	return a
}

func dropCodes(d []Dropped) map[string]int {
	out := map[string]int{}
	for _, x := range d {
		out[x.Code]++
	}
	return out
}

// The runaway-delete caps, each on its own: no more deletes than facts, and
// (in a pool of more than one) never more than half the pool. Past either,
// every delete of the answer is dropped; at either bound, all are kept.
func TestDeleteCapsApart(t *testing.T) {
	for _, c := range []struct {
		name         string
		facts, pool  int
		deletes      []string
		kept, excess int
	}{
		// Cap 1 alone: half the pool is far away.
		{"as many deletes as facts", 2, 10, []string{"o1", "o2"}, 2, 0},
		{"one delete more than the facts", 2, 10, []string{"o1", "o2", "o3"}, 0, 3},
		// Cap 2 alone: the facts are many.
		{"half the pool", 9, 4, []string{"o1", "o2"}, 2, 0},
		{"more than half the pool", 9, 4, []string{"o1", "o2", "o3"}, 0, 3},
		{"half of an odd pool rounded down", 9, 5, []string{"o1", "o2"}, 2, 0},
		{"half of an odd pool rounded up", 9, 5, []string{"o1", "o2", "o3"}, 0, 3},
		// A pool of one: its only observation may go.
		{"the only observation", 1, 1, []string{"o1"}, 1, 0},
		{"the only observation, no facts", 0, 1, []string{"o1"}, 0, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			ops, dropped, err := Validate(deletesOf(c.deletes...), deleteBatch(c.facts, c.pool), nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(ops.Deletes) != c.kept || dropCodes(dropped)[DropExcessDeletes] != c.excess || len(dropped) != c.excess {
				t.Errorf("kept %v, dropped %+v; want %d kept, %d dropped as excess", ops.Deletes, dropped, c.kept, c.excess)
			}
		})
	}
}

// A delete named twice is one delete: it is kept once, is not dropped, and
// counts once against the caps.
func TestDuplicateDelete(t *testing.T) {
	ops, dropped, err := Validate(deletesOf("o1", "o1"), deleteBatch(1, 10), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(ops.Deletes) != 1 || ops.Deletes[0].ObservationID != "o1" || len(dropped) != 0 {
		t.Errorf("deletes %v dropped %+v, want o1 once and nothing dropped", ops.Deletes, dropped)
	}
	// An unknown id is dropped as such, and does not count either.
	ops, dropped, err = Validate(deletesOf("o1", "o99"), deleteBatch(1, 10), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(ops.Deletes) != 1 || dropCodes(dropped)[DropUnknownObservation] != 1 || len(dropped) != 1 {
		t.Errorf("deletes %v dropped %+v, want o1 kept and o99 dropped as unknown", ops.Deletes, dropped)
	}
}

func update(id, text string, srcs ...string) struct {
	Text          string   `json:"text"`
	ObservationID string   `json:"observation_id"`
	SourceFactIDs []string `json:"source_fact_ids"`
} {
	return struct {
		Text          string   `json:"text"`
		ObservationID string   `json:"observation_id"`
		SourceFactIDs []string `json:"source_fact_ids"`
	}{text, id, srcs}
}

// An update of an observation the same answer deletes is a conflict: the
// delete stands, the update is dropped. Once the delete itself is dropped
// as excess, the update is no longer in conflict.
func TestUpdateOfADeletedObservation(t *testing.T) {
	a := deletesOf("o1")
	a.Updates = append(a.Updates, update("o1", "Alice lives in Bergen", "f1"), update("o2", "Bob sold his car", "f1"))
	ops, dropped, err := Validate(a, deleteBatch(2, 10), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(ops.Deletes) != 1 || len(ops.Updates) != 1 || ops.Updates[0].ObservationID != "o2" {
		t.Fatalf("ops %+v, want o1 deleted and only o2 updated", ops)
	}
	if len(dropped) != 1 || dropped[0].Code != DropConflict || dropped[0].Item != "update of o1" || !dropped[0].Lossy() {
		t.Errorf("dropped %+v, want the update of o1 as a conflict", dropped)
	}

	// The delete of o1 is excess (two deletes, one fact): the update of o1 applies.
	a = deletesOf("o1", "o3")
	a.Updates = append(a.Updates, update("o1", "Alice lives in Bergen", "f1"))
	ops, dropped, err = Validate(a, deleteBatch(1, 10), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(ops.Deletes) != 0 || len(ops.Updates) != 1 || dropCodes(dropped)[DropExcessDeletes] != 2 || len(dropped) != 2 {
		t.Errorf("ops %+v dropped %+v, want the update of o1 applied and both deletes dropped", ops, dropped)
	}

	// Two updates of one observation: the first applies.
	a = &Answer{}
	a.Updates = append(a.Updates, update("o1", "first", "f1"), update("o1", "second", "f1"))
	ops, dropped, err = Validate(a, deleteBatch(1, 10), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(ops.Updates) != 1 || ops.Updates[0].Text != "first" || len(dropped) != 1 || dropped[0].Code != DropConflict {
		t.Errorf("ops %+v dropped %+v, want the first update applied and the second a conflict", ops, dropped)
	}
}

// A text of MaxObservationText bytes is kept; one byte more is dropped, for
// an update as for a create; so is a text that cleans to nothing.
func TestObservationTextBound(t *testing.T) {
	for _, c := range []struct {
		name string
		text string
		keep bool
	}{
		{"at the bound", strings.Repeat("a", MaxObservationText), true},
		{"one byte over", strings.Repeat("a", MaxObservationText+1), false},
		{"empty once cleaned", "  [01234567-89ab-cdef-0123-456789abcdef] ", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := &Answer{}
			a.Updates = append(a.Updates, update("o1", c.text, "f1"))
			ops, dropped, err := Validate(a, deleteBatch(1, 3), nil)
			if err != nil {
				t.Fatal(err)
			}
			if kept := len(ops.Updates) == 1; kept != c.keep || (!c.keep && (len(dropped) != 1 || dropped[0].Code != DropBadText)) {
				t.Errorf("update: ops %+v dropped %+v, want kept %v", ops.Updates, dropped, c.keep)
			}
			a = &Answer{}
			a.Creates = append(a.Creates, struct {
				Text          string   `json:"text"`
				SourceFactIDs []string `json:"source_fact_ids"`
			}{c.text, []string{"f1"}})
			ops, dropped, err = Validate(a, deleteBatch(1, 3), nil)
			if err != nil {
				t.Fatal(err)
			}
			if kept := len(ops.Creates) == 1; kept != c.keep || (!c.keep && (len(dropped) != 1 || dropped[0].Code != DropBadText)) {
				t.Errorf("create: ops %+v dropped %+v, want kept %v", ops.Creates, dropped, c.keep)
			}
		})
	}
}

// Anything after the one JSON object makes the answer unusable, including
// a closing bracket or brace that json.Decoder.More does not see.
func TestParseAnswerTrailingData(t *testing.T) {
	for _, s := range []string{
		`{"creates":[]} x`,
		`{"creates":[]}]`,
		`{"creates":[]} }`,
		`{"creates":[]}{}`,
		"```json\n{\"creates\":[]}\n```\nThat is all.",
		"```json\n{\"creates\":[]} ]\n```",
		// Past what the decoder has read when the object ends.
		`{"creates":[]}` + strings.Repeat(" ", 64<<10) + "x",
	} {
		if a, err := ParseAnswer(s); err == nil {
			t.Errorf("%q: accepted as %+v", s, a)
		}
	}
	for _, s := range []string{`{"creates":[]}`, "{\"creates\":[]}  \n\t", "```json\n{\"creates\":[]}\n```\n"} {
		if _, err := ParseAnswer(s); err != nil {
			t.Errorf("%q: %v", s, err)
		}
	}
}

// Creates beyond the bank's remaining capacity are dropped as such; at the
// capacity exactly, all are kept; -1 is no cap.
func TestCreatesCapacity(t *testing.T) {
	for _, c := range []struct{ remaining, kept int }{{-1, 3}, {0, 0}, {2, 2}, {3, 3}, {4, 3}} {
		a := &Answer{}
		for i := 0; i < 3; i++ {
			a.Creates = append(a.Creates, struct {
				Text          string   `json:"text"`
				SourceFactIDs []string `json:"source_fact_ids"`
			}{fmt.Sprintf("new observation %c", 'a'+i), []string{"f1"}})
		}
		b := deleteBatch(1, 1)
		b.Remaining = c.remaining
		ops, dropped, err := Validate(a, b, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(ops.Creates) != c.kept || dropCodes(dropped)[DropOverCapacity] != 3-c.kept {
			t.Errorf("remaining %d: kept %d dropped %+v, want %d kept", c.remaining, len(ops.Creates), dropped, c.kept)
		}
	}
}

// Dropped items are named by their place in the answer, from 1, so a user
// reading the run's notes can find them.
func TestDroppedItemNames(t *testing.T) {
	a := deletesOf("o1", "o99")
	a.Updates = append(a.Updates, update("o98", "x", "f1"))
	a.Creates = append(a.Creates, struct {
		Text          string   `json:"text"`
		SourceFactIDs []string `json:"source_fact_ids"`
	}{"ok", []string{"f1"}}, struct {
		Text          string   `json:"text"`
		SourceFactIDs []string `json:"source_fact_ids"`
	}{"no source", nil})
	_, dropped, err := Validate(a, deleteBatch(1, 10), nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range dropped {
		got = append(got, d.Item+" "+d.Code)
	}
	if want := []string{"delete 2 unknownObservation", "update 1 unknownObservation", "create 2 noSource"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("dropped %v, want %v", got, want)
	}
	if err := (&InvalidAnswerError{Reason: "not JSON"}); err.Error() != "invalid answer: not JSON" {
		t.Errorf("error %q", err.Error())
	}
}

// Normalize keeps letters and digits, lower case, one space between runs,
// none at the edges.
func TestNormalizeEdges(t *testing.T) {
	for in, want := range map[string]string{
		"  Alice, lives in OSLO! ": "alice lives in oslo",
		"...x":                     "x",
		"a--b  c":                  "a b c",
		"Ünïcode 42":               "ünïcode 42",
		"!!!":                      "",
	} {
		if got := Normalize(in); got != want {
			t.Errorf("Normalize(%q) = %q, want %q", in, got, want)
		}
	}
}

// The store's error while looking for a repeated text is the one error
// Validate returns; the answer is not half applied.
func TestValidateReturnsTheStoreError(t *testing.T) {
	a := &Answer{}
	a.Creates = append(a.Creates, struct {
		Text          string   `json:"text"`
		SourceFactIDs []string `json:"source_fact_ids"`
	}{"new", []string{"f1"}})
	boom := fmt.Errorf("store is down")
	ops, dropped, err := Validate(a, deleteBatch(1, 1), func(string) (bool, error) { return false, boom })
	if err != boom || len(ops.Creates) != 0 || dropped != nil {
		t.Errorf("ops %+v dropped %+v err %v, want only the store's error", ops, dropped, err)
	}
}

// An invented id of 80 bytes is quoted whole; a longer one is clipped.
func TestClipIDBound(t *testing.T) {
	if got := clipID(strings.Repeat("a", 80)); got != strings.Repeat("a", 80) {
		t.Errorf("80 bytes: %q", got)
	}
	if got := clipID(strings.Repeat("a", 81)); got != strings.Repeat("a", 80)+"..." {
		t.Errorf("81 bytes: %q", got)
	}
}
