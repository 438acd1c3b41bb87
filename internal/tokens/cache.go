package tokens

import (
	"container/list"
	"sync"
)

// lru is a bounded least-recently-used cache of token counts keyed by the
// SHA-256 of the text. One lru belongs to one encoding, so the key is the
// encoding plus the hash.
type lru struct {
	mu    sync.Mutex
	max   int
	ll    *list.List
	items map[[32]byte]*list.Element
	hits  uint64
	miss  uint64
}

type lruEntry struct {
	key [32]byte
	n   int
}

func newLRU(max int) *lru {
	return &lru{max: max, ll: list.New(), items: make(map[[32]byte]*list.Element, max)}
}

func (c *lru) get(k [32]byte) (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[k]; ok {
		c.ll.MoveToFront(el)
		c.hits++
		return el.Value.(*lruEntry).n, true
	}
	c.miss++
	return 0, false
}

func (c *lru) put(k [32]byte, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[k]; ok {
		el.Value.(*lruEntry).n = n
		c.ll.MoveToFront(el)
		return
	}
	c.items[k] = c.ll.PushFront(&lruEntry{key: k, n: n})
	for c.ll.Len() > c.max {
		old := c.ll.Back()
		c.ll.Remove(old)
		delete(c.items, old.Value.(*lruEntry).key)
	}
}

// CacheStats reports the count cache's size, hits and misses.
type CacheStats struct {
	Entries, Max int
	Hits, Misses uint64
}

// CacheStats returns the encoder's cache figures.
func (e *Encoder) CacheStats() CacheStats {
	e.cache.mu.Lock()
	defer e.cache.mu.Unlock()
	return CacheStats{Entries: e.cache.ll.Len(), Max: e.cache.max, Hits: e.cache.hits, Misses: e.cache.miss}
}
