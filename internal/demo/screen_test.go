package demo

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

func lines(prefix string, n, width int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("%s%d %s", prefix, i, strings.Repeat("x", width)))
	}
	return out
}

// Whatever the terminal's size and the content, a fitted screen has no
// more lines than the terminal has rows and no line wider than its
// columns, so a redraw from the top left corner never scrolls.
func TestFitScreenNeverExceedsTheTerminal(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	h := demoHeader(t, 6, false)
	for _, width := range []int{1, 2, 3, 10, 40, 79, 80, 120, 250} {
		for _, height := range []int{1, 2, 3, 5, 10, 23, 24, 40, 100} {
			contents := map[string][]screenBlock{
				"the demo's header and a table": append(h.blocks(width), screenBlock{full: lines("i", 20, 100), small: lines("s", 3, 60), shrink: 3},
					screenBlock{full: []string{"sample space offers: 1000 rows"}, small: []string{"sample"}, shrink: 5}),
				"no blocks":  nil,
				"empty ones": {{}, {full: []string{""}}, {small: []string{"a"}}},
				"newlines and control characters": {{full: []string{"no status yet: rpc error:\nsecond line\nthird\tline \x1b[2J", strings.Repeat("\t", 30)},
					small: []string{"x\ny\nz"}}},
			}
			for k := range 5 {
				var bs []screenBlock
				for range rng.IntN(6) {
					bs = append(bs, screenBlock{full: lines("f", rng.IntN(30), rng.IntN(300)), small: lines("s", rng.IntN(4), rng.IntN(100)), shrink: rng.IntN(4)})
				}
				contents[fmt.Sprintf("random %d", k)] = bs
			}
			for name, blocks := range contents {
				got := fitScreen(width, height, blocks)
				if len(got) > height {
					t.Errorf("%d×%d, %s: %d lines", width, height, name, len(got))
				}
				for _, l := range got {
					if n := utf8.RuneCountInString(l); n > width {
						t.Errorf("%d×%d, %s: a line of %d characters: %q", width, height, name, n, l)
					}
				}
			}
		}
	}
	if got := fitScreen(0, 24, []screenBlock{{full: []string{"a"}}}); got != nil {
		t.Errorf("a terminal 0 wide: %q, want nothing", got)
	}
}

// Blocks give up their full lines, the lowest shrink first, only as far
// as the screen needs; take them back, the highest first, where they fit;
// and what fits in no way is cut at the bottom, the last line saying so.
func TestFitScreenShrinksInOrder(t *testing.T) {
	t.Parallel()
	a := screenBlock{full: []string{"a1", "a2", "a3"}, shrink: 0}
	b := screenBlock{full: []string{"b1", "b2", "b3", "b4"}, small: []string{"b"}, shrink: 1}
	c := screenBlock{full: []string{"c1", "c2"}, small: []string{"c1", "c2"}, shrink: 2}
	for _, tc := range []struct {
		height int
		want   []string
	}{
		{9, []string{"a1", "a2", "a3", "b1", "b2", "b3", "b4", "c1", "c2"}},
		{20, []string{"a1", "a2", "a3", "b1", "b2", "b3", "b4", "c1", "c2"}},
		{8, []string{"b1", "b2", "b3", "b4", "c1", "c2"}},
		{6, []string{"b1", "b2", "b3", "b4", "c1", "c2"}},
		{5, []string{"b", "c1", "c2"}},
		{3, []string{"b", "c1", "c2"}},
		{2, []string{"b", "… 2 more lines: a larger terminal, or --no-redraw, shows them"}},
	} {
		if got := fitScreen(100, tc.height, []screenBlock{a, b, c}); !slices.Equal(got, tc.want) {
			t.Errorf("height %d: %q, want %q", tc.height, got, tc.want)
		}
	}
	// A block with a higher shrink takes its full lines back first, even
	// when a lower one would fit too.
	x := screenBlock{full: []string{"x1", "x2"}, small: []string{"x"}, shrink: 0}
	y := screenBlock{full: []string{"y1", "y2"}, small: []string{"y"}, shrink: 1}
	if got, want := fitScreen(100, 3, []screenBlock{x, y}), []string{"x", "y1", "y2"}; !slices.Equal(got, want) {
		t.Errorf("height 3: %q, want %q", got, want)
	}
	if got, want := fitScreen(5, 1, []screenBlock{{full: []string{"abcdefgh"}}}), []string{"abcd…"}; !slices.Equal(got, want) {
		t.Errorf("a long line: %q, want %q", got, want)
	}
	if got, want := fitScreen(20, 3, []screenBlock{{full: []string{"one\ntwo\tthree\x1b[J"}}}), []string{"one", "two three [J"}; !slices.Equal(got, want) {
		t.Errorf("a line with a newline, a tab and an escape: %q, want %q", got, want)
	}
}

