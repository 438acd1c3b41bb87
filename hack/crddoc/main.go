// Command crddoc writes the field reference of a CRD into a Markdown page,
// between the lines <!-- BEGIN GENERATED: fields --> and
// <!-- END GENERATED: fields -->: one row per field of spec and status,
// with its type, default, bounds and the description kubectl explain shows
// (the Go type's comment). make docs runs it; CI fails when a page is
// stale.
//
//	go run ./hack/crddoc -crd config/crd/bases/promptops.io_prompttemplates.yaml -page docs/spec/v1/prompttemplates.md
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

const (
	begin = "<!-- BEGIN GENERATED: fields -->"
	end   = "<!-- END GENERATED: fields -->"
)

func main() {
	crdPath := flag.String("crd", "", "The CRD's YAML.")
	page := flag.String("page", "", "The Markdown page to write the reference into.")
	flag.Parse()
	if err := run(*crdPath, *page); err != nil {
		fmt.Fprintln(os.Stderr, "crddoc:", err)
		os.Exit(1)
	}
}

func run(crdPath, page string) error {
	data, err := os.ReadFile(crdPath)
	if err != nil {
		return err
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(data, &crd); err != nil {
		return fmt.Errorf("%s: %w", crdPath, err)
	}
	if len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Schema == nil {
		return fmt.Errorf("%s: want one version with a schema", crdPath)
	}
	root := crd.Spec.Versions[0].Schema.OpenAPIV3Schema
	var b strings.Builder
	b.WriteString(begin + "\n")
	fmt.Fprintf(&b, "<!-- go run ./hack/crddoc -crd %s -page %s (make docs) -->\n\n", crdPath, page)
	for _, top := range []string{"spec", "status"} {
		s, ok := root.Properties[top]
		if !ok {
			continue
		}
		fmt.Fprintf(&b, "#### %s\n\n| Field | Type | Default | Bounds | Description |\n| --- | --- | --- | --- | --- |\n", top)
		walk(&b, top, s, slices.Contains(root.Required, top))
		b.WriteString("\n")
	}
	b.WriteString(end)

	old, err := os.ReadFile(page)
	if err != nil {
		return err
	}
	i, j := bytes.Index(old, []byte(begin)), bytes.Index(old, []byte(end))
	if i < 0 || j < i {
		return fmt.Errorf("%s: no %s ... %s lines", page, begin, end)
	}
	out := append(append(append([]byte{}, old[:i]...), b.String()...), old[j+len(end):]...)
	return os.WriteFile(page, out, 0o644)
}

// walk writes a row for each field under s, path first, in name order.
func walk(b *strings.Builder, path string, s apiextensionsv1.JSONSchemaProps, required bool) {
	names := make([]string, 0, len(s.Properties))
	for n := range s.Properties {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		p := s.Properties[n]
		row(b, path+"."+n, p, slices.Contains(s.Required, n))
		child := p
		suffix := ""
		if p.Type == "array" && p.Items != nil && p.Items.Schema != nil {
			child, suffix = *p.Items.Schema, "[]"
		}
		if p.Type == "object" && p.AdditionalProperties != nil && p.AdditionalProperties.Schema != nil {
			child, suffix = *p.AdditionalProperties.Schema, ".*"
		}
		if len(child.Properties) > 0 && !isCondition(path+"."+n) {
			walk(b, path+"."+n+suffix, child, false)
		}
	}
}

// isCondition: the metav1.Condition fields are Kubernetes', documented
// once in the page's conditions table.
func isCondition(path string) bool { return strings.HasSuffix(path, ".conditions") }

func row(b *strings.Builder, path string, p apiextensionsv1.JSONSchemaProps, required bool) {
	typ := p.Type
	switch {
	case p.Type == "array" && p.Items != nil && p.Items.Schema != nil:
		typ = "[]" + p.Items.Schema.Type
	case p.Type == "object" && p.AdditionalProperties != nil && p.AdditionalProperties.Schema != nil:
		typ = "map[string]" + p.AdditionalProperties.Schema.Type
	case p.XIntOrString:
		typ = "int or string"
	}
	if required {
		typ += ", required"
	}
	def := ""
	if p.Default != nil {
		def = "`" + string(p.Default.Raw) + "`"
	}
	var bounds []string
	if len(p.Enum) > 0 {
		var vs []string
		for _, e := range p.Enum {
			var v any
			_ = json.Unmarshal(e.Raw, &v)
			vs = append(vs, fmt.Sprint(v))
		}
		bounds = append(bounds, strings.Join(vs, ", "))
	}
	for _, m := range []struct {
		name string
		v    *float64
	}{{"≥", p.Minimum}, {"≤", p.Maximum}} {
		if m.v != nil {
			bounds = append(bounds, fmt.Sprintf("%s %g", m.name, *m.v))
		}
	}
	for _, m := range []struct {
		name string
		v    *int64
	}{{"length ≥", p.MinLength}, {"length ≤", p.MaxLength}, {"items ≥", p.MinItems}, {"items ≤", p.MaxItems}, {"properties ≤", p.MaxProperties}} {
		if m.v != nil {
			bounds = append(bounds, fmt.Sprintf("%s %d", m.name, *m.v))
		}
	}
	if p.Pattern != "" {
		bounds = append(bounds, "pattern `"+p.Pattern+"`")
	}
	for _, r := range p.XValidations {
		if r.Message != "" {
			bounds = append(bounds, r.Message)
		}
	}
	fmt.Fprintf(b, "| `%s` | %s | %s | %s | %s |\n", path, typ, def, cell(strings.Join(bounds, "; ")), cell(p.Description))
}

// cell is text fit for a table cell: one line, pipes escaped.
func cell(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	return strings.ReplaceAll(s, "|", `\|`)
}
