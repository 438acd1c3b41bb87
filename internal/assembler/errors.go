package assembler

import "fmt"

// MissingReferenceError: a from reference names a ConfigMap that does not
// exist (fallback text or not), or a key the ConfigMap lacks and the section
// or intent has no fallback text. It is the operator's ReferenceNotFound and
// heals by itself when the ConfigMap or key appears.
type MissingReferenceError struct {
	Where     string // "section base_system" or "intent chat"
	ConfigMap string
	Key       string
	// NoConfigMap is true when the ConfigMap itself does not exist, false
	// when it exists without the key.
	NoConfigMap bool
	// HasFallback is true when the section or intent has a fallback text,
	// which stands in for a missing key only.
	HasFallback bool
}

func (e *MissingReferenceError) Error() string {
	switch {
	case e.NoConfigMap && e.HasFallback:
		return fmt.Sprintf("%s reads key %q of ConfigMap %q, which does not exist: create the ConfigMap (a fallback text stands in only for a key missing from a ConfigMap that exists)", e.Where, e.Key, e.ConfigMap)
	case e.NoConfigMap:
		return fmt.Sprintf("%s reads key %q of ConfigMap %q, which does not exist: create the ConfigMap", e.Where, e.Key, e.ConfigMap)
	}
	return fmt.Sprintf("%s reads key %q, which ConfigMap %q lacks, and has no fallback text: add the key to the ConfigMap or text to the %s", e.Where, e.Key, e.ConfigMap, e.Where)
}

// UnknownVariableError: a text uses {{ name }} for a variable the template
// does not define.
type UnknownVariableError struct {
	Where string
	Name  string
}

func (e *UnknownVariableError) Error() string {
	return fmt.Sprintf("%s uses the variable {{ %s }}, which spec.variables does not define", e.Where, e.Name)
}

// InvalidSpecError: the spec breaks a rule the CRD also checks. It is only
// seen where no apiserver validated the manifest (promptops render).
type InvalidSpecError struct {
	Field   string
	Message string
}

func (e *InvalidSpecError) Error() string { return e.Field + ": " + e.Message }

// TooLargeError: what the template renders to is over a limit the API
// server enforces (a ConfigMap's 1 MiB), or a text grew past
// MaxExpandedText once its variables were substituted. Nothing changes
// until the spec, its variables or a referenced ConfigMap does.
type TooLargeError struct {
	Where string // "section role", "intent chat" or "the rendered ConfigMap"
	Size  int
	Limit int
	Unit  string // "characters" or "bytes"
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("%s is %d %s, over the limit of %d", e.Where, e.Size, e.Unit, e.Limit)
}
