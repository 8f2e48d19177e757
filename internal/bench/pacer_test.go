package bench

import (
	"testing"
	"time"
)

// A paced client's calls are due on a fixed schedule, Clients/Rate apart,
// the clients' schedules spread over one interval; the schedule does not
// slip when a call runs late (due times are not reckoned from the calls).
func TestPacerSchedule(t *testing.T) {
	t.Parallel()
	start := time.Unix(1000, 0)
	cfg := Config{Clients: 4, Rate: 400} // each client 100 a second: 10 ms apart
	if p := newPacer(Config{Clients: 4}, 0, start); p != nil {
		t.Fatalf("a pacer without a rate: %+v", p)
	}
	for w := range 4 {
		p := newPacer(cfg, w, start)
		offset := time.Duration(w) * 2500 * time.Microsecond
		for n := range 5 {
			want := start.Add(offset + time.Duration(n)*10*time.Millisecond)
			if got := p.due(); !got.Equal(want) {
				t.Fatalf("client %d, call %d: due %v, want %v", w, n, got.Sub(start), want.Sub(start))
			}
		}
	}
}