// A frame goes to the top left corner, erases what each line leaves of
// its row and the rows below the last, and ends without a newline (which
// would scroll a screen it fills).
func TestRedrawFrame(t *testing.T) {
	t.Parallel()
	got := string(redrawFrame([]string{"one", "two", "three"}))
	if want := "\x1b[Hone\x1b[K\ntwo\x1b[K\nthree\x1b[K\x1b[J"; got != want {
		t.Errorf("frame %q, want %q", got, want)
	}
	if strings.Contains(got, "\x1b[2J") {
		t.Error("the frame clears the whole screen, which some terminals push into the scrollback")
	}
}

// A command wrapped to a width runs as pasted: its lines continue with
// " \" and hold its words in order.
func TestWrapCommand(t *testing.T) {
	t.Parallel()
	words := []string{"/usr/local/bin/shardkit", "update", "--peer", "127.0.0.1:33973,127.0.0.1:43265,127.0.0.1:35965",
		"--certs-dir", "/tmp/shardkit-demo-311572411/certs", "offers", `'[7, "o3"]'`, `'[["+", "price", 1]]'`}
	for _, width := range []int{40, 60, 79, 200} {
		got := wrapCommand("  ", words, width)
		var back []string
		for i, l := range got {
			// Only a word wider than the line by itself may stay wider.
			if utf8.RuneCountInString(l) > width && len(strings.Fields(strings.TrimSuffix(l, " \\"))) > 1 {
				t.Errorf("width %d: line %q is wider", width, l)
			}
			if i < len(got)-1 {
				var ok bool
				if l, ok = strings.CutSuffix(l, " \\"); !ok {
					t.Errorf("width %d: line %q does not continue with \\", width, l)
				}
			}
			back = append(back, strings.Fields(l)...)
		}
		if strings.Join(back, " ") != strings.Join(words, " ") {
			t.Errorf("width %d: the lines hold %q, want %q", width, back, words)
		}
		if width == 200 && len(got) != 1 {
			t.Errorf("width 200: %d lines, want 1", len(got))
		}
	}
}

// The commands to try start with what runs as pasted: the running
// binary's full path, or `go run` of its package when go run built it
// (the binary is then in the build cache or a temporary dir).
func TestCommandPrefix(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	if err := os.MkdirAll(filepath.Join(repo, "cmd", "shardkit"), 0o755); err != nil {
		t.Fatal(err)
	}
	elsewhere := t.TempDir()
	const pkg, mod = "github.com/shardkit/shardkit/cmd/shardkit", "github.com/shardkit/shardkit"
	cached := "/root/.cache/go-build/69/69cc11d3763db6430622559e64ea2addda8e277956d429569980878c9d99d2ba-d/shardkit"
	temp := "/tmp/go-build2746252/b001/exe/shardkit"
	for _, tc := range []struct {
		exe, wd, pkg string
		want         string
	}{
		{"/usr/local/bin/shardkit", repo, pkg, "/usr/local/bin/shardkit"},
		{"/opt/my tools/sk", repo, pkg, "'/opt/my tools/sk'"},
		{"/home/me/exe/sk", repo, pkg, "/home/me/exe/sk"},
		{"/home/me/ab/69cc11d3763db6430622559e64ea2addda8e277956d429569980878c9d99d2ba-d/sk", repo, pkg, "/home/me/ab/69cc11d3763db6430622559e64ea2addda8e277956d429569980878c9d99d2ba-d/sk"},
		{cached, repo, pkg, "go run ./cmd/shardkit"},
		{temp, repo, pkg, "go run ./cmd/shardkit"},
		{cached, elsewhere, pkg, "go run github.com/shardkit/shardkit/cmd/shardkit"},
		{temp, elsewhere, "example.com/app/cmd/app", "go run example.com/app/cmd/app"},
		{temp, repo, "", "go run ./cmd/shardkit"},
	} {
		if got := strings.Join(commandPrefix(tc.exe, tc.wd, tc.pkg, mod), " "); got != tc.want {
			t.Errorf("%s from %s: %q, want %q", tc.exe, tc.wd, got, tc.want)
		}
	}
}

