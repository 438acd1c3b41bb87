package extraction

import (
	"strings"
	"testing"
	"time"

	"github.com/promptops/promptops/internal/consolidation"
)

func TestParse(t *testing.T) {
	labels := []string{"m1", "msg-7"}
	good := `{"facts": [{"text": " The user prefers tea. ", "source_message_ids": ["m1", "msg-7", "m1"], "occurred_start": "2026-03-01", "occurred_end": "2026-03-02T10:00:00Z", "entities": ["tea"]}]}`
	got, err := Parse(good, labels)
	if err != nil || len(got) != 1 {
		t.Fatalf("%v %v", got, err)
	}
	f := got[0]
	if f.Text != "The user prefers tea." || len(f.Messages) != 2 || f.Messages[0] != 0 || f.Messages[1] != 1 ||
		!f.OccurredStart.Equal(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)) || f.OccurredEnd == nil || f.Entities[0] != "tea" {
		t.Errorf("%+v", f)
	}
	if got, err := Parse(`{"facts": []}`, labels); err != nil || len(got) != 0 {
		t.Errorf("no facts: %v %v", got, err)
	}
	many := `{"facts": [` + strings.TrimSuffix(strings.Repeat(`{"text": "x", "source_message_ids": ["m1"]},`, 2*MaxFactsPerMessage+1), ",") + `]}`
	for name, c := range map[string]struct{ answer, want string }{
		"not json":       {`{"facts": [`, ""},
		"no facts":       {`{}`, `"facts" is required`},
		"unknown field":  {`{"facts": [], "creates": []}`, "creates"},
		"repeated":       {`{"facts": [], "facts": []}`, "facts"},
		"empty text":     {`{"facts": [{"text": " ", "source_message_ids": ["m1"]}]}`, "facts[0].text: is empty"},
		"long text":      {`{"facts": [{"text": "` + strings.Repeat("x", MaxFactText+1) + `", "source_message_ids": ["m1"]}]}`, "facts[0].text:"},
		"no source":      {`{"facts": [{"text": "x", "source_message_ids": []}]}`, "facts[0].source_message_ids: cite at least one"},
		"other message":  {`{"facts": [{"text": "x", "source_message_ids": ["m3"]}]}`, `facts[0].source_message_ids[0]: "m3" is not the id`},
		"bad time":       {`{"facts": [{"text": "x", "source_message_ids": ["m1"], "occurred_start": "yesterday"}]}`, "facts[0].occurred_start:"},
		"end before":     {`{"facts": [{"text": "x", "source_message_ids": ["m1"], "occurred_start": "2026-03-02", "occurred_end": "2026-03-01"}]}`, "facts[0].occurred_end: before"},
		"empty entity":   {`{"facts": [{"text": "x", "source_message_ids": ["m1"], "entities": [""]}]}`, "facts[0].entities[0]"},
		"too many facts": {many, "at most 32 for 2 messages"},
		"too many ids":   {`{"facts": [{"text": "x", "source_message_ids": ["m1", "m1", "m1", "m1", "m1"]}]}`, "5 ids"},
	} {
		if _, err := Parse(c.answer, labels); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
}

func TestLeastTrusted(t *testing.T) {
	msg := func(r consolidation.MessageRole) consolidation.Message { return consolidation.Message{Role: r} }
	everyone := consolidation.Trust{}
	trustAssistant, err := consolidation.NewTrust([]string{"assistant", "system"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		trust consolidation.Trust
		roles []consolidation.MessageRole
		want  string
	}{
		{everyone, []consolidation.MessageRole{"assistant"}, "assistant"},
		{everyone, []consolidation.MessageRole{"assistant", "user"}, "user"},
		{everyone, []consolidation.MessageRole{"system", "tool"}, "tool"},
		{trustAssistant, []consolidation.MessageRole{"assistant", "user"}, "user"},
		{trustAssistant, []consolidation.MessageRole{"system", "assistant"}, "assistant"},
		{trustAssistant, []consolidation.MessageRole{"assistant", "tool"}, "tool"},
	} {
		var msgs []consolidation.Message
		for _, r := range c.roles {
			msgs = append(msgs, msg(r))
		}
		if got := LeastTrusted(c.trust, msgs); got != c.want {
			t.Errorf("%v under %v: %q, want %q", c.roles, c.trust.Sources(), got, c.want)
		}
	}
}

func TestLineAndPrompt(t *testing.T) {
	m := consolidation.Message{Role: consolidation.RoleUser, At: time.Date(2026, 3, 1, 9, 30, 0, 0, time.FixedZone("x", 3600))}
	if got := Line("m1", m, "first\r\nsecond", ""); got != "[m1] user (2026-03-01T08:30:00Z): first\n    second" {
		t.Errorf("%q", got)
	}
	if got := Line("m1", m, "x", "part 2 of 3"); got != "[m1] user (2026-03-01T08:30:00Z, part 2 of 3): x" {
		t.Errorf("%q", got)
	}
	u := UserPrompt([]string{"[a] user (t): hi"}, []string{"[b] user (t): I prefer tea."}, "")
	if u != "EARLIER MESSAGES:\n[a] user (t): hi\n\nNEW MESSAGES:\n[b] user (t): I prefer tea.\n" {
		t.Errorf("%q", u)
	}
	if !strings.Contains(SystemPrompt(""), consolidation.DefaultMission) || !strings.HasPrefix(SystemPrompt("Track pets"), "## MISSION OF THIS MEMORY BANK\nTrack pets\n") {
		t.Error("the system prompt does not start with the mission")
	}
}

// FuzzParse: any answer is refused or gives facts that hold to the
// bounds, citing messages of the batch only; never a panic.
func FuzzParse(f *testing.F) {
	f.Add(`{"facts": [{"text": "The user prefers tea.", "source_message_ids": ["m1"], "occurred_start": "2026-03-01"}]}`)
	f.Add(`{"facts": [{"text": "x", "source_message_ids": ["m2", "m1"], "entities": ["a", "b"]}]}`)
	f.Add(`{"facts": []}`)
	f.Add(`{"facts": [{"text": "\u0000", "source_message_ids": ["m1"]}], "x": 1}`)
	f.Fuzz(func(t *testing.T, answer string) {
		facts, err := Parse(answer, []string{"m1", "m2"})
		if err != nil {
			return
		}
		if len(facts) > 2*MaxFactsPerMessage {
			t.Fatalf("%d facts", len(facts))
		}
		for _, x := range facts {
			if x.Text == "" || len(x.Text) > MaxFactText || len(x.Messages) == 0 || len(x.Entities) > MaxEntities {
				t.Fatalf("%+v", x)
			}
			for _, k := range x.Messages {
				if k < 0 || k > 1 {
					t.Fatalf("cites %d", k)
				}
			}
		}
	})
}
