package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/notifier/notifier/queue"
)

// Request limits.
const (
	// MaxBatch is the most jobs one request may hold.
	MaxBatch = 1000
	// MaxRequestBytes caps a request body (an array of jobs); each job is
	// also capped at queue.MaxJobBytes.
	MaxRequestBytes = 4 << 20
)

// countJobs says how many jobs body holds without decoding it: 1 for a
// JSON object, the elements of a top-level array (counted by a scan of its
// brackets, braces and strings, stopping past MaxBatch), or an error for a
// body that is neither. A malformed body may be miscounted; decoding it
// later refuses it anyway. It is what prices a request against the key's
// bucket before anything is decoded.
func countJobs(body []byte) (n int, array bool, err error) {
	i := skipSpace(body, 0)
	if i == len(body) {
		return 0, false, errors.New("empty body: send a JSON object (one job) or an array of jobs")
	}
	switch body[i] {
	case '{':
		return 1, false, nil
	case '[':
	default:
		return 0, false, errors.New("not a JSON object (one job) or array of jobs")
	}
	depth, inString, escaped, seen := 0, false, false, false
	for _, c := range body[i+1:] {
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		case '"':
			inString = true
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 { // the array's end
				if seen {
					n++
				}
				return n, true, nil
			}
			depth--
		case ',':
			if depth == 0 {
				n++
				if n > MaxBatch {
					return n, true, nil
				}
				continue
			}
		}
		seen = true
	}
	if seen {
		n++
	}
	return n, true, nil
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

// splitJobs reads body, an array of JSON values, into its elements (each
// then decoded by queue.DecodeFilled). The error names a position, never
// the content.
func splitJobs(body []byte) ([]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	var items []json.RawMessage
	if err := dec.Decode(&items); err != nil {
		return nil, jsonError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("not valid JSON (data after the array at byte %d)", dec.InputOffset())
	}
	return items, nil
}

func jsonError(err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Errorf("not valid JSON (syntax error at byte %d)", se.Offset)
	case errors.As(err, &te):
		return fmt.Errorf("not an array of jobs (a %s at byte %d)", te.Value, te.Offset)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return errors.New("not valid JSON (unexpected end of input)")
	}
	return errors.New("not valid JSON")
}

// idempotencyItemID is the job id of item i of a batch sent with
// Idempotency-Key key: <key>-<i>.
func idempotencyItemID(key string, i int) string { return fmt.Sprintf("%s-%d", key, i) }

// checkIdempotencyKey returns the rule key breaks ("" when none): a job
// id's characters, short enough for its batch ids.
func checkIdempotencyKey(key string, batch bool) string {
	limit := queue.MaxIDLen
	if batch {
		limit = maxIdempotencyKeyBatch
	}
	switch {
	case key == "":
		return "must not be empty"
	case len(key) > limit:
		return fmt.Sprintf("must be at most %d characters (a job id; a batch's ids are <key>-<index>), got %d", limit, len(key))
	case strings.IndexFunc(key, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == ':' || r == '-')
	}) >= 0:
		return "must contain only A-Z a-z 0-9 . _ : - (it becomes the job id)"
	}
	return ""
}
