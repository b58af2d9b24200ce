package inspect

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/notifier/notifier/internal/text"
	"github.com/notifier/notifier/queue"
)

// Query is one question of `notifier explain` or /explain: a user on a
// channel (and a category), a provider, or a job.
type Query struct {
	User, Channel, Category, Provider, Job string
	Tenant                                 string // with Job: the job's tenant ("" the default tenant's)
	// Scan is, with Job, how many messages of the job stream to read at
	// most looking for the job when the ledger does not place it: 0 reads
	// DefaultScan, a negative number the whole stream.
	Scan int
}

// Check refuses anything but exactly one question; its messages name
// the command's flags (the handler drops their dashes).
func (q Query) Check() error {
	n := 0
	for _, s := range []string{q.User + q.Channel, q.Provider, q.Job} {
		if s != "" {
			n++
		}
	}
	switch {
	case n != 1:
		return errors.New("ask one question: --user with --channel, --provider, or --job")
	case q.User != "" && q.Channel == "", q.User == "" && q.Channel != "":
		return errors.New("--user and --channel go together")
	case q.Category != "" && q.User == "":
		return errors.New("--category goes with --user and --channel")
	case q.Category != "" && !queue.ValidCategory(queue.Category(q.Category)):
		return fmt.Errorf("--category %q: use transactional or marketing", q.Category)
	case q.Tenant != "" && q.Job == "":
		return errors.New("--tenant goes with --job (a job id is unique within its tenant)")
	case q.Tenant != "" && !queue.ValidTenant(q.Tenant):
		return fmt.Errorf("--tenant %q: a tenant is 1 to %d of A-Z a-z 0-9 . _ -", text.Printable(text.Fit(q.Tenant, 64)), queue.MaxTenantLen)
	}
	return nil
}

// Ask puts the question to in: the answer is a UserAnswer,
// ProviderAnswer or JobAnswer.
func (q Query) Ask(ctx context.Context, in *Inspector) (any, error) {
	switch {
	case q.Provider != "":
		return in.Provider(ctx, q.Provider)
	case q.Job != "":
		return in.JobScan(ctx, q.Tenant, q.Job, q.Scan)
	}
	return in.UserIn(ctx, q.Channel, queue.Category(q.Category), q.User)
}

// Handler serves /explain on the metrics port: ?user=U&channel=C,
// ?provider=P or ?job=ID, answered as `notifier explain --json` answers.
// A bad question is 400 and an unknown provider 404, with {"error": ...};
// a failure to read the state is 503. inspector gives the Inspector of the
// configuration in force.
func Handler(inspector func() (*Inspector, error), log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v := r.URL.Query()
		for k, vs := range v {
			if len(vs) != 1 || !isExplainParam(k) {
				writeExplainError(w, http.StatusBadRequest, fmt.Sprintf("unknown or repeated parameter %q: ask ?user=U&channel=C[&category=K], ?provider=P or ?job=ID", text.Printable(text.Fit(k, 64))))
				return
			}
		}
		q := Query{User: v.Get("user"), Channel: v.Get("channel"), Category: v.Get("category"), Provider: v.Get("provider"), Job: v.Get("job"), Tenant: v.Get("tenant")}
		if err := q.Check(); err != nil {
			writeExplainError(w, http.StatusBadRequest, strings.NewReplacer("--", "").Replace(err.Error()))
			return
		}
		in, err := inspector()
		if err != nil {
			log.Warn("explain", "err", err)
			writeExplainError(w, http.StatusServiceUnavailable, err.Error())
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		answer, err := q.Ask(ctx, in)
		switch {
		case errors.Is(err, ErrInvalid):
			writeExplainError(w, http.StatusBadRequest, err.Error())
			return
		case errors.Is(err, ErrUnknownProvider):
			writeExplainError(w, http.StatusNotFound, err.Error())
			return
		case err != nil:
			log.Warn("explain", "err", err)
			writeExplainError(w, http.StatusServiceUnavailable, err.Error())
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(answer)
	})
}

func isExplainParam(k string) bool {
	switch k {
	case "user", "channel", "category", "provider", "job", "tenant":
		return true
	}
	return false
}

// writeExplainError answers {"error": msg} with status.
func writeExplainError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": text.Printable(msg)})
}
