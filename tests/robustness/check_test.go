package robustness

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// class says how an operation counts in the checks.
type class uint8

const (
	// clsDone: the client got an answer: a result, or a definite refusal
	// (the key exists, the condition failed).
	clsDone class = iota
	// clsUnknown: a write whose outcome the client does not know
	// (ErrOutcomeUnknown, ErrInternal, the call's deadline, any error
	// that does not say that nothing was done).
	clsUnknown
	// clsNotApplied: a write that failed with ErrUnavailable, which the
	// client documents as "nothing was done". Checked: its value must
	// never be seen.
	clsNotApplied
	// clsFailedRead: a read that failed; it has no effect.
	clsFailedRead
	// clsStaleRead: an ro read (it may be stale): not linearizable, but
	// what it returns must be a write's value with that write's version.
	clsStaleRead
)

func (c class) String() string {
	return [...]string{"done", "unknown", "not-applied", "failed-read", "ro-read"}[c]
}

// record is one operation as a client saw it.
type record struct {
	Client int
	Seq    int
	In     input
	Out    output
	Class  class
	// Call and Return are nanoseconds since the history began. patch
	// moves Return of a write of unknown outcome (keeping the time the
	// client gave up in Ended).
	Call, Return, Ended int64
	// Err is the client's error; Served is the instance that answered a
	// read; Attempts are the RPCs the client made for it (tracer).
	Err      string
	Served   string
	Attempts []string
}

func (r *record) describe() string {
	ret := r.Return
	if r.Ended != 0 {
		ret = r.Ended
	}
	s := fmt.Sprintf("c%d#%d [%s .. %s] %s", r.Client, r.Seq, fmtNS(r.Call), fmtNS(ret), describeOp(r.In, r.Out))
	if r.Class != clsDone {
		s += " <" + r.Class.String() + ">"
	}
	if r.Served != "" {
		s += " served by " + r.Served
	}
	if r.Err != "" {
		s += " err: " + r.Err
	}
	return s
}

// describeLong is describe with the RPCs of the operation, one a line,
// when there was more than one or the operation failed.
func (r *record) describeLong() string {
	s := r.describe()
	if len(r.Attempts) > 1 || r.Err != "" {
		for _, a := range r.Attempts {
			s += "\n\t\t" + a
		}
	}
	return s
}

func fmtNS(ns int64) string {
	if ns == 0 {
		return "?"
	}
	return fmt.Sprintf("%.3fs", float64(ns)/1e9)
}

// history collects the records of every client; safe for concurrent use.
type history struct {
	start time.Time
	mu    sync.Mutex
	recs  []record
}

func newHistory() *history { return &history{start: time.Now()} }

// now is the time since the history began, never 0.
func (h *history) now() int64 { return max(1, time.Since(h.start).Nanoseconds()) }

func (h *history) add(r record) {
	h.mu.Lock()
	h.recs = append(h.recs, r)
	h.mu.Unlock()
}

func (h *history) records() []record {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.recs)
}

// event is something the nemesis did, for the report and the visualization.
type event struct {
	Start, End int64
	What       string
}

// verdict is the outcome of checking a history.
type verdict struct {
	// Problems are violations found without porcupine (duplicates,
	// phantoms, writes said not to be applied that were, lost writes).
	Problems []string
	// Linearizable is porcupine's answer with every write that did not
	// get a definite answer possibly applied (also those that failed with
	// ErrUnavailable: the client gave up).
	Linearizable linCheck
	// Contract is porcupine's answer with the writes that failed with
	// ErrUnavailable not applied, as the client documents; run only when
	// Linearizable is Ok (it can only be worse).
	Contract *linCheck
	// Culprits name, when Contract is Illegal, the writes that failed
	// with ErrUnavailable that a key's history needs applied.
	Culprits []string
}

// linCheck is one porcupine run.
type linCheck struct {
	Result  porcupine.CheckResult
	Info    porcupine.LinearizationInfo
	Checked int    // operations
	Stage   string // which of the stages of check answered
}

// observation is a value with its version as some operation reported it.
type observation struct {
	key, version uint64
	value        string
	rec          int
}