func demoHeader(t *testing.T, n int, insecure bool) *header {
	t.Helper()
	var insts []*demoInstance
	var peers []string
	for i := range n {
		insts = append(insts, &demoInstance{listen: fmt.Sprintf("127.0.0.1:%d", 33000+i), http: fmt.Sprintf("127.0.0.1:%d", 45000+i)})
		peers = append(peers, insts[i].listen)
	}
	dir := "/tmp/shardkit-demo-311572411"
	o := Options{Instances: n, ReplicationFactor: 3, Rows: 1000, Dir: dir, Insecure: insecure}
	var sec []string
	if !insecure {
		sec = []string{"--certs-dir", dir + "/certs"}
	}
	return newHeader(o, insts, peers, []string{"/usr/local/bin/shardkit"}, "https", dir+"/certs", sec)
}

// On an 80×24 terminal the demo's screen fits, and still shows the first
// command to try whole, wrapped as the shell reads it.
func TestDemoScreenOnASmallTerminal(t *testing.T) {
	t.Parallel()
	h := demoHeader(t, 6, false)
	table := lines("INSTANCE ", 22, 90)
	blocks := func(width int) []screenBlock {
		return append(h.blocks(width), screenBlock{full: table, small: []string{"--- 12:00:00 ---", "cluster demo: leader i1; 6 instances: 6 Online", "buckets held/target: r1 1500/1500, r4 1500/1500"}, shrink: 3},
			screenBlock{full: []string{"sample space offers: 1000 rows"}, small: []string{"sample space offers: 1000 rows"}, shrink: 5})
	}
	got := fitScreen(79, 24, blocks(79))
	screen := strings.Join(got, "\n")
	first := wrapCommand("  ", h.commands[0], 79)
	if !strings.Contains(screen, strings.Join(first, "\n")) {
		t.Errorf("the screen does not show the first command whole:\n%s\nwant:\n%s", screen, strings.Join(first, "\n"))
	}
	if !strings.HasPrefix(first[0], "  /usr/local/bin/shardkit status --peer") || !strings.Contains(screen, "127.0.0.1:33000,127.0.0.1:33001,127.0.0.1:33002") {
		t.Errorf("the first command starts %q", first[0])
	}
	for _, want := range []string{"cluster demo: leader i1; 6 instances: 6 Online", "sample space offers: 1000 rows", "Ctrl+C to stop"} {
		if !strings.Contains(screen, want) {
			t.Errorf("the screen lacks %q:\n%s", want, screen)
		}
	}
	// A large terminal shows everything, each command on one line.
	got = fitScreen(250, 100, blocks(250))
	screen = strings.Join(got, "\n")
	for _, c := range h.commands {
		if !strings.Contains(screen, "\n  "+strings.Join(c, " ")+"\n") {
			t.Errorf("a 250×100 screen lacks the command %q:\n%s", strings.Join(c, " "), screen)
		}
	}
	if strings.Contains(screen, "…") {
		t.Errorf("a 250×100 screen cuts something:\n%s", screen)
	}
}
