package supervisor

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// MaxEntrypointLen bounds an entrypoint, so that a request stays one
// atomic pipe write (PIPE_BUF is 4096 bytes on Linux).
const MaxEntrypointLen = 1024

// maxRequestBytes bounds what the parent reads from the pipe.
const maxRequestBytes = 64 << 10

const typeRebootstrap = "rebootstrap"

// request is one message from the worker to the parent.
type request struct {
	Type       string `json:"type"`
	Entrypoint string `json:"entrypoint"`
}

func encodeRebootstrap(entrypoint string) ([]byte, error) {
	if err := checkEntrypoint(entrypoint); err != nil {
		return nil, err
	}
	b, err := json.Marshal(request{Type: typeRebootstrap, Entrypoint: entrypoint})
	if err != nil {
		return nil, fmt.Errorf("supervisor: encode request: %w", err)
	}
	return append(b, '\n'), nil
}

func checkEntrypoint(entrypoint string) error {
	if len(entrypoint) > MaxEntrypointLen {
		return fmt.Errorf("%w: entrypoint is %d bytes, at most %d", ErrBadRequest, len(entrypoint), MaxEntrypointLen)
	}
	if !utf8.ValidString(entrypoint) {
		return fmt.Errorf("%w: entrypoint %q is not UTF-8", ErrBadRequest, entrypoint)
	}
	return nil
}

// decodeRequests reads what the worker wrote on the pipe: JSON lines. It
// returns the last valid rebootstrap request (a worker that asked twice
// changed its mind) and whether there was one; lines that are not valid
// requests are reported in bad, for the log.
func decodeRequests(data []byte) (entrypoint string, ok bool, bad []error) {
	for line := range bytes.SplitSeq(data, []byte{'\n'}) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		var r request
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			bad = append(bad, fmt.Errorf("%w: %w", ErrBadRequest, err))
			continue
		}
		if dec.More() {
			bad = append(bad, fmt.Errorf("%w: trailing data after the request", ErrBadRequest))
			continue
		}
		if r.Type != typeRebootstrap {
			bad = append(bad, fmt.Errorf("%w: unknown request type %q", ErrBadRequest, r.Type))
			continue
		}
		if err := checkEntrypoint(r.Entrypoint); err != nil {
			bad = append(bad, err)
			continue
		}
		entrypoint, ok = r.Entrypoint, true
	}
	return entrypoint, ok, bad
}
