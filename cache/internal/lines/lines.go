// Package lines reads the cache template's small text files (a ranges
// file, an endpoints file): one record of whitespace-separated fields per
// line, blank lines and lines starting with '#' ignored. It owns only that
// format; what the fields mean is the caller's.
package lines

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"strings"
)

// ErrRead wraps a failure to read the text itself (a line too long); an
// error of fn is returned unwrapped.
var ErrRead = errors.New("cannot read")

// MaxLine is the longest line read (1 MiB).
const MaxLine = 1 << 20

// Each calls fn for every record of data, with its 1-based line number,
// the line as written (trimmed) and its fields. An fn error stops the scan
// and is returned as it is; a line longer than MaxLine is an error.
func Each(data []byte, fn func(line int, text string, fields []string) error) error {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), MaxLine)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		if err := fn(line, text, strings.Fields(text)); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%w: line %d: %w", ErrRead, line+1, err)
	}
	return nil
}
