package serve

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Error codes of --auth=kubernetes.
const (
	CodeUnauthorized = "Unauthorized"
	CodeForbidden    = "Forbidden"
)

// Auth checks callers with the API server: a TokenReview of the bearer
// token, then a SubjectAccessReview for get on the PromptTemplate a request
// is about, both cached (as controller-runtime's secure metrics filter and
// kube-rbac-proxy do).
type Auth struct {
	authn authenticator.Request
	authz authorizer.Authorizer
}

// retryBackoff is k8s.io/apiserver's DefaultAuthWebhookRetryBackoff.
func retryBackoff() *wait.Backoff {
	return &wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}
}

// NewKubernetesAuth checks callers with the API server of cfg; its user
// needs create on tokenreviews and subjectaccessreviews.
func NewKubernetesAuth(cfg *rest.Config) (*Auth, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	authn, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous:                &apiserver.AnonymousAuthConfig{Enabled: false},
		CacheTTL:                 time.Minute,
		TokenAccessReviewClient:  cs.AuthenticationV1(),
		TokenAccessReviewTimeout: 10 * time.Second,
		WebhookRetryBackoff:      retryBackoff(),
	}.New()
	if err != nil {
		return nil, fmt.Errorf("the TokenReview authenticator: %w", err)
	}
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: cs.AuthorizationV1(),
		AllowCacheTTL:             time.Minute,
		DenyCacheTTL:              10 * time.Second,
		WebhookRetryBackoff:       retryBackoff(),
	}.New()
	if err != nil {
		return nil, fmt.Errorf("the SubjectAccessReview authorizer: %w", err)
	}
	return &Auth{authn: authn, authz: authz}, nil
}

// authenticated answers 401 to a request without a valid bearer token and
// passes the others on with their user in the context. Without Auth it
// passes every request.
func (s *Server) authenticated(h func(http.ResponseWriter, *http.Request) int) func(http.ResponseWriter, *http.Request) int {
	if s.auth == nil {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request) int {
		res, ok, err := s.auth.authn.AuthenticateRequest(r)
		if !ok {
			// A token the API server rejects comes back as an error too
			// (a TokenReview status error): both are 401. The error names
			// no token.
			if err != nil {
				s.log.V(1).Info("Authentication failed", "error", err.Error())
			}
			s.metrics.authDenied.WithLabelValues("unauthenticated").Inc()
			w.Header().Set("WWW-Authenticate", `Bearer realm="promptops"`)
			return writeError(w, http.StatusUnauthorized, CodeUnauthorized, "a valid Kubernetes bearer token is required (Authorization: Bearer <ServiceAccount token>)")
		}
		r.Header.Del("Authorization") // nothing after this needs it
		return h(w, r.WithContext(request.WithUser(r.Context(), res.User)))
	}
}

// may says whether the request's user may get the PromptTemplate k; an
// empty k.Name asks for every template of k.Namespace. Without Auth
// everyone may.
func (s *Server) may(ctx context.Context, k Key) (bool, error) {
	if s.auth == nil {
		return true, nil
	}
	u, ok := request.UserFrom(ctx)
	if !ok {
		return false, nil
	}
	return s.auth.allowed(ctx, u, "get", k)
}

func (a *Auth) allowed(ctx context.Context, u user.Info, verb string, k Key) (bool, error) {
	d, _, err := a.authz.Authorize(ctx, authorizer.AttributesRecord{
		User: u, Verb: verb, Namespace: k.Namespace, Name: k.Name,
		APIGroup: promptTemplates.Group, APIVersion: promptTemplates.Version, Resource: promptTemplates.Resource,
		ResourceRequest: true,
	})
	return d == authorizer.DecisionAllow, err
}

// authorize answers 403 (or 500 when the check itself failed) unless the
// request's user may get the template k; it returns 0 when it may.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request, k Key) int {
	ok, err := s.may(r.Context(), k)
	if err != nil {
		s.log.Error(err, "Authorization check failed", "template", k)
		s.metrics.authDenied.WithLabelValues("error").Inc()
		return writeError(w, http.StatusInternalServerError, "Internal", "the authorization check failed")
	}
	if !ok {
		s.metrics.authDenied.WithLabelValues("forbidden").Inc()
		return writeError(w, http.StatusForbidden, CodeForbidden, fmt.Sprintf("you may not get promptops.io prompttemplates %s in namespace %s", k.Name, k.Namespace))
	}
	return 0
}

// visible filters keys to those the request's user may get: a namespace
// whose templates the user may all get costs one check, the others one per
// template (each cached).
func (s *Server) visible(ctx context.Context, keys []Key) []Key {
	if s.auth == nil {
		return keys
	}
	out := make([]Key, 0, len(keys))
	whole := map[string]bool{}
	for _, k := range keys {
		all, seen := whole[k.Namespace]
		if !seen {
			all, _ = s.may(ctx, Key{Namespace: k.Namespace})
			whole[k.Namespace] = all
		}
		if ok := all; !ok {
			ok, _ = s.may(ctx, k)
			if !ok {
				continue
			}
		}
		out = append(out, k)
	}
	return out
}

// metricsAuthorized guards /metrics under Auth as the manager's secure
// metrics are guarded: a token of a subject allowed get on the
// non-resource URL /metrics (the promptops-metrics-reader ClusterRole).
// Metrics name every template and revision, which tenants may not see.
func (s *Server) metricsAuthorized(h http.Handler) http.Handler {
	if s.auth == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res, ok, _ := s.auth.authn.AuthenticateRequest(r)
		if !ok {
			s.metrics.authDenied.WithLabelValues("unauthenticated").Inc()
			writeError(w, http.StatusUnauthorized, CodeUnauthorized, "a valid Kubernetes bearer token is required")
			return
		}
		d, _, err := s.auth.authz.Authorize(r.Context(), authorizer.AttributesRecord{User: res.User, Verb: "get", Path: r.URL.Path})
		if err != nil || d != authorizer.DecisionAllow {
			s.metrics.authDenied.WithLabelValues("forbidden").Inc()
			writeError(w, http.StatusForbidden, CodeForbidden, "you may not get /metrics")
			return
		}
		h.ServeHTTP(w, r)
	})
}
