package consolidation

import (
	"context"
	"slices"
	"time"
)

// MessageExpirer is a store that keeps messages (POST .../messages): a
// run's retention erases its expired messages with its expired facts.
type MessageExpirer interface {
	// DeleteExpiredMessages removes the bank's messages, of every scope
	// and status, stored before before, and returns how many.
	DeleteExpiredMessages(ctx context.Context, bank BankID, before time.Time) (int64, error)
}

// expireMessages erases the bank's messages stored more than
// RetentionMaxAge before the run's start, when the store keeps messages
// (one statement: no message is read into memory). It returns how many.
func (e *Engine) expireMessages(ctx context.Context) (int64, error) {
	maxAge := e.Settings.RetentionMaxAge
	me, ok := e.Store.(MessageExpirer)
	if maxAge <= 0 || !ok {
		return 0, nil
	}
	return me.DeleteExpiredMessages(ctx, e.Settings.Bank, e.now().Add(-maxAge))
}

// expireBatch is how many expired fact ids a run reads and erases at a
// time, so that a bank with many expired facts is never held in memory
// whole.
const expireBatch = 500

// expire erases the bank's facts stored more than RetentionMaxAge before
// the run's start, expireBatch at a time, each scope's share of a batch
// as DeleteScopeFacts erases facts by id (in its own transaction: the
// observations citing them go, their other sources are re-queued, and a
// served bank's indexes reload). It returns the facts erased.
func (e *Engine) expire(ctx context.Context) (int64, error) {
	maxAge := e.Settings.RetentionMaxAge
	if maxAge <= 0 {
		return 0, nil
	}
	before := e.now().Add(-maxAge)
	var total int64
	// Each batch starts after the last one's last fact, so a fact the
	// run does not erase is not listed again and every expired fact is
	// read once.
	var after FactCursor
	for {
		expired, next, err := e.Store.ExpiredFacts(ctx, e.Settings.Bank, before, after, expireBatch)
		if err != nil {
			return total, err
		}
		if len(expired) == 0 {
			return total, nil
		}
		keys := make([]ScopeKey, 0, len(expired))
		for k := range expired {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		var erased int64
		for _, k := range keys {
			n, err := e.Store.DeleteScopeFacts(ctx, k, expired[k])
			if err != nil {
				return total, err
			}
			erased += n.Facts
		}
		// An overlapping run may have erased some of them first: they
		// count there, and the cursor moves past them either way.
		total += erased
		after = next
	}
}
