package queue

import (
	"time"

	jsonv2 "github.com/go-json-experiment/json"
)

// wireJob is a job as decodeFast reads it: the job's strings straight into
// Job through its json tags; the fields that are not JSON strings as the
// JSON type they must have, shadowing Job's (a null data value is refused,
// as the strict path does; times are strings, parsed the way the strict
// path parses them).
type wireJob struct {
	Job
	Data      map[string]*string `json:"data"`
	ExpiresAt *string            `json:"expires_at"`
	CreatedAt *string            `json:"created_at"`
}

// decodeFast decodes a well-formed, valid job in one pass. It reports false
// for anything else, and Decode then takes the strict path, which names the
// broken rule. The JSON parser (the reference implementation of Go's
// encoding/json/v2) matches names case-sensitively, rejects a name given
// twice at any level, invalid UTF-8 and data after the object, so when it
// accepts a message the strict path reads the same fields from it; the
// differential fuzz test FuzzDecodeFastPath holds the two to that.
//
// It exists for speed: the strict path reads token by token to report every
// problem precisely, which costs about 170 allocations a job on the hot
// path of every delivery.
//
// fill, unless nil, is called before the rules are checked (DecodeFilled);
// its error is returned with ok false.
func decodeFast(sub subjectOf, data []byte, fill func(*Job) error) (j *Job, ok bool, err error) {
	var w wireJob
	if jsonv2.Unmarshal(data, &w) != nil {
		return nil, false, nil
	}
	j = &w.Job
	if len(w.Data) > 0 {
		j.Data = make(map[string]string, len(w.Data))
		for k, v := range w.Data {
			if v == nil {
				return nil, false, nil
			}
			j.Data[k] = *v
		}
	}
	for _, t := range []struct {
		s   *string
		dst *time.Time
	}{{w.ExpiresAt, &j.ExpiresAt}, {w.CreatedAt, &j.CreatedAt}} {
		if t.s == nil {
			continue
		}
		v, err := time.Parse(time.RFC3339, *t.s)
		if err != nil {
			return nil, false, nil
		}
		*t.dst = v
	}
	if fill != nil {
		if err := fill(j); err != nil {
			return nil, false, err
		}
	}
	if j.validate(sub, nil) != nil {
		return nil, false, nil
	}
	return j, true, nil
}
