package consolidation

import (
	"strings"
	"testing"
)

func batchFixture() Batch {
	return Batch{
		Facts:      []Fact{{ID: "f1", Text: "Alice moved"}, {ID: "f2", Text: "Bob sold his car"}},
		Pool:       []Candidate{{Observation: Observation{ID: "o1", Text: "Alice lives in Oslo"}}, {Observation: Observation{ID: "o2", Text: "Bob owns a car"}}, {Observation: Observation{ID: "o3", Text: "Bob likes jazz"}}},
		RecalledBy: map[string][]string{"o1": {"f1"}, "o2": {"f2"}, "o3": {"f2"}},
		Remaining:  -1,
	}
}

func TestParseAnswer(t *testing.T) {
	ok := []string{
		`{"creates":[],"updates":[],"deletes":[]}`,
		"```json\n{\"creates\":[],\"updates\":[],\"deletes\":[]}\n```",
		"```\n{\"creates\":[]}\n```",
		"  {\"creates\":[{\"text\":\"x\",\"source_fact_ids\":[\"f1\"]}]}  \n",
	}
	for _, s := range ok {
		if _, err := ParseAnswer(s); err != nil {
			t.Errorf("%q: %v", s, err)
		}
	}
	bad := map[string]string{
		``: "empty answer",
		`{"creates":[{"text":"x","source_fact_ids":[1]}]}`: "a JSON number where a string is wanted",
		`{"creates":[],"tags":[]}`:                         "unknown field",
		`{"creates":[]} {"updates":[]}`:                    "after the JSON object",
		`{"creates":[{"text":"x"`:                          "the JSON ends early",
		`Sure! Here is the JSON: {"creates":[]}`:           "not a JSON object",
		`[]`:                                               "not a JSON object",
		// encoding/json keeps the last of a repeated key: the first list
		// of creates would be lost without a word.
		`{"creates":[{"text":"a","source_fact_ids":["f1"]}],"updates":[],"creates":[]}`:                   `key "creates" twice`,
		`{"creates":[{"text":"a","text":"b","source_fact_ids":["f1"]}]}`:                                  `key "text" twice`,
		`{"updates":[{"observation_id":"o1","text":"a","source_fact_ids":["f1"],"observation_id":"o2"}]}`: `key "observation_id" twice`,
	}
	for s, want := range bad {
		if _, err := ParseAnswer(s); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want %q", s, err, want)
		}
	}
}

