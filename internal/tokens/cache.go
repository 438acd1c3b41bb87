package tokens

import (
	"container/list"
	"sync"
)

// lru is a bounded least-recently-used cache of token counts keyed by the
// SHA-256 of the text. It is one shard of an encoder's countCache, so the
// key needs no encoding.
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

// cacheShards splits an encoder's cache so that concurrent counts rarely
// wait on the same lock.
const cacheShards = 16

// countCache is the count cache of one encoder: LRU shards picked by the
// key's first byte (a SHA-256 byte, so evenly), each bounded by its share.
type countCache struct {
	shards [cacheShards]*lru
	max    int
}

func newCountCache(max int) *countCache {
	c := &countCache{max: max}
	for i := range c.shards {
		c.shards[i] = newLRU(max/cacheShards + 1)
	}
	return c
}

func (c *countCache) shard(k [32]byte) *lru { return c.shards[int(k[0])%cacheShards] }

func (c *countCache) get(k [32]byte) (int, bool) { return c.shard(k).get(k) }

func (c *countCache) put(k [32]byte, n int) { c.shard(k).put(k, n) }

// CacheStats reports the count cache's size, hits and misses.
type CacheStats struct {
	Entries, Max int
	Hits, Misses uint64
}

// CacheStats returns the encoder's cache figures.
func (e *Encoder) CacheStats() CacheStats {
	st := CacheStats{Max: e.cache.max}
	for _, s := range e.cache.shards {
		s.mu.Lock()
		st.Entries += s.ll.Len()
		st.Hits += s.hits
		st.Misses += s.miss
		s.mu.Unlock()
	}
	return st
}
