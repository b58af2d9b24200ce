package dispatch

import (
	"context"
	"errors"
	"fmt"

	"github.com/notifier/notifier/limits/ledger"
	"github.com/notifier/notifier/queue"
)

// DeadReporter stores a provider's report that a job it accepted was not
// delivered: queue.Publisher.
type DeadReporter interface {
	DeadReport(ctx context.Context, r queue.Report, reason, detail string) error
}

// deliveryStatuses are the delivery statuses counted under their own name
// in notifier_deliveries_total (Twilio's MessageStatus values); any other
// is counted as "other", so the label stays bounded.
var deliveryStatuses = map[string]bool{
	"queued": true, "accepted": true, "scheduled": true, "sending": true, "sent": true,
	"delivered": true, "undelivered": true, "failed": true, "read": true,
	"partially_delivered": true, "canceled": true,
}

// undeliveredStatuses are the final statuses that mean the message did not
// reach the recipient: the job is dead-lettered with reason undelivered.
var undeliveredStatuses = map[string]bool{"undelivered": true, "failed": true}

// ReportDelivery takes a provider's delivery report (a Twilio status
// callback, verified by the caller) for the job jobID: it counts it in
// notifier_deliveries_total{provider,status}, and when the message was not
// delivered (undelivered, failed) stores a dead letter with reason
// undelivered and the provider's detail, so that `notifier dead list`
// shows it. A report for a provider not configured is refused.
func (d *Dispatcher) ReportDelivery(ctx context.Context, provider, tenant, jobID, status string, errorCode int, detail string) error {
	_, pcfg, ok := d.live.Load().providers.Get(provider)
	if !ok {
		return fmt.Errorf("delivery report for %s: no such provider", provider)
	}
	label := status
	if !deliveryStatuses[label] {
		label = "other"
	}
	d.m.Deliveries.WithLabelValues(provider, label).Inc()
	if !undeliveredStatuses[status] {
		return nil
	}
	dr, ok := d.o.DeadLetters.(DeadReporter)
	if !ok {
		return errors.New("delivery report: the dead letters cannot store a report")
	}
	r := queue.Report{Channel: pcfg.Channel, Tenant: tenant, JobID: jobID, Provider: provider, Status: status, ErrorCode: errorCode}
	if err := dr.DeadReport(ctx, r, ledger.ReasonUndelivered, detail); err != nil {
		return fmt.Errorf("delivery report for %s: %w", provider, err)
	}
	d.log.Info("provider reports a sent job undelivered", "provider", provider, "job", queue.MsgID(tenant, jobID), "status", status, "detail", detail)
	return nil
}