func TestValidate(t *testing.T) {
	parse := func(s string) *Answer {
		a, err := ParseAnswer(s)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	b := batchFixture()
	ops, dropped, err := Validate(parse(`{
		"creates":[{"text":"Alice moved to Bergen | Involving: Alice (occurred_start=2024-01-01)","source_fact_ids":["f1","f9"]},
		           {"text":"no sources","source_fact_ids":["f9"]},
		           {"text":"alice  MOVED to bergen!","source_fact_ids":["f1"]},
		           {"text":"Bob likes jazz.","source_fact_ids":["f2"]},
		           {"text":"[00000000-0000-4000-8000-000000000001]","source_fact_ids":["f2"]}],
		"updates":[{"observation_id":"o2","text":"Bob sold his car","source_fact_ids":["f2"]},
		           {"observation_id":"o1","text":"Alice lives in Bergen","source_fact_ids":["f2"]}],
		"deletes":[]}`), b, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(ops.Creates) != 1 || ops.Creates[0].Text != "Alice moved to Bergen" || len(ops.Creates[0].SourceFactIDs) != 1 {
		t.Fatalf("creates %+v", ops.Creates)
	}
	if len(ops.Updates) != 1 || ops.Updates[0].ObservationID != "o2" {
		t.Fatalf("updates %+v", ops.Updates)
	}
	reasons := ""
	for _, d := range dropped {
		reasons += d.Item + ": " + d.Reason + "\n"
	}
	for _, want := range []string{"create 2: no source_fact_ids", "create 3: repeats", "create 4: repeats", "create 5: text is empty", "update of o1: none of its source facts recalled"} {
		if !strings.Contains(reasons, want) {
			t.Errorf("dropped lacks %q:\n%s", want, reasons)
		}
	}

	// Items that name observations outside the pool, or a runaway number
	// of deletes, are dropped with their reason; the rest of the answer
	// stands.
	for _, tc := range []struct {
		answer     string
		code, want string
		facts      []string
		creates    int
	}{
		{`{"creates":[{"text":"Bob sold his car in May","source_fact_ids":["f2"]}],"updates":[{"observation_id":"o99","text":"x","source_fact_ids":["f1"]}]}`,
			DropUnknownObservation, "not among the existing observations", []string{"f1"}, 1},
		{`{"creates":[{"text":"Bob sold his car in May","source_fact_ids":["f2"]}],"deletes":[{"observation_id":"o99"}]}`,
			DropUnknownObservation, "not among the existing observations", nil, 1},
		{`{"creates":[{"text":"Bob sold his car in May","source_fact_ids":["f2"]}],"deletes":[{"observation_id":"o1"},{"observation_id":"o2"},{"observation_id":"o3"}]}`,
			DropExcessDeletes, "deletes 3 of 3", nil, 1},
		{`{"creates":[{"text":"` + strings.Repeat("long ", 900) + `","source_fact_ids":["f1"]}]}`,
			DropBadText, "longer than 4000 bytes", []string{"f1"}, 0},
	} {
		ops, dropped, err := Validate(parse(tc.answer), b, nil)
		if err != nil || len(ops.Creates) != tc.creates || len(ops.Deletes) != 0 || len(ops.Updates) != 0 {
			t.Errorf("%.80s: %v %+v", tc.answer, err, ops)
			continue
		}
		found := false
		for _, d := range dropped {
			if d.Code == tc.code && strings.Contains(d.Reason, tc.want) && strings.Join(d.Facts, ",") == strings.Join(tc.facts, ",") {
				found = true
				if !d.Lossy() {
					t.Errorf("%s must count as losing its facts", d.Code)
				}
			}
		}
		if !found {
			t.Errorf("%.80s: dropped %+v, want %s %q naming %v", tc.answer, dropped, tc.code, tc.want, tc.facts)
		}
	}

	// Capacity: a hard cap on creates.
	b.Remaining = 1
	ops, _, _ = Validate(parse(`{"creates":[{"text":"one","source_fact_ids":["f1"]},{"text":"two","source_fact_ids":["f2"]}]}`), b, nil)
	if len(ops.Creates) != 1 {
		t.Fatalf("capacity: %d creates", len(ops.Creates))
	}
}

func TestTrigramSimilarityChineseAndEnglish(t *testing.T) {
	zh1, zh2, zh3 := Trigrams("张伟在北京的阿里巴巴担任产品经理"), Trigrams("张伟离开了阿里巴巴"), Trigrams("今天天气很好")
	if Similarity(zh1, zh2) <= Similarity(zh1, zh3) || Similarity(zh1, zh2) < 0.1 {
		t.Fatalf("Chinese similarity: related %.2f unrelated %.2f", Similarity(zh1, zh2), Similarity(zh1, zh3))
	}
	en1, en2, en3 := Trigrams("Alice works at Acme Corp"), Trigrams("Alice left Acme"), Trigrams("The weather is nice")
	if Similarity(en1, en2) <= Similarity(en1, en3) {
		t.Fatal("English similarity ordering")
	}
}

func TestSystemPromptFollowsTheSeed(t *testing.T) {
	p := SystemPrompt("")
	order := []string{"You are a memory consolidation system.", "## MISSION\n" + DefaultMission, "Processing rules (always apply):", "9. NEVER merge observations", "Output a JSON object with three arrays.", `Return {"creates": [], "updates": [], "deletes": []} if nothing durable is found.`}
	last := -1
	for _, s := range order {
		i := strings.Index(p, s)
		if i <= last {
			t.Fatalf("%q missing or out of order", s)
		}
		last = i
	}
	if MissionHash("") != MissionHash(DefaultMission) || MissionHash("Track pets") == MissionHash("") {
		t.Fatal("mission hash")
	}
	u := UserPrompt(CapacityNote(10, 10), []Fact{{ID: "f1", Text: "x"}}, nil)
	if !strings.HasPrefix(u, "## CAPACITY CONSTRAINT\n") || !strings.Contains(u, "NEW FACTS:\n[f1] x\n") {
		t.Fatalf("user prompt:\n%s", u)
	}
}
