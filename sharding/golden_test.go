package sharding

// Golden values, computed once when the schemes were released (business:
// SplitMix64 finalizer of 42 mod 16, checked independently in Python).
const (
	goldenHash       = 0xbd2bd78dc8c1cf4e
	goldenBusiness16 = 2
)
