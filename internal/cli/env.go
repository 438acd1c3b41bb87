package cli

import (
	"flag"
	"net/url"
	"os"
	"regexp"
	"strings"
)

// lookupEnv is os.LookupEnv, replaceable in tests.
var lookupEnv = os.LookupEnv

// envDefault returns the environment variable's value when set, else def. It
// lets every flag of a Job-run verb be set from the environment.
func envDefault(lookup func(string) (string, bool), key, def string) string {
	if v, ok := lookup(key); ok && strings.TrimSpace(v) != "" {
		return v
	}
	return def
}

// envStringVar defines a string flag whose default is $env when set (else
// def), and whose default -h shows masked (shownDefault): help output ends
// up in CI logs and tickets, and the store's DSN holds a password.
func envStringVar(fs *flag.FlagSet, p *string, name, env, def, usage string) {
	fs.StringVar(p, name, envDefault(lookupEnv, env, def), usage)
	if f := fs.Lookup(name); f.DefValue != def {
		f.DefValue = shownDefault(env, f.DefValue)
	}
}

// secretEnvRE matches the names of variables that hold a secret as a whole
// (OPENAI_API_KEY, ..._TOKEN, ..._PASSWORD); a ..._FILE names a file.
var secretEnvRE = regexp.MustCompile(`(?i)(^|_)(API_?KEY|KEY|TOKEN|PASSWORD|PASSWD|SECRET|CREDENTIALS?)$`)

// shownDefault is how -h shows the value of env as a flag's default: not at
// all ("") when the variable's name says it is a secret, else with the
// passwords of URLs and DSNs in it as *** (maskSecrets).
func shownDefault(env, value string) string {
	if secretEnvRE.MatchString(env) {
		return ""
	}
	return maskSecrets(value)
}

// Mask is what replaces a password or key in what the binary prints.
const Mask = "***"

var (
	// userinfoRE is the user:password@ of a URL that does not parse.
	userinfoRE = regexp.MustCompile(`(://[^:/?#@\s]*:)[^@\s]*@`)
	// secretParamRE is a key=value DSN's or a query's password, key or
	// token: password=..., password='...', sslpassword=..., api_key=...
	secretParamRE = regexp.MustCompile(`(?i)((?:^|[\s?&;])(?:password|passwd|pwd|sslpassword|secret|token|access_token|api_?key)\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&;]*)`)
)

// maskSecrets returns s with the password of a URL in it
// (postgres://app:***@db/bank) and the values of password, token and key
// parameters (a key=value DSN's password=***, a query's ?password=***)
// replaced by Mask; anything else as it is.
func maskSecrets(s string) string {
	if u, err := url.Parse(s); err == nil && u.User != nil {
		if _, ok := u.User.Password(); ok {
			// Redacted writes xxxxx; *** reads as masked in every tool.
			s = strings.Replace(u.Redacted(), ":xxxxx@", ":"+Mask+"@", 1)
		}
	}
	s = userinfoRE.ReplaceAllString(s, "${1}"+Mask+"@")
	return secretParamRE.ReplaceAllString(s, "${1}"+Mask)
}
