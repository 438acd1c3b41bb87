package analysis

import (
	"errors"
	"testing"
)

func TestSubstitute(t *testing.T) {
	for _, tc := range []struct {
		query, revision, want string
		invalid               bool
	}{
		{query: "up", want: "up"},
		{query: "up", revision: "r1", want: "up"},
		{query: "x{revision={{revision}}}", revision: "r1", want: `x{revision="r1"}`},
		{query: "x{revision={{  revision\t}}}", revision: "r1", want: `x{revision="r1"}`},
		{query: "x{r={{revision}}} / y{r={{revision}}}", revision: "r1", want: `x{r="r1"} / y{r="r1"}`},
		{query: "x{r={{revision}}}", revision: "a\"b\\c\nd", want: `x{r="a\"b\\c\nd"}`},
		{query: "x{r={{revision}}}", revision: "é\x00", want: `x{r="é\x00"}`},
		{query: "{{revision}}", revision: "r1", want: `"r1"`},
		{query: "{{Revision}}", revision: "r1", want: "{{Revision}}"},
		{query: "x{r={{revision}}}", invalid: true},
		{query: "x{r={{revision}}}", revision: "\xff", invalid: true},
		{query: `x{r="{{revision}}"}`, revision: "r1", invalid: true},
		{query: `x{r='{{revision}}'}`, revision: "r1", invalid: true},
		{query: "x{r=`{{revision}}`}", revision: "r1", invalid: true},
		{query: `x{s="a"} + y{r={{revision}}} + z{r="{{revision}}"}`, revision: "r1", invalid: true},
	} {
		got, err := substitute(tc.query, tc.revision)
		if tc.invalid {
			var ae *Error
			if !errors.As(err, &ae) || ae.Kind != Invalid {
				t.Errorf("substitute(%q, %q) = %q, %v; want an Invalid error", tc.query, tc.revision, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("substitute(%q, %q) = %q, %v; want %q", tc.query, tc.revision, got, err, tc.want)
		}
	}
}
