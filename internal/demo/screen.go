package demo

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// screenBlock is one part of a redrawn screen: its lines, and the fewer
// lines that stand for it on a screen too small for the whole (none: the
// block is left out there).
type screenBlock struct {
	full, small []string
	// shrink orders the blocks' giving up of their full lines: the lowest
	// first (the least needed); restored the other way round.
	shrink int
}

// fitScreen lays blocks out, in order, for a terminal of width×height
// characters, so that a redraw from the top left corner never scrolls:
// every block whole while all fits; otherwise blocks take their small
// lines (lowest shrink first) until all fits, and then each that can
// (highest shrink first) takes its full lines again if all still fits.
// What does not fit even so is cut off at the bottom, its last line
// saying how many lines are not shown; a line wider than width is cut,
// ending in "…" (a newline in a line starts another; other control
// characters become spaces). The result has at most height lines of at most width
// characters (none when either is below 1).
func fitScreen(width, height int, blocks []screenBlock) []string {
	if width < 1 || height < 1 {
		return nil
	}
	blocks = slices.Clone(blocks)
	for i, b := range blocks {
		blocks[i].full, blocks[i].small = screenLines(b.full), screenLines(b.small)
	}
	small := make([]bool, len(blocks))
	total := func() int {
		n := 0
		for i, b := range blocks {
			if small[i] {
				n += len(b.small)
			} else {
				n += len(b.full)
			}
		}
		return n
	}
	order := make([]int, len(blocks)) // block indexes, lowest shrink first
	for i := range order {
		order[i] = i
	}
	// A stable insertion sort: the blocks are few.
	for i := 1; i < len(order); i++ {
		for j := i; j > 0 && blocks[order[j]].shrink < blocks[order[j-1]].shrink; j-- {
			order[j], order[j-1] = order[j-1], order[j]
		}
	}
	for _, i := range order {
		if total() <= height {
			break
		}
		small[i] = true
	}
	for k := len(order) - 1; k >= 0; k-- {
		i := order[k]
		if !small[i] {
			continue
		}
		small[i] = false
		if total() > height {
			small[i] = true
		}
	}
	var lines []string
	for i, b := range blocks {
		if small[i] {
			lines = append(lines, b.small...)
		} else {
			lines = append(lines, b.full...)
		}
	}
	if len(lines) > height {
		more := len(lines) - height + 1
		lines = append(lines[:height-1], fmt.Sprintf("… %d more lines: a larger terminal, or --no-redraw, shows them", more))
	}
	for i, l := range lines {
		lines[i] = cutLine(l, width)
	}
	return lines
}

// screenLines splits lines at their newlines and turns every other
// control character (a tab, an escape) into a space, so that each takes
// one row and each character one column.
func screenLines(in []string) []string {
	var out []string
	for _, l := range in {
		for _, part := range strings.Split(l, "\n") {
			out = append(out, strings.Map(func(r rune) rune {
				if unicode.IsControl(r) {
					return ' '
				}
				return r
			}, part))
		}
	}
	return out
}

// cutLine cuts a line to width characters, its last then "…".
func cutLine(l string, width int) string {
	if utf8.RuneCountInString(l) <= width {
		return l
	}
	r := []rune(l)
	return string(r[:width-1]) + "…"
}

// redrawFrame is what draws lines over the last frame: the cursor to the
// top left corner, each line followed by erasing the rest of its row,
// then the rest of the screen erased. No newline follows the last line,
// so that a frame as tall as the terminal does not scroll it.
func redrawFrame(lines []string) []byte {
	var b bytes.Buffer
	b.WriteString("\x1b[H")
	for i, l := range lines {
		if i > 0 {
			b.WriteString("\n")
		}
		b.WriteString(l)
		b.WriteString("\x1b[K")
	}
	b.WriteString("\x1b[J")
	return b.Bytes()
}

// wrapCommand lays a command's words out in lines of at most width
// characters after indent, continued with " \" as a shell reads them, so
// that the lines run as pasted (a word wider than the line stays whole:
// fitScreen cuts it).
func wrapCommand(indent string, words []string, width int) []string {
	var lines []string
	cur := indent
	for i, w := range words {
		switch {
		case i == 0:
			cur += w
		case utf8.RuneCountInString(cur)+1+utf8.RuneCountInString(w)+2 <= width:
			cur += " " + w
		default:
			lines = append(lines, cur+" \\")
			cur = indent + "    " + w
		}
	}
	return append(lines, cur)
}

var shellSafe = regexp.MustCompile(`^[A-Za-z0-9_./:,@%+=-]+$`)

// shellQuote makes s one word of a POSIX shell.
func shellQuote(s string) string {
	if shellSafe.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// commandPrefix is how the demo's commands to try start, so that they run
// as pasted into another terminal: the running binary's full path (exe,
// from os.Executable) or, for a binary that `go run` built (in the build
// cache or a temporary directory: builtByGoRun), `go run` of its
// package (pkg, an import path; mod, its module's path): as ./<dir> when
// the working directory wd holds it, else by its import path, which go
// run finds from anywhere in the module.
func commandPrefix(exe, wd, pkg, mod string) []string {
	if !builtByGoRun(exe) {
		return []string{shellQuote(exe)}
	}
	if pkg == "" {
		return []string{"go", "run", "./cmd/shardkit"}
	}
	if rel, ok := strings.CutPrefix(pkg, mod+"/"); ok && mod != "" {
		if fi, err := os.Stat(filepath.Join(wd, filepath.FromSlash(rel))); err == nil && fi.IsDir() {
			return []string{"go", "run", shellQuote("./" + rel)}
		}
	}
	return []string{"go", "run", shellQuote(pkg)}
}

// builtByGoRun tells a binary that `go run` built: it runs either from
// the build cache, $GOCACHE/<xx>/<xx...: 64 hex digits>-d/<name> (Go 1.24
// and later keep a run's binary there, until the cache is trimmed), or
// from a temporary $WORK/b001/exe/<name>, where $WORK is a go-build<N>
// directory removed when the binary ends.
func builtByGoRun(exe string) bool {
	dir := filepath.Dir(exe)
	if h := filepath.Base(dir); cachedRun.MatchString(h) && filepath.Base(filepath.Dir(dir)) == h[:2] {
		return true
	}
	if filepath.Base(dir) != "exe" {
		return false
	}
	return strings.HasPrefix(filepath.Base(filepath.Dir(filepath.Dir(dir))), "go-build")
}

var cachedRun = regexp.MustCompile(`^[0-9a-f]{64}-d$`)
