package queue

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nats-io/nats.go/jetstream"
)

// Stream settings (SPEC §3).
const (
	// DuplicateWindow is how long both streams remember a Nats-Msg-Id.
	DuplicateWindow = 2 * time.Minute
	// DeadMaxAge is how long a dead or suppressed job is kept.
	DeadMaxAge = 7 * 24 * time.Hour
	// maxStoredJob bounds a message in NOTIFY, headers included: twice the
	// job limit, so a slightly oversized job still reaches a worker and is
	// dead-lettered with a reason, while a grossly oversized one is refused
	// to its publisher.
	maxStoredJob = 2 * MaxJobBytes
	// maxStoredDead leaves room for the dead-letter headers.
	maxStoredDead = maxStoredJob + 8<<10
)

// JobStreamConfig is the configuration EnsureStreams gives the job stream:
// work-queue retention (a job is deleted once acknowledged), file storage,
// subjects notify.jobs.*, notify.jobs.*.high, notify.jobs.*.marketing,
// notify.jobs.*.transactional and the same under .t.* (a named tenant's)
// only (a publish to any other subject finds no stream and is refused), a
// two-minute duplicate window, and Discard New: when a limit is reached
// (account limits, or the message size bound) a publish is refused rather
// than an old job silently deleted.
func JobStreamConfig(cfg Config, replicas int) jetstream.StreamConfig {
	cfg = cfg.WithDefaults()
	return jetstream.StreamConfig{
		Name:        cfg.Stream,
		Description: "notifier jobs: notify.jobs.<channel>[.t.<tenant>|.f.<lane>][.high|.marketing|.transactional]",
		Subjects: []string{normalFilter, highFilter, marketingFilter, transactionalFilter,
			tenantNormalFilter, tenantHighFilter, tenantMarketingFilter, tenantTransactionalFilter,
			fairNormalFilter, fairHighFilter, fairMarketingFilter, fairTransactionalFilter},
		Retention:  jetstream.WorkQueuePolicy,
		Storage:    jetstream.FileStorage,
		Replicas:   max(replicas, 1),
		Duplicates: DuplicateWindow,
		Discard:    jetstream.DiscardNew,
		MaxMsgs:    -1,
		MaxBytes:   -1,
		MaxAge:     0,
		MaxMsgSize: maxStoredJob,
	}
}

