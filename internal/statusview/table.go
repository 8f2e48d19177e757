package statusview

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

// WriteTable prints the status for people: a summary line, the
// instances (the Raft leader marked with *), then the replicasets.
func WriteTable(out io.Writer, st View) error {
	leader := "none known"
	for _, in := range st.Instances {
		if st.LeaderRaftID != 0 && in.RaftID == st.LeaderRaftID {
			leader = fmt.Sprintf("%s (raft_id %d)", in.InstanceID, in.RaftID)
		}
	}
	if leader == "none known" && st.LeaderRaftID != 0 {
		leader = fmt.Sprintf("raft_id %d", st.LeaderRaftID)
	}
	if st.NoQuorum() {
		leader += " (no quorum)"
	}
	fmt.Fprintf(out, "cluster %s  uuid %s  term %d  commit %d  leader %s\n\n",
		dash(st.ClusterID), dash(st.ClusterUUID), st.Term, st.CommitIndex, leader)
	switch st.Security {
	case "":
	case "plaintext":
		fmt.Fprintf(out, "security: plaintext (started without --certs-dir: anyone who reaches the port may read, write and expel; docs/security.md)\n\n")
	default:
		fmt.Fprintf(out, "security: %s\n\n", st.Security)
	}
	if st.NoQuorum() {
		head := "NO QUORUM"
		if len(st.Quorum.VotersAnswering) > len(st.Quorum.Voters)/2 {
			head = "NO LEADER CONFIRMED"
		}
		fmt.Fprintf(out, "%s: %s.\nNothing can change until a majority of the voters is back; the grades below\n"+
			"(marked ?) are the last this instance knows, not confirmed.\n\n", head, st.QuorumSummary())
	}
	grade := gradeText
	if st.GradesLastKnown {
		grade = func(g Grade) string { return gradeText(g) + "?" }
	}

	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INSTANCE\tRAFT_ID\tREPLICASET\tROLE\tCURRENT\tTARGET\tADDRESS\tFAILURE_DOMAIN\tTARGET_REASON")
	for _, in := range st.Instances {
		name := in.InstanceID
		if st.LeaderRaftID != 0 && in.RaftID == st.LeaderRaftID {
			name += " *"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			dash(name), in.RaftID, dash(in.ReplicasetID), in.RaftRole,
			grade(in.CurrentGrade), grade(in.TargetGrade),
			dash(in.Address), FormatFailureDomain(in.FailureDomain), dash(in.TargetReason))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	count := fmt.Sprintf("%d instances", len(st.Instances))
	if len(st.Instances) == 1 {
		count = "1 instance"
	}
	if st.GradesLastKnown {
		fmt.Fprintf(out, "(* the Raft leader; ? the last known grade; %s)\n\n", count)
	} else {
		fmt.Fprintf(out, "(* the Raft leader; %s)\n\n", count)
	}

	tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REPLICASET\tLEADER\tWEIGHT\tBUCKETS\tTARGET_BUCKETS\tINSTANCES")
	for _, rs := range st.Replicasets {
		name := rs.ReplicasetID
		if rs.Expelled {
			name += " (expelled)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\n",
			dash(name), dash(rs.LeaderInstanceID), rs.Weight, rs.BucketCount, rs.TargetBucketCount,
			dash(strings.Join(rs.Instances, ",")))
	}
	return tw.Flush()
}

func gradeText(g Grade) string { return fmt.Sprintf("%s(%d)", g.Variant, g.Incarnation) }

// FormatFailureDomain renders failure-domain pairs as k=v,... sorted ("-" when none).
func FormatFailureDomain(fd map[string]string) string {
	if len(fd) == 0 {
		return "-"
	}
	pairs := make([]string, 0, len(fd))
	for k, v := range fd {
		pairs = append(pairs, k+"="+v)
	}
	slices.Sort(pairs)
	return strings.Join(pairs, ",")
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
