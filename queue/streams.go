package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

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
// subjects notify.jobs.*, notify.jobs.*.high, notify.jobs.*.t.* and
// notify.jobs.*.t.*.high only (a publish to any other subject finds no
// stream and is refused), a
// two-minute duplicate window, and Discard New: when a limit is reached
// (account limits, or the message size bound) a publish is refused rather
// than an old job silently deleted.
func JobStreamConfig(cfg Config, replicas int) jetstream.StreamConfig {
	cfg = cfg.WithDefaults()
	return jetstream.StreamConfig{
		Name:        cfg.Stream,
		Description: "notifier jobs: notify.jobs.<channel>[.t.<tenant>][.high]",
		Subjects:    []string{normalFilter, highFilter, tenantNormalFilter, tenantHighFilter},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
		Duplicates:  DuplicateWindow,
		Discard:     jetstream.DiscardNew,
		MaxMsgs:     -1,
		MaxBytes:    -1,
		MaxAge:      0,
		MaxMsgSize:  maxStoredJob,
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

// ensureStream is read, else update-else-create, retried when another
// process wins a race between the two. A stream already as wanted is only
// read: processes starting together do not all rewrite it (an update
// racing another process's consumer creation trips a data race inside
// nats-server 2.15, seen under -race with the embedded server).
func ensureStream(ctx context.Context, js jetstream.JetStream, sc jetstream.StreamConfig) error {
	if s, err := js.Stream(ctx, sc.Name); err == nil && streamMatches(s.CachedInfo().Config, sc) {
		return nil
	}
	const attempts = 5
	var err error
	for range attempts {
		if _, err = js.UpdateStream(ctx, sc); err == nil {
			return nil
		}
		if !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("update stream %s: %w", sc.Name, err)
		}
		if _, err = js.CreateStream(ctx, sc); err == nil {
			return nil
		}
		if !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return fmt.Errorf("create stream %s: %w", sc.Name, err)
		}
		// Created by another process in between: update it.
	}
	return fmt.Errorf("ensure stream %s: %d attempts raced with other processes: %w", sc.Name, attempts, err)
}

// streamMatches reports whether an existing stream's configuration has
// every setting EnsureStreams gives it.
func streamMatches(have, want jetstream.StreamConfig) bool {
	return slices.Equal(have.Subjects, want.Subjects) && have.Description == want.Description &&
		have.Retention == want.Retention && have.Storage == want.Storage && have.Replicas == want.Replicas &&
		have.Duplicates == want.Duplicates && have.Discard == want.Discard && have.MaxMsgs == want.MaxMsgs &&
		have.MaxBytes == want.MaxBytes && have.MaxAge == want.MaxAge && have.MaxMsgSize == want.MaxMsgSize
}
