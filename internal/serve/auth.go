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
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
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
func (s *Server) authenticated(h http.Handler) http.Handler {
	if s.auth == nil {
		return h
	}
	return s.handle(func(w http.ResponseWriter, r *http.Request) error {
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
			return problem(http.StatusUnauthorized, CodeUnauthorized, "a valid Kubernetes bearer token is required (Authorization: Bearer <ServiceAccount token>)")
		}
		r.Header.Del("Authorization") // nothing after this needs it
		h.ServeHTTP(w, r.WithContext(request.WithUser(r.Context(), res.User)))
		return nil
	})
}

// templateAttributes asks for get on the PromptTemplate k; an empty
// k.Name asks for every template of k.Namespace.
func templateAttributes(k Key) authorizer.AttributesRecord {
	return authorizer.AttributesRecord{Verb: "get", Namespace: k.Namespace, Name: k.Name,
		APIGroup: promptTemplates.Group, APIVersion: promptTemplates.Version, Resource: promptTemplates.Resource,
		ResourceRequest: true}
}

// bankAttributes asks for verb on the MemoryBank k's subresource.
func bankAttributes(k Key, verb, subresource string) authorizer.AttributesRecord {
	return authorizer.AttributesRecord{Verb: verb, Namespace: k.Namespace, Name: k.Name,
		APIGroup: memoryBanks.Group, APIVersion: memoryBanks.Version, Resource: memoryBanks.Resource, Subresource: subresource,
		ResourceRequest: true}
}

// metricsAttributes asks for get on the non-resource URL /metrics (the
// promptops-metrics-reader ClusterRole), as the manager's secure metrics
// do: metrics name every template and revision, which tenants may not see.
func metricsAttributes(*http.Request) authorizer.AttributesRecord {
	return authorizer.AttributesRecord{Verb: "get", Path: "/metrics"}
}

// allowed says whether the request's user may do a (its User is set here);
// without Auth everyone may. An error is the check's own failure.
func (s *Server) allowed(ctx context.Context, a authorizer.AttributesRecord) (bool, error) {
	if s.auth == nil {
		return true, nil
	}
	u, ok := request.UserFrom(ctx)
	if !ok {
		return false, nil
	}
	a.User = u
	d, _, err := s.auth.authz.Authorize(ctx, a)
	return d == authorizer.DecisionAllow, err
}

// authorize returns nil when the request's user may do a, else the
// answer: 403, or 500 when the check itself failed (as kube-apiserver and
// controller-runtime's metrics filter answer). Every endpoint's
// authorization goes through it.
func (s *Server) authorize(r *http.Request, a authorizer.AttributesRecord) error {
	ok, err := s.allowed(r.Context(), a)
	switch {
	case err != nil && !ok:
		// The attributes name the template or bank, never a scope or id.
		s.log.Error(err, "Authorization check failed", "namespace", a.Namespace, "name", a.Name, "resource", a.Resource, "path", a.Path)
		s.metrics.authDenied.WithLabelValues("error").Inc()
		return problem(http.StatusInternalServerError, CodeInternal, "the authorization check failed")
	case !ok:
		s.metrics.authDenied.WithLabelValues("forbidden").Inc()
		return problem(http.StatusForbidden, CodeForbidden, forbidden(a))
	}
	return nil
}

// forbidden says what the caller may not do, as kube-apiserver says it.
func forbidden(a authorizer.AttributesRecord) string {
	if !a.ResourceRequest {
		return fmt.Sprintf("you may not %s %s", a.Verb, a.Path)
	}
	resource := a.Resource
	if a.Subresource != "" {
		resource += "/" + a.Subresource
	}
	return fmt.Sprintf("you may not %s %s %s %s in namespace %s", a.Verb, a.APIGroup, resource, a.Name, a.Namespace)
}

// authorized passes only the requests whose user may do what attrs says.
func (s *Server) authorized(attrs func(*http.Request) authorizer.AttributesRecord, h http.Handler) http.Handler {
	if s.auth == nil {
		return h
	}
	return s.handle(func(w http.ResponseWriter, r *http.Request) error {
		if err := s.authorize(r, attrs(r)); err != nil {
			return err
		}
		h.ServeHTTP(w, r)
		return nil
	})
}

// visibleTemplates filters keys to those the request's user may get: a namespace
// whose templates the user may all get costs one check, the others one per
// template (each cached).
func (s *Server) visibleTemplates(ctx context.Context, keys []Key) []Key {
	if s.auth == nil {
		return keys
	}
	out := make([]Key, 0, len(keys))
	whole := map[string]bool{}
	for _, k := range keys {
		all, seen := whole[k.Namespace]
		if !seen {
			all, _ = s.allowed(ctx, templateAttributes(Key{Namespace: k.Namespace}))
			whole[k.Namespace] = all
		}
		if ok := all; !ok {
			ok, _ = s.allowed(ctx, templateAttributes(k))
			if !ok {
				continue
			}
		}
		out = append(out, k)
	}
	return out
}