// observations lists every (key, value, version) an operation reported.
func observations(recs []record) []observation {
	var out []observation
	for i, r := range recs {
		switch {
		case r.Class == clsFailedRead || r.Class == clsUnknown || r.Class == clsNotApplied:
		case r.Out.Result != resOK:
		case r.In.Kind == opRead || r.In.Kind == opDelete:
			if r.Out.Found {
				out = append(out, observation{r.In.Key, r.Out.Version, r.Out.Value, i})
			}
		default:
			out = append(out, observation{r.In.Key, r.Out.Version, r.In.Value, i})
		}
	}
	return out
}

// checkValues finds what needs no search: a write applied twice (one value
// with two versions), two writes with one version, a value no write
// wrote, a value of a write said not to be applied or refused, a value
// under another key than its write's.
func checkValues(recs []record) []string {
	var problems []string
	writer := map[string]int{}
	for i, r := range recs {
		if r.In.Kind.isWrite() && r.In.Kind != opDelete {
			writer[r.In.Value] = i
		}
	}
	type kv struct {
		key   uint64
		value string
	}
	versions := map[kv]map[uint64]int{}
	holders := map[uint64]map[kv]int{}
	reported := map[string]bool{}
	for _, o := range observations(recs) {
		k := kv{o.key, o.value}
		if versions[k] == nil {
			versions[k] = map[uint64]int{}
		}
		if _, ok := versions[k][o.version]; !ok {
			versions[k][o.version] = o.rec
		}
		if holders[o.version] == nil {
			holders[o.version] = map[kv]int{}
		}
		if _, ok := holders[o.version][k]; !ok {
			holders[o.version][k] = o.rec
		}
		w, ok := writer[o.value]
		switch {
		case reported[o.value]:
		case !ok:
			reported[o.value] = true
			problems = append(problems, fmt.Sprintf("value %q of k%d was never written (phantom): %s", o.value, o.key, recs[o.rec].describe()))
		case recs[w].In.Key != o.key:
			reported[o.value] = true
			problems = append(problems, fmt.Sprintf("value %q written to k%d was seen under k%d: write %s; seen by %s",
				o.value, recs[w].In.Key, o.key, recs[w].describe(), recs[o.rec].describe()))
		case recs[w].Class == clsNotApplied:
			reported[o.value] = true
			problems = append(problems, fmt.Sprintf("a write that failed with ErrUnavailable (documented as \"nothing was done\") was applied: its value seen by %s; the write: %s",
				recs[o.rec].describe(), recs[w].describeLong()))
		case recs[w].Class == clsDone && recs[w].Out.Result != resOK:
			reported[o.value] = true
			problems = append(problems, fmt.Sprintf("a refused write was applied: its value seen by %s; the write: %s", recs[o.rec].describe(), recs[w].describeLong()))
		case recs[w].Call > recs[o.rec].Return:
			reported[o.value] = true
			problems = append(problems, fmt.Sprintf("a value was seen before it was written: %s; the write: %s", recs[o.rec].describe(), recs[w].describe()))
		}
	}
	for k, vs := range versions {
		if len(vs) > 1 {
			var seen []string
			for v, i := range vs {
				seen = append(seen, fmt.Sprintf("v%d (%s)", v, recs[i].describe()))
			}
			slices.Sort(seen)
			problems = append(problems, fmt.Sprintf("value %q of k%d was applied more than once: seen at %s", k.value, k.key, strings.Join(seen, "; ")))
		}
	}
	for v, ks := range holders {
		if len(ks) > 1 {
			var seen []string
			for k, i := range ks {
				seen = append(seen, fmt.Sprintf("k%d=%q (%s)", k.key, k.value, recs[i].describe()))
			}
			slices.Sort(seen)
			problems = append(problems, fmt.Sprintf("version v%d holds different writes: %s", v, strings.Join(seen, "; ")))
		}
	}
	slices.Sort(problems)
	return problems
}

