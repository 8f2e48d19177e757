package cache

import "sync"

// budget is the retry/hedge token bucket of gRPC A6 (retry throttling):
// failures take a token, successes give back ratio; extra requests are
// allowed only while more than half the tokens remain.
type budget struct {
	mu     sync.Mutex
	max    float64
	ratio  float64
	tokens float64
}

func newBudget(max, ratio float64) *budget {
	return &budget{max: max, ratio: ratio, tokens: max}
}

func (b *budget) success() {
	b.mu.Lock()
	b.tokens = min(b.max, b.tokens+b.ratio)
	b.mu.Unlock()
}

func (b *budget) failure() {
	b.mu.Lock()
	b.tokens = max(0, b.tokens-1)
	b.mu.Unlock()
}

func (b *budget) allow() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.tokens > b.max/2
}
