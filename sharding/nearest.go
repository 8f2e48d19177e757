package sharding

import "math/rand/v2"

// Nearest picks the member of a replicaset a read-only call goes to, as
// the cluster's routers and the Go client pick it: of the members sharing
// the most failure-domain values (key and value) with self, the caller's
// own (R2, R6: a replica in the caller's zone first), one at random; not
// the leader, which serves the writes, where another is as near (the
// seed's eselect('ro') prefers read-only hosts); and not one that is down
// (just failed to answer) unless every one is. domain gives a member's
// failure domain, leader tells the leader and down a member down (nil:
// none known). ok is false when members is empty.
func Nearest[M any](self map[string]string, members []M, domain func(M) map[string]string, leader, down func(M) bool) (m M, ok bool) {
	if down != nil {
		var up []M
		for _, c := range members {
			if !down(c) {
				up = append(up, c)
			}
		}
		if len(up) > 0 {
			members = up
		}
	}
	var best, followers []M
	score := -1
	for _, c := range members {
		s := 0
		d := domain(c)
		for k, v := range self {
			if d[k] == v {
				s++
			}
		}
		if s > score {
			best, followers, score = best[:0], followers[:0], s
		}
		if s == score {
			best = append(best, c)
			if leader == nil || !leader(c) {
				followers = append(followers, c)
			}
		}
	}
	if len(followers) > 0 {
		best = followers
	}
	if len(best) == 0 {
		return m, false
	}
	return best[rand.IntN(len(best))], true
}