// checkFinal checks the final state of every key (read after the faults
// ended, on a healed cluster) against the acknowledged writes: none with a
// version above the final one of the same replicaset (it would be lost;
// versions of different replicasets do not compare, and the history check
// covers those).
func checkFinal(recs []record, final map[uint64]output) []string {
	var problems []string
	for i, r := range recs {
		if r.Class != clsDone || r.Out.Result != resOK || !r.In.Kind.isWrite() || r.In.Kind == opDelete {
			continue
		}
		f, ok := final[r.In.Key]
		if !ok {
			continue
		}
		if f.Found && f.Version>>48 == r.Out.Version>>48 && f.Version < r.Out.Version || !f.Found && !deletedAfter(recs, i) {
			problems = append(problems, fmt.Sprintf("acknowledged write lost: the final state of k%d is %s; the write: %s", r.In.Key, describeFinal(f), r.describeLong()))
		}
	}
	return problems
}

// deletedAfter reports whether some delete of w's key (done or unknown)
// may have come after write w.
func deletedAfter(recs []record, w int) bool {
	for _, r := range recs {
		if r.In.Kind != opDelete || r.In.Key != recs[w].In.Key {
			continue
		}
		// A delete of unknown outcome may take effect at any time after
		// its call; a done one may come after w unless it ended before w
		// began.
		if r.Class == clsUnknown || r.Class == clsDone && r.Return >= recs[w].Call {
			return true
		}
	}
	return false
}

func describeFinal(o output) string {
	if !o.Found {
		return "absent"
	}
	return fmt.Sprintf("%s@v%d", o.Value, o.Version)
}

// patch sets the return time of every write of unknown outcome: the
// earliest return of an operation that saw its value (it took effect
// before that one ended), else the end of the history (after everything,
// where it may also never have happened). It returns which were seen.
func patch(recs []record) map[int]bool {
	var end int64
	for _, r := range recs {
		end = max(end, r.Call, r.Return)
	}
	end++
	firstSeen := map[string]int64{}
	for _, o := range observations(recs) {
		ret := recs[o.rec].Return
		if t, ok := firstSeen[o.value]; !ok || ret < t {
			firstSeen[o.value] = ret
		}
	}
	seen := map[int]bool{}
	for i := range recs {
		r := &recs[i]
		if r.Class != clsUnknown && r.Class != clsNotApplied {
			continue
		}
		if r.Ended == 0 {
			r.Ended = r.Return
		}
		r.Return = end
		if t, ok := firstSeen[r.In.Value]; ok && r.In.Kind != opDelete {
			r.Return = max(r.Call, t)
			seen[i] = true
		}
	}
	return seen
}

func toOperation(r record, asUnknown bool) porcupine.Operation {
	out := r.Out
	if asUnknown {
		out = output{Result: resUnknown}
	}
	var meta any
	if r.Err != "" {
		meta = r.Err
	}
	return porcupine.Operation{ClientId: r.Client, Input: r.In, Call: r.Call, Output: out, Return: r.Return, Metadata: meta}
}

// check runs every check on a history (recs is patched in place).
func check(recs []record, final map[uint64]output, timeout time.Duration) *verdict {
	deadline := time.Now().Add(timeout)
	v := &verdict{}
	v.Problems = append(checkValues(recs), checkFinal(recs, final)...)
	seen := patch(recs)
	keys := byKey(recs)
	unknown := func(i int) bool { return recs[i].Class == clsUnknown }
	notApplied := func(i int) bool { return recs[i].Class == clsNotApplied }
	none := func(int) bool { return false }
	v.Linearizable = checkKeys(recs, keys, seen, none, func(i int) bool { return unknown(i) || notApplied(i) }, deadline)
	if v.Linearizable.Result == porcupine.Ok {
		// The writes that failed with ErrUnavailable are never applied
		// here, except those whose values were seen (checkValues
		// reports them; this looks for the others).
		seenNotApplied := func(i int) bool { return notApplied(i) && seen[i] }
		c := checkKeys(recs, keys, seen, seenNotApplied, unknown, deadline)
		v.Contract = &c
		if c.Result == porcupine.Illegal {
			v.Culprits = culprits(recs, keys, seen, seenNotApplied, unknown, deadline)
		}
	}
	return v
}

