package providers

import (
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/notifier/notifier/queue"
)

// DeliveryReport is what a provider reported, after accepting a message,
// about its delivery: one Twilio status callback.
type DeliveryReport struct {
	Provider string // the provider's configured name
	Tenant   string // the job's tenant, "" the default tenant's
	JobID    string // the message's (the job's) id, within its tenant
	// Status is Twilio's MessageStatus: queued, sending, sent, delivered,
	// undelivered, failed, read… (lower case, as Twilio sends it).
	Status string
	// ErrorCode is Twilio's ErrorCode (30003 unreachable handset, 30007
	// filtered…), 0 when the callback had none.
	ErrorCode int
	// MessageSID is Twilio's id of the message (SM…), "" when absent.
	MessageSID string
	// Detail is one line safe to log and to put in Notifier-Detail, never
	// the recipient: "Twilio error 30003: Unreachable destination handset",
	// or "" without an error code.
	Detail string
}

// twilioCallbackLimit bounds the body of a status callback (Twilio's are
// well under a kilobyte).
const twilioCallbackLimit = 64 << 10

// statusRE is a MessageStatus the handler takes.
var statusRE = regexp.MustCompile(`^[a-z_]{1,32}$`)

// TwilioCallbacks returns the handler of Twilio's status callbacks for the
// registry's twilio providers that set status_callback_url: serve it at
// that URL. Twilio posts there, as a form, each status change of a message
// the provider sent, to <status_callback_url>?provider=<name>&job=<job id>.
//
// The handler answers 405 to anything but POST; 404 when the provider
// query names no twilio provider with a status_callback_url; 403 when
// X-Twilio-Signature is missing or wrong (Twilio's scheme: the base64
// HMAC-SHA1, keyed with the provider's auth token, of the configured
// status_callback_url with the request's query string, followed by every
// POST parameter's name and value in name order; compared in constant
// time); 400 when the job, MessageStatus or ErrorCode is missing or
// malformed. Otherwise it calls report with the DeliveryReport and answers
// 204 when report returns nil, 500 when it does not (Twilio retries a
// callback it could not deliver, as configured on its side). report is
// called with the request's context, concurrently for concurrent
// callbacks; it never sees the recipient, the sender or the body.
//
// The handler is safe for concurrent use. It never logs.
func (r *Registry) TwilioCallbacks(report func(ctx context.Context, d DeliveryReport) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "POST only", http.StatusMethodNotAllowed)
			return
		}
		query := req.URL.Query()
		name := query.Get("provider")
		p, _, ok := r.Get(name)
		t, isTwilio := p.(*Twilio)
		if !ok || !isTwilio || t.callback == "" {
			http.Error(w, "no such twilio provider with a status callback", http.StatusNotFound)
			return
		}
		req.Body = http.MaxBytesReader(w, req.Body, twilioCallbackLimit)
		if err := req.ParseForm(); err != nil {
			http.Error(w, "unreadable form", http.StatusBadRequest)
			return
		}
		got := req.Header.Get("X-Twilio-Signature")
		want := twilioSignature(t.auth.value, t.callback+"?"+req.URL.RawQuery, req.PostForm)
		if got == "" || !hmac.Equal([]byte(got), []byte(want)) {
			http.Error(w, "bad signature", http.StatusForbidden)
			return
		}
		d := DeliveryReport{Provider: t.name, JobID: query.Get("job"), MessageSID: req.PostForm.Get("MessageSid"),
			Status: req.PostForm.Get("MessageStatus")}
		if d.Status == "" {
			d.Status = req.PostForm.Get("SmsStatus")
		}
		// job is the job's key: <tenant>/<id>, or the id alone for the
		// default tenant (no tenant or id holds a '/').
		if tenant, id, named := strings.Cut(d.JobID, "/"); named {
			if !queue.ValidTenant(tenant) {
				http.Error(w, "job names no tenant", http.StatusBadRequest)
				return
			}
			d.Tenant, d.JobID = tenant, id
		}
		if d.JobID == "" || !statusRE.MatchString(d.Status) {
			http.Error(w, "job or MessageStatus missing or malformed", http.StatusBadRequest)
			return
		}
		if code := req.PostForm.Get("ErrorCode"); code != "" {
			n, err := strconv.Atoi(code)
			if err != nil || n < 0 {
				http.Error(w, "malformed ErrorCode", http.StatusBadRequest)
				return
			}
			d.ErrorCode = n
			d.Detail = TwilioErrorDetail(n)
		}
		if err := report(req.Context(), d); err != nil {
			http.Error(w, "report failed", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

// twilioSignature is the X-Twilio-Signature of a request to fullURL (the
// URL Twilio was given, query string included) with the POST params: the
// base64 HMAC-SHA1, keyed with the auth token, of fullURL followed by each
// param's name and value, in name order (a name's values in their order).
func twilioSignature(authToken, fullURL string, params url.Values) string {
	names := make([]string, 0, len(params))
	for name := range params {
		names = append(names, name)
	}
	slices.Sort(names)
	var b strings.Builder
	b.WriteString(fullURL)
	for _, name := range names {
		values := slices.Clone(params[name])
		slices.Sort(values)
		for _, v := range values {
			b.WriteString(name)
			b.WriteString(v)
		}
	}
	mac := hmac.New(sha1.New, []byte(authToken))
	mac.Write([]byte(b.String()))
	return base64Std(mac.Sum(nil))
}

// twilioDeliveryErrors names the common delivery error codes of Twilio's
// status callbacks.
var twilioDeliveryErrors = map[int]string{
	30001: "Queue overflow",
	30002: "Account suspended",
	30003: "Unreachable destination handset",
	30004: "Message blocked",
	30005: "Unknown destination handset",
	30006: "Landline or unreachable carrier",
	30007: "Message filtered (carrier violation)",
	30008: "Unknown error",
	30009: "Missing segment",
	30010: "Message price exceeds max price",
	30034: "Message from an unregistered number (A2P 10DLC)",
	30036: "Validity period expired",
}

// TwilioErrorDetail is the one-line detail of a Twilio delivery error
// code: "Twilio error 30003: Unreachable destination handset", or "Twilio
// error <code>" for a code it does not name.
func TwilioErrorDetail(code int) string {
	d := "Twilio error " + strconv.Itoa(code)
	if name, ok := twilioDeliveryErrors[code]; ok {
		d += ": " + name
	}
	return d
}
