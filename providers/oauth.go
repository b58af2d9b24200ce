package providers

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"
	"golang.org/x/oauth2/jwt"
)

const (
	// oauthEarly is how long before its expiry a cached access token stops
	// being used, so a token never expires in flight.
	oauthEarly = time.Minute
	// oauthAhead is how long before its expiry a cached access token is
	// replaced in the background while sends go on using it, so no send
	// waits for a token fetch after the first.
	oauthAhead = 5 * time.Minute
	// oauthDefaultLife is how long a token whose answer gave no expires_in
	// is kept.
	oauthDefaultLife = 55 * time.Minute
)

// oauthSource fetches and caches the OAuth access tokens of a Google
// service account (the JWT-bearer grant of RFC 7523, done by
// golang.org/x/oauth2/jwt against the key's token_uri). One fetch at a time;
// senders that need a token meanwhile wait for it, or for their context. A
// token within oauthAhead of its expiry is replaced by a background fetch
// while sends go on using it. Safe for concurrent use.
type oauthSource struct {
	conf   *jwt.Config
	rt     http.RoundTripper
	now    func() time.Time
	sem    chan struct{} // a context-aware mutex around fetches
	bg     context.Context
	cancel context.CancelFunc // ends a background fetch on close
	wg     sync.WaitGroup     // the background fetch

	mu     sync.Mutex
	access string
	expiry time.Time // by now
	closed bool
}

// newOAuthSource reads a service-account JSON key.
func newOAuthSource(key []byte, rt http.RoundTripper, now func() time.Time) (*oauthSource, error) {
	conf, err := google.JWTConfigFromJSON(key, FCMScope)
	if err != nil {
		// The key's text is never part of this error: the JSON decoder
		// names positions and types, google names the "type" field.
		return nil, err
	}
	if len(conf.PrivateKey) == 0 || conf.Email == "" {
		return nil, errors.New("not a service-account key: client_email or private_key missing")
	}
	if rt == nil {
		rt = http.DefaultTransport
	}
	bg, cancel := context.WithCancel(context.Background())
	return &oauthSource{conf: conf, rt: rt, now: now, sem: make(chan struct{}, 1), bg: bg, cancel: cancel}, nil
}

// cached returns the cached token while it has more than oauthEarly left,
// and whether it has more than oauthAhead left.
func (o *oauthSource) cached() (string, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	now := o.now()
	if o.access != "" && now.Before(o.expiry.Add(-oauthEarly)) {
		return o.access, now.Before(o.expiry.Add(-oauthAhead))
	}
	return "", false
}

// close ends a background fetch and waits for it; later sends fetch in the
// foreground only.
func (o *oauthSource) close() {
	o.mu.Lock()
	o.closed = true
	o.mu.Unlock()
	o.cancel()
	o.wg.Wait()
}

// refreshAhead starts a background fetch unless one is running or the
// source is closed. Its failure is not reported: the token in use is still
// valid, and a send that finds none left fetches (and reports) itself.
func (o *oauthSource) refreshAhead(timeout time.Duration) {
	select {
	case o.sem <- struct{}{}:
	default:
		return
	}
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		<-o.sem
		return
	}
	o.wg.Add(1)
	o.mu.Unlock()
	go func() {
		defer o.wg.Done()
		defer func() { <-o.sem }()
		ctx, cancel := context.WithTimeout(o.bg, timeout)
		defer cancel()
		_, _, _ = o.fetch(ctx)
	}()
}

// invalidate drops token if it is still the cached one.
func (o *oauthSource) invalidate(token string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.access == token {
		o.access = ""
	}
}

// token returns a valid access token, fetching one (bounded by timeout and
// ctx) when none is cached. Its errors are provider errors of provider.
func (o *oauthSource) token(ctx context.Context, provider string, timeout time.Duration, s scrubber) (string, error) {
	if t, fresh := o.cached(); t != "" {
		if !fresh {
			o.refreshAhead(timeout)
		}
		return t, nil
	}
	select {
	case o.sem <- struct{}{}:
	case <-ctx.Done():
		return "", &Error{Provider: provider, Class: ErrTransient, Detail: "gave up waiting for an oauth token: " +
			causeDetail(ctx.Err(), s), Err: ctx.Err()}
	}
	defer func() { <-o.sem }()
	if t, _ := o.cached(); t != "" {
		return t, nil
	}

	fctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	access, rec, err := o.fetch(fctx)
	if err != nil {
		var re *oauth2.RetrieveError
		switch {
		case errors.As(err, &re) && re.Response != nil:
			status := re.Response.StatusCode
			class := classByStatus(status)
			switch class {
			case ErrRateLimited:
				class = ErrTransient // the token endpoint's limit, not the provider's contract
			case ErrPermanent:
				class = ErrSender // the key refused (invalid_grant: revoked, deleted): no message is at fault
			}
			e := &Error{Provider: provider, Class: class, Status: status,
				Detail: "oauth token: " + reasonDetail(status, responseReason(re.Body), s)}
			if after, ok := retryAfterOf(re.Response, o.now); ok && class == ErrTransient {
				e.RetryAfter = after
			}
			return "", e
		case rec.err != nil:
			e := transportError(ctx, provider, timeout, rec.err, s)
			e.Detail = "oauth token: " + e.Detail
			return "", e
		}
		if errors.Is(err, errNoAccessToken) {
			return "", &Error{Provider: provider, Class: ErrTransient, Detail: "oauth token: the token endpoint answered no access_token"}
		}
		// A 2xx the library could not read (not JSON).
		return "", &Error{Provider: provider, Class: ErrTransient, Detail: "oauth token: unreadable answer from the token endpoint"}
	}
	return access, nil
}

var errNoAccessToken = errors.New("no access_token")

// fetch gets a new access token within ctx and caches it. The caller holds
// o.sem. rec holds the transport error, if any.
func (o *oauthSource) fetch(ctx context.Context) (string, *ctxTransport, error) {
	rec := &ctxTransport{rt: o.rt, ctx: ctx}
	hctx := context.WithValue(context.Background(), oauth2.HTTPClient, newClient(rec))
	tok, err := o.conf.TokenSource(hctx).Token()
	if err != nil {
		return "", rec, err
	}
	if tok.AccessToken == "" {
		return "", rec, errNoAccessToken
	}
	life := oauthDefaultLife
	if !tok.Expiry.IsZero() {
		// The library stamps the expiry with the wall clock; keep the
		// lifetime and measure it on ours.
		life = time.Until(tok.Expiry)
	}
	o.mu.Lock()
	o.access, o.expiry = tok.AccessToken, o.now().Add(life)
	o.mu.Unlock()
	return tok.AccessToken, rec, nil
}

// ctxTransport binds every request to ctx (the oauth2 library's token
// requests carry none) and remembers the last transport error, which the
// library flattens into text.
type ctxTransport struct {
	rt  http.RoundTripper
	ctx context.Context
	err error
}

func (c *ctxTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.rt.RoundTrip(req.WithContext(c.ctx))
	if err == nil && resp.StatusCode < 200 {
		// A 101 (the only 1xx net/http returns): its body is the raw
		// connection, which no context governs, and the library reads it
		// to its end.
		_ = resp.Body.Close()
		resp, err = nil, errors.New("the token endpoint answered "+resp.Status)
	}
	c.err = err
	return resp, err
}