// byKey lists the records of each key, by key.
func byKey(recs []record) map[uint64][]int {
	out := map[uint64][]int{}
	for i, r := range recs {
		out[r.In.Key] = append(out[r.In.Key], i)
	}
	return out
}

// checkKeys checks every key's history (checkKey), a few keys at a time,
// and sums up: Illegal if a key's is, else Unknown if one timed out.
func checkKeys(recs []record, keys map[uint64][]int, seen map[int]bool, must, may func(int) bool, deadline time.Time) linCheck {
	type keyResult struct {
		key uint64
		c   linCheck
	}
	results := make(chan keyResult, len(keys))
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for k, idx := range keys {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			results <- keyResult{k, checkKey(recs, idx, seen, must, may, deadline)}
		})
	}
	wg.Wait()
	close(results)
	var all []keyResult
	for r := range results {
		all = append(all, r)
	}
	slices.SortFunc(all, func(a, b keyResult) int { return cmp.Compare(a.key, b.key) })
	out := linCheck{Result: porcupine.Ok}
	var stages []string
	for _, r := range all {
		out.Checked += r.c.Checked
		if r.c.Stage != "" {
			stages = append(stages, fmt.Sprintf("k%d: %s", r.key, r.c.Stage))
		}
		switch {
		case r.c.Result == porcupine.Illegal && out.Result != porcupine.Illegal:
			out.Result, out.Info = porcupine.Illegal, r.c.Info
		case r.c.Result == porcupine.Unknown && out.Result == porcupine.Ok:
			out.Result, out.Info = porcupine.Unknown, r.c.Info
		}
	}
	out.Stage = "unknown writes nothing saw left out"
	if len(stages) > 0 {
		out.Stage = strings.Join(stages, "; ")
	}
	return out
}

// checkKey runs porcupine on one key's history: the done operations, the
// writes must accepts as possibly applied, and those may accepts, but of
// these only as many as needed. A write of unknown outcome that nothing
// saw can always come last and change nothing, so the check starts
// without them; when it fails, it adds those called before the point
// where it failed (the earliest return of an operation that no longest
// partial linearization covers) and tries again; when that adds nothing,
// it checks with all of them, which alone may say Illegal.
func checkKey(recs []record, idx []int, seen map[int]bool, must, may func(int) bool, deadline time.Time) linCheck {
	included := map[int]bool{}
	for _, i := range idx {
		if must(i) || may(i) && seen[i] {
			included[i] = true
		}
	}
	build := func() []porcupine.Operation {
		var ops []porcupine.Operation
		for _, i := range idx {
			switch {
			case recs[i].Class == clsDone:
				ops = append(ops, toOperation(recs[i], false))
			case included[i]:
				ops = append(ops, toOperation(recs[i], true))
			}
		}
		return ops
	}
	run := func(ops []porcupine.Operation) (porcupine.CheckResult, porcupine.LinearizationInfo) {
		left := time.Until(deadline)
		if left <= 0 {
			return porcupine.Unknown, porcupine.LinearizationInfo{}
		}
		return porcupine.CheckOperationsVerbose(registerModel, ops, left)
	}
	added := 0
	for round := 1; ; round++ {
		ops := build()
		res, info := run(ops)
		c := linCheck{Result: res, Info: info, Checked: len(ops)}
		if added > 0 {
			c.Stage = fmt.Sprintf("%d unseen unknown writes added in %d rounds", added, round-1)
		}
		if res != porcupine.Illegal {
			return c
		}
		tau := failureTime(ops, info)
		n := 0
		for _, i := range idx {
			if may(i) && !included[i] && recs[i].Call <= tau {
				included[i] = true
				n++
			}
		}
		if n == 0 {
			break
		}
		added += n
	}
	for _, i := range idx {
		if may(i) {
			included[i] = true
		}
	}
	ops := build()
	res, info := run(ops)
	return linCheck{Result: res, Info: info, Checked: len(ops), Stage: "every unknown write"}
}

