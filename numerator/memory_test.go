package numerator

import (
	"errors"
	"strings"
	"testing"
)

func TestProcessBudget(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		limit, rows int64
	}{
		{MinProcessMemory, MinProcessMemory - MemoryReserve},
		{256 << 20, 96 << 20},
		{1 << 30, 512 << 20},
	} {
		rows, goLimit, err := ProcessBudget(tc.limit)
		if err != nil || rows != tc.rows || goLimit >= tc.limit || goLimit <= rows {
			t.Errorf("ProcessBudget(%d MiB) = %d MiB rows, Go limit %d MiB, %v; want %d MiB rows", tc.limit>>20, rows>>20, goLimit>>20, err, tc.rows>>20)
		}
	}
	if _, _, err := ProcessBudget(64 << 20); !errors.Is(err, ErrBadOptions) || !strings.Contains(err.Error(), "at least 192MiB") {
		t.Errorf("ProcessBudget(64 MiB) = %v, want a refusal naming the minimum", err)
	}
}