// DeadStreamConfig is the configuration EnsureStreams gives the dead-letter
// stream: limits retention with a maximum age of 7 days (oldest dropped
// first), file storage, subjects notify.dead.> and notify.suppressed.>, and
// a two-minute duplicate window that makes a retried dead-lettering a no-op.
func DeadStreamConfig(cfg Config, replicas int) jetstream.StreamConfig {
	cfg = cfg.WithDefaults()
	return jetstream.StreamConfig{
		Name:        cfg.DeadStream,
		Description: "notifier jobs not sent: notify.dead.<channel> (failed) and notify.suppressed.<channel> (dropped on purpose)",
		Subjects:    []string{deadPrefix + ">", suppressedPrefix + ">"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
		Duplicates:  DuplicateWindow,
		Discard:     jetstream.DiscardOld,
		MaxMsgs:     -1,
		MaxBytes:    -1,
		MaxAge:      DeadMaxAge,
		MaxMsgSize:  maxStoredDead,
	}
}

// EnsureStreams creates or updates the job stream and the dead-letter
// stream (JobStreamConfig, DeadStreamConfig) with replicas replicas (1 for
// a single server, 3 for an R3 cluster). It is idempotent and safe to call
// from many processes at the same moment: a creation lost to a concurrent
// one turns into an update. Settings that JetStream cannot change on an
// existing stream (retention, storage) make it fail with the server's
// reason; the operator must then migrate the stream.
func EnsureStreams(ctx context.Context, js jetstream.JetStream, cfg Config, replicas int) error {
	for _, sc := range []jetstream.StreamConfig{JobStreamConfig(cfg, replicas), DeadStreamConfig(cfg, replicas)} {
		if err := ensureStream(ctx, js, sc); err != nil {
			return err
		}
	}
	return nil
}

// CreateMissingStreams creates the job and dead-letter streams of cfg that
// do not exist, with replicas replicas, and leaves those that do exist as
// they are, whatever their settings: for a process that publishes but does
// not run the fleet (an application's client), which must not change the
// fleet's streams (EnsureStreams would update them to its own replicas and
// settings at each start). Safe to call from many processes at once.
func CreateMissingStreams(ctx context.Context, js jetstream.JetStream, cfg Config, replicas int) error {
	for _, sc := range []jetstream.StreamConfig{JobStreamConfig(cfg, replicas), DeadStreamConfig(cfg, replicas)} {
		err := retryStart(ctx, "stream "+sc.Name, func(ctx context.Context) error {
			_, err := apiCall(ctx, func(ctx context.Context) (jetstream.Stream, error) { return js.Stream(ctx, sc.Name) })
			if !errors.Is(err, jetstream.ErrStreamNotFound) {
				return err // there (nil), or not known yet
			}
			_, err = apiCall(ctx, func(ctx context.Context) (jetstream.Stream, error) { return js.CreateStream(ctx, sc) })
			if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
				return nil // another process made it meanwhile
			}
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// ensureStream is read, else update-else-create, retried when another
// process wins a race between the two. A stream already as wanted is only
// read: processes starting together do not all rewrite it (an update
// racing another process's consumer creation trips a data race inside
// nats-server 2.15, seen under -race with the embedded server).
//
// On a fresh cluster, several processes creating the same R3 stream at
// once can see a request go unanswered (the meta leader is busy placing
// it): each request gets apiTimeout, and a request that timed out, or that
// the cluster was not ready for, is tried again after a re-read, with
// backoff, until ctx ends (startDeadline when ctx has no deadline).
func ensureStream(ctx context.Context, js jetstream.JetStream, sc jetstream.StreamConfig) error {
	return retryStart(ctx, "stream "+sc.Name, func(ctx context.Context) error { return ensureStreamOnce(ctx, js, sc) })
}

func ensureStreamOnce(ctx context.Context, js jetstream.JetStream, sc jetstream.StreamConfig) error {
	if s, err := apiCall(ctx, func(ctx context.Context) (jetstream.Stream, error) { return js.Stream(ctx, sc.Name) }); err == nil && streamMatches(s.CachedInfo().Config, sc) {
		return nil
	}
	const attempts = 5
	var err error
	for range attempts {
		if _, err = apiCall(ctx, func(ctx context.Context) (jetstream.Stream, error) { return js.UpdateStream(ctx, sc) }); err == nil {
			return nil
		}
		if !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("update stream %s: %w", sc.Name, err)
		}
		if _, err = apiCall(ctx, func(ctx context.Context) (jetstream.Stream, error) { return js.CreateStream(ctx, sc) }); err == nil {
			return nil
		}
		if !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return fmt.Errorf("create stream %s: %w", sc.Name, err)
		}
		// Created by another process in between: update it.
	}
	return fmt.Errorf("ensure stream %s: %d attempts raced with other processes: %w", sc.Name, attempts, err)
}

// Start timing: the set-up of streams and consumers at a process's start.
const (
	// apiTimeout bounds one JetStream API request at start.
	apiTimeout = 5 * time.Second
	// startDeadline bounds the whole set-up when the caller set none.
	startDeadline = time.Minute
)

// apiCall runs one JetStream API request with apiTimeout (within ctx).
func apiCall[T any](ctx context.Context, call func(context.Context) (T, error)) (T, error) {
	rctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	return call(rctx)
}

// retryStart runs step until it succeeds, its error is not one a busy or
// forming cluster gives (then it is returned at once), or ctx ends
// (startDeadline if ctx has no deadline), backing off with jitter between
// tries.
func retryStart(ctx context.Context, what string, step func(context.Context) error) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, startDeadline)
		defer cancel()
	}
	backoff := 100 * time.Millisecond
	for tries := 1; ; tries++ {
		err := step(ctx)
		if err == nil || !clusterBusy(err) {
			return err
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		select {
		case <-ctx.Done():
			return fmt.Errorf("set up %s: gave up after %d tries: %w", what, tries, err)
		case <-time.After(wait):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// settledRefusals are the API errors, sent with a 500 or 503 like a busy
// cluster's, that asking again cannot change: a configuration the server
// refuses (a setting an existing stream cannot change, limits, replicas a
// single server cannot hold) or resources it does not have. A start
// retried them until its deadline (a minute) before it said why.
var settledRefusals = map[jetstream.ErrorCode]bool{
	10052: true, // JSStreamInvalidConfigF: e.g. "can not change storage type"
	10053: true, // JSStreamLimitsErrF
	10074: true, // JSStreamReplicasNotSupportedErr
	10023: true, // JSInsufficientResourcesErr
	10028: true, // JSMemoryResourcesExceededErr
	10047: true, // JSStorageResourcesExceededErr
	10096: true, // JSStreamInvalidErr
}

// clusterBusy reports whether err is one a busy or forming JetStream
// cluster gives, worth trying again: a request unanswered in time, no
// responders, no meta leader or no peers for placement yet, or a request
// the server says is already under way.
func clusterBusy(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrJetStreamNotEnabled) {
		return true
	}
	var api *jetstream.APIError
	if errors.As(err, &api) {
		switch {
		case settledRefusals[api.ErrorCode]:
			return false
		case api.Code == 503, api.Code == 500, api.Code == 408:
			return true
		case strings.Contains(strings.ToLower(api.Description), "in progress"),
			strings.Contains(strings.ToLower(api.Description), "no suitable peers"),
			strings.Contains(strings.ToLower(api.Description), "not available"):
			return true
		}
	}
	return false
}

// streamMatches reports whether an existing stream's configuration has
// every setting EnsureStreams gives it.
func streamMatches(have, want jetstream.StreamConfig) bool {
	return slices.Equal(have.Subjects, want.Subjects) && have.Description == want.Description &&
		have.Retention == want.Retention && have.Storage == want.Storage && have.Replicas == want.Replicas &&
		have.Duplicates == want.Duplicates && have.Discard == want.Discard && have.MaxMsgs == want.MaxMsgs &&
		have.MaxBytes == want.MaxBytes && have.MaxAge == want.MaxAge && have.MaxMsgSize == want.MaxMsgSize
}
