package queue

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
)

// NDJSON are the choices of PublishNDJSON.
type NDJSON struct {
	High   bool   // the priority lane
	Tenant string // the tenant of a line without one ("": the default tenant)
	// Skipped, when set, is told of each invalid line: its number (from
	// 1) and what is wrong with it.
	Skipped func(line int, why string)
	// Published, when set, is told of each job handed to the batch.
	Published func()
}

// PublishNDJSON publishes one job per line of in (`notifier publish
// --file`), each as it is read, on its tenant's and category's subject:
// the line's own "tenant", else o.Tenant (a line without one takes the
// subject's when decoded). An invalid line (not JSON, not a valid job,
// longer than a job may be) is skipped and told to o.Skipped; the lines
// after it are still published. Blank lines and lines starting with # are
// ignored. It returns how many lines were skipped; wait for the batch to
// know what was stored.
func (b *Batch) PublishNDJSON(ctx context.Context, in io.Reader, o NDJSON) (skipped int, err error) {
	r := bufio.NewReaderSize(in, 64<<10)
	limit := MaxJobBytes + 1024 // a job, with room for surrounding space
	for line := 1; ; line++ {
		raw, size, rerr := readLine(r, limit)
		if rerr != nil && rerr != io.EOF {
			return skipped, fmt.Errorf("read jobs: line %d: %w", line, rerr)
		}
		if rerr == io.EOF && size == 0 {
			return skipped, nil
		}
		skip := func(format string, args ...any) {
			if o.Skipped != nil {
				o.Skipped(line, fmt.Sprintf(format, args...))
			}
			skipped++
		}
		raw = bytes.TrimSpace(raw)
		switch {
		case size > limit:
			skip("%d bytes, longer than a job may be (%d bytes)", size, MaxJobBytes)
		case len(raw) == 0 || raw[0] == '#':
		case !json.Valid(raw):
			skip("not JSON (one job object per line)")
		default:
			// The line's channel, tenant and category as the decoder reads
			// them (member names exactly: "Tenant" names no tenant here, as
			// it names none to the dispatcher or the gateway), then the line
			// checked again on the subject they name.
			j, derr := Decode("", raw)
			if derr != nil {
				skip("%v", derr)
				break
			}
			lineTenant := o.Tenant
			if j.Tenant != "" {
				lineTenant = j.Tenant
			}
			k := KeyFor(j.Channel, lineTenant, o.High, j.Category)
			if _, derr := Decode(k.Subject(), raw); derr != nil {
				skip("%v", derr)
				break
			}
			if err := b.PublishTo(ctx, k, raw, MsgID(lineTenant, j.ID)); err != nil {
				return skipped, err
			}
			if o.Published != nil {
				o.Published()
			}
		}
		if rerr == io.EOF {
			return skipped, nil
		}
	}
}

// readLine reads one line (without its newline) of any length, keeping at
// most limit+1 bytes of it: size is the whole line's length, so a line
// over limit is known as such without holding it in memory.
func readLine(r *bufio.Reader, limit int) (line []byte, size int, err error) {
	for {
		chunk, err := r.ReadSlice('\n')
		size += len(chunk)
		if len(line) <= limit {
			line = append(line, chunk[:min(len(chunk), limit+1-len(line))]...)
		}
		switch {
		case err == bufio.ErrBufferFull:
			continue
		case err != nil:
			return line, size, err
		}
		line = bytes.TrimSuffix(line, []byte("\n"))
		return line, size - 1, nil
	}
}
