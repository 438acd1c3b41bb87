package consolidation

import (
	"errors"
	"testing"
	"time"
)

// ParseFact accepts a fact and names the field of each error.
func TestParseFact(t *testing.T) {
	f, err := ParseFact([]byte(`{"id":"x1","text":"Alice moved","entities":["Alice"],"tags":["t"],"occurredStart":"2024-09-01","occurredEnd":"2024-10-01T08:00:00Z","mentionedAt":"2024-10-02T00:00:00.5+02:00"}`))
	if err != nil {
		t.Fatal(err)
	}
	start, end := time.Date(2024, 9, 1, 0, 0, 0, 0, time.UTC), time.Date(2024, 10, 1, 8, 0, 0, 0, time.UTC)
	if f.ID != "x1" || f.Text != "Alice moved" || len(f.Entities) != 1 || f.Tags[0] != "t" ||
		!f.OccurredStart.Equal(start) || !f.OccurredEnd.Equal(end) || f.MentionedAt.UnixMilli() != time.Date(2024, 10, 1, 22, 0, 0, 500e6, time.UTC).UnixMilli() {
		t.Fatalf("%+v", f)
	}
	if f, err := ParseFact([]byte(`{"text":"same day","occurredStart":"2024-09-01","occurredEnd":"2024-09-01"}`)); err != nil || f.OccurredStart == nil || f.MentionedAt != nil {
		t.Fatalf("an end equal to the start: %v %+v", err, f)
	}
	for _, tc := range []struct {
		in, field, msg string
	}{
		{"{\"text\":\"a\xff\"}", "", "not valid UTF-8"},
		{`{"text":5}`, "text", "text: a JSON number where a string is wanted"},
		{`{"text":"a","entities":"Alice"}`, "entities", "entities: a JSON string where an array is wanted"},
		{`{"text":"a","tags":{}}`, "tags", "tags: a JSON object where an array is wanted"},
		{`{"text":"a","colour":"red"}`, "colour", `unknown field "colour"`},
		{`{"text":"a"} {"text":"b"}`, "", "more than one JSON value on the line (one fact per line)"},
		{`{"text":"a"} x`, "", "more than one JSON value on the line (one fact per line)"},
		{`{"text":"  "}`, "text", "text is required"},
		{`{}`, "text", "text is required"},
		{`{"text":"a","occurredStart":"yesterday"}`, "occurredStart", `occurredStart "yesterday" is neither RFC 3339 nor YYYY-MM-DD`},
		{`{"text":"a","occurredEnd":"2024-13-01"}`, "occurredEnd", `occurredEnd "2024-13-01" is neither RFC 3339 nor YYYY-MM-DD`},
		{`{"text":"a","mentionedAt":"1 May"}`, "mentionedAt", `mentionedAt "1 May" is neither RFC 3339 nor YYYY-MM-DD`},
		{`{"text":"a","occurredStart":"2024-09-02","occurredEnd":"2024-09-01"}`, "occurredEnd", `occurredEnd "2024-09-01" is before occurredStart "2024-09-02"`},
		{`{"text":"a",`, "", "the JSON ends early"},
		// The names of before the API was camelCase, refused naming the new.
		{`{"text":"a","occurred_start":"2024-09-01"}`, "occurred_start", "occurred_start: a field renamed occurredStart (the API's fields are camelCase)"},
		{`{"text":"a","occurred_end":"2024-09-01"}`, "occurred_end", "occurred_end: a field renamed occurredEnd (the API's fields are camelCase)"},
		{`{"text":"a","mentioned_at":"2024-09-01"}`, "mentioned_at", "mentioned_at: a field renamed mentionedAt (the API's fields are camelCase)"},
	} {
		_, err := ParseFact([]byte(tc.in))
		if err == nil || err.Error() != tc.msg {
			t.Errorf("%s: error %v, want %q", tc.in, err, tc.msg)
			continue
		}
		var fe *FieldError
		if got := errors.As(err, &fe); got != (tc.field != "") || got && fe.Field != tc.field {
			t.Errorf("%s: field error %v %+v, want field %q", tc.in, got, fe, tc.field)
		}
	}
}

// A fact without an id gets one from the bank, its text and its times:
// the same again gets the same id; entities and tags do not count; the
// parts cannot run into each other.
func TestDerivedFactID(t *testing.T) {
	day := func(s string) *time.Time { v, _ := time.Parse("2006-01-02", s); return &v }
	base := Fact{Text: "Alice moved", OccurredStart: day("2024-09-01")}
	id := DerivedFactID("ns/bank", base)
	if id != DerivedFactID("ns/bank", Fact{Text: "Alice moved", OccurredStart: day("2024-09-01"), Entities: []string{"Alice"}, Tags: []string{"t"}}) {
		t.Fatal("entities and tags changed the id")
	}
	inZone := time.Date(2024, 9, 1, 2, 0, 0, 0, time.FixedZone("CEST", 2*3600))
	if id != DerivedFactID("ns/bank", Fact{Text: "Alice moved", OccurredStart: &inZone}) {
		t.Fatal("the same instant in another zone changed the id")
	}
	seen := map[string]string{id: "base"}
	for name, f := range map[string]struct {
		bank BankID
		f    Fact
	}{
		"bank":      {"ns/other", base},
		"text":      {"ns/bank", Fact{Text: "Alice moved.", OccurredStart: base.OccurredStart}},
		"start":     {"ns/bank", Fact{Text: "Alice moved", OccurredStart: day("2024-09-02")}},
		"end":       {"ns/bank", Fact{Text: "Alice moved", OccurredStart: base.OccurredStart, OccurredEnd: day("2024-09-03")}},
		"mentioned": {"ns/bank", Fact{Text: "Alice moved", OccurredStart: base.OccurredStart, MentionedAt: day("2024-09-03")}},
		"no times":  {"ns/bank", Fact{Text: "Alice moved"}},
		"shifted":   {"ns/ban", Fact{Text: "kAlice moved", OccurredStart: base.OccurredStart}},
	} {
		got := DerivedFactID(f.bank, f.f)
		if other, ok := seen[got]; ok {
			t.Errorf("%s has the id of %s", name, other)
		}
		seen[got] = name
	}
	if len(id) != 36 || id[14] != '8' {
		t.Fatalf("id %q is not a version 8 UUID", id)
	}
}
