package multiraft

// QueuedProposals is how many proposals wait for the worker to take them
// (held back, "Proposal batching", or not taken yet).
func (G *Group) QueuedProposals() int {
	g := G.g
	g.inMu.Lock()
	defer g.inMu.Unlock()
	return len(g.props)
}
