package strictjson

import (
	"strings"
	"testing"
)

type item struct {
	Text string   `json:"text"`
	IDs  []string `json:"ids"`
	N    *int     `json:"n"`
}

type doc struct {
	Items []item          `json:"items"`
	Map   map[string]bool `json:"map"`
}

func TestDescribe(t *testing.T) {
	for _, c := range []struct {
		body, want string
		unknown    bool
		repeated   bool
		trailing   bool
	}{
		{body: `{"items":[{"text":"a","ids":["x"],"n":1}],"map":{"k":true}}`},
		{body: `null`, want: "not a JSON object"},
		{body: ` [1]`, want: "not a JSON object"},
		{body: `{"items":[{"txt":"a"}]}`, want: "items[0].txt: unknown field", unknown: true},
		{body: `{"map":{"a b":true,"a b":false}}`, want: `map."a b": appears twice`, repeated: true},
		{body: `{"items":[],"items":[]}`, want: "items: appears twice", repeated: true},
		{body: `{"items":[{"ids":[1]}]}`, want: "items[0].ids[0]: a JSON number where a string is wanted"},
		{body: `{"items":[{"n":1.5}]}`, want: "items[0].n: a JSON number where an integer is wanted"},
		{body: `{"items":[{"n":"1"}]}`, want: "items[0].n: a JSON string where an integer is wanted"},
		{body: `{"map":[]}`, want: "map: a JSON array where an object is wanted"},
		{body: `{"items":{}}`, want: "items: a JSON object where an array is wanted"},
		{body: `{"map":{"k":null}} {}`, want: "more than one JSON value", trailing: true},
		{body: `{"items":[`, want: "the JSON ends early"},
		{body: "{\"items\":[{\"text\":\"\xff\"}]}", want: "invalid UTF-8 at byte 19"},
		{body: `{"items":[}`, want: "invalid JSON at byte 10"},
	} {
		var d doc
		err := Unmarshal([]byte(c.body), &d)
		if c.want == "" {
			if err != nil {
				t.Errorf("%s: %v", c.body, err)
			}
			continue
		}
		p := Describe(err)
		if p.String() != c.want || p.Unknown != c.unknown || p.Repeated != c.repeated || p.Trailing != c.trailing {
			t.Errorf("%s: %+v (%q), want %q", c.body, p, p.String(), c.want)
		}
	}
	if name := Name(Unmarshal([]byte(`{"items":[{"tëxt~/":1}]}`), &doc{})); name != "tëxt~/" {
		t.Errorf("Name: %q", name)
	}
	// Lenient skips what is no field, and refuses the rest alike.
	var d doc
	if err := Lenient([]byte(`{"other":[1,{"x":null}],"items":[{"text":"a","extra":1}]}`), &d); err != nil || d.Items[0].Text != "a" {
		t.Errorf("Lenient: %v %+v", err, d)
	}
	if err := Lenient([]byte(`{"other":1,"other":2}`), &d); !strings.Contains(Describe(err).String(), "other: appears twice") {
		t.Errorf("Lenient, a repeated name: %v", err)
	}
}
