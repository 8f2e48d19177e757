package multiraft

import "go.etcd.io/raft/v3/raftpb"

var _ Handler = (*Host)(nil)

// HandleRaftMessage implements Handler. Messages for groups this host does
// not have are dropped, as are messages beyond a group's inbox bound.
func (h *Host) HandleRaftMessage(group GroupID, msg *raftpb.Message) {
	g := h.group(group)
	if g == nil {
		h.log.Debug("message for unknown group dropped", "group", uint64(group), "from", msg.GetFrom(), "type", msg.GetType().String())
		return
	}
	if msg.GetType() == raftpb.MessageType_MsgSnap {
		// Snapshots arrive through HandleRaftSnapshot only: a MsgSnap on
		// the message stream has no spooled data behind it.
		return
	}
	g.inMu.Lock()
	if len(g.inbox) >= h.cfg.InboxSize {
		g.inMu.Unlock()
		return
	}
	g.inbox = append(g.inbox, msg)
	g.inMu.Unlock()
	h.sched.enqueue(g, flagInput)
}

// ReportUnreachable implements Handler: every group learns that messages to
// node were lost, so raft stops pipelining to it until it answers again.
func (h *Host) ReportUnreachable(node NodeID) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	for _, g := range h.groups {
		if g == nil {
			continue
		}
		g.inMu.Lock()
		g.unreach = append(g.unreach, node)
		g.inMu.Unlock()
		h.sched.enqueue(g, flagInput)
	}
}
