package assembler

import "fmt"

// MissingReferenceError: a from reference names a ConfigMap or key that does
// not exist and the section or intent has no fallback text. It heals by
// itself when the ConfigMap appears.
type MissingReferenceError struct {
	Where     string // "section base_system" or "intent chat"
	ConfigMap string
	Key       string
}

func (e *MissingReferenceError) Error() string {
	return fmt.Sprintf("%s reads key %q of ConfigMap %q, which does not exist, and has no fallback text: create the ConfigMap key or add text to the %s", e.Where, e.Key, e.ConfigMap, e.Where)
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
