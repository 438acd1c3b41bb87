package operator

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/promptops/promptops/internal/webhook"
)

// renewCheck is how often a self-signed manager looks at its certificate.
const renewCheck = time.Hour

// certKeeper renews the self-signed webhook certificate and keeps the
// caBundle of the webhook configuration equal to its CA. It runs on every
// replica (not only the leader): each serves webhooks.
type certKeeper struct {
	certs         *webhook.SelfSigned
	client        client.Client
	configuration string
	ca            []byte
}

func (k *certKeeper) NeedLeaderElection() bool { return false }

func (k *certKeeper) Start(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithName("webhook-certs")
	k.patch(ctx, log)
	t := time.NewTicker(renewCheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			ca, renewed, err := k.certs.Ensure()
			if err != nil {
				log.Error(err, "Renewing the webhook certificate")
				continue
			}
			if renewed {
				log.Info("Renewed the webhook certificate")
				k.ca = ca
				k.patch(ctx, log)
			}
		}
	}
}

// patch writes the caBundle, retrying until it succeeds: the configuration
// may be applied after the manager starts.
func (k *certKeeper) patch(ctx context.Context, log logr.Logger) {
	if k.configuration == "" {
		return
	}
	backoff := wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Steps: 12, Cap: time.Minute}
	var last error
	err := wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
		last = webhook.PatchCABundle(ctx, k.client, k.configuration, k.ca)
		return last == nil, nil
	})
	if err != nil {
		log.Error(last, "Could not set the webhook configuration's caBundle", "configuration", k.configuration)
		return
	}
	log.Info("Set the webhook configuration's caBundle", "configuration", k.configuration)
}