// failureTime is where porcupine got stuck on a one-key history: the
// earliest return of an operation not in its longest partial
// linearization.
func failureTime(ops []porcupine.Operation, info porcupine.LinearizationInfo) int64 {
	var longest []int
	for _, partition := range info.PartialLinearizations() {
		for _, l := range partition {
			if len(l) > len(longest) {
				longest = l
			}
		}
	}
	in := map[int]bool{}
	for _, i := range longest {
		in[i] = true
	}
	tau := int64(math.MaxInt64)
	for i, op := range ops {
		if !in[i] {
			tau = min(tau, op.Return)
		}
	}
	return tau
}

// culprits finds, key by key, the writes that failed with ErrUnavailable
// whose application the key's history needs beyond those whose values
// were seen (checkValues names them): those that alone make it
// linearizable, else all of that key's.
func culprits(recs []record, keys map[uint64][]int, seen map[int]bool, must, may func(int) bool, deadline time.Time) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		idx := keys[k]
		if checkKey(recs, idx, seen, must, may, deadline).Result != porcupine.Illegal {
			continue
		}
		var all, enough []string
		for _, j := range idx {
			if recs[j].Class != clsNotApplied || must(j) {
				continue
			}
			all = append(all, recs[j].describeLong())
			with := func(i int) bool { return i == j || must(i) }
			if checkKey(recs, idx, seen, with, may, deadline).Result == porcupine.Ok {
				enough = append(enough, recs[j].describeLong())
			}
		}
		switch {
		case len(enough) == 1:
			out = append(out, fmt.Sprintf("k%d is linearizable if this write, which failed with ErrUnavailable, was applied: %s", k, enough[0]))
		case len(enough) > 1:
			out = append(out, fmt.Sprintf("k%d is linearizable if any one of these %d writes, which failed with ErrUnavailable, was applied:\n\t%s",
				k, len(enough), strings.Join(enough, "\n\t")))
		default:
			out = append(out, fmt.Sprintf("k%d needs more than one of its writes that failed with ErrUnavailable applied: %s", k, strings.Join(all, "; ")))
		}
	}
	return out
}

// savedHistory is what history.json holds: enough to check the history
// again (TestRecheck).
type savedHistory struct {
	Records []record
	Final   map[uint64]output
	Events  []event
}

// report writes what a failed run leaves for a human: the history sorted
// by call, the nemesis' events, porcupine's visualization.
func report(dir string, recs []record, final map[uint64]output, events []event, v *verdict) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var files []string
	sorted := slices.Clone(recs)
	slices.SortStableFunc(sorted, func(a, b record) int { return cmp.Compare(a.Call, b.Call) })
	var b strings.Builder
	for _, r := range sorted {
		b.WriteString(r.describeLong())
		b.WriteByte('\n')
	}
	saved, err := json.Marshal(savedHistory{Records: recs, Final: final, Events: events})
	if err != nil {
		return nil, err
	}
	p := filepath.Join(dir, "history.json")
	if err := os.WriteFile(p, saved, 0o644); err != nil {
		return nil, err
	}
	files = append(files, p)
	p = filepath.Join(dir, "history.txt")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		return nil, err
	}
	files = append(files, p)
	b.Reset()
	for _, e := range events {
		fmt.Fprintf(&b, "[%s .. %s] %s\n", fmtNS(e.Start), fmtNS(e.End), e.What)
	}
	p = filepath.Join(dir, "nemesis.txt")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		return nil, err
	}
	files = append(files, p)
	if v == nil {
		return files, nil
	}
	var ann []porcupine.Annotation
	for _, e := range events {
		ann = append(ann, porcupine.Annotation{Tag: "nemesis", Start: e.Start, End: e.End, Description: e.What, BackgroundColor: "#f4c7c3"})
	}
	for name, c := range map[string]*linCheck{"linearizability.html": &v.Linearizable, "contract.html": v.Contract} {
		if c == nil || c.Result != porcupine.Illegal {
			continue
		}
		c.Info.AddAnnotations(ann)
		p = filepath.Join(dir, name)
		if err := porcupine.VisualizePath(registerModel, c.Info, p); err != nil {
			return files, err
		}
		files = append(files, p)
	}
	return files, nil
}
