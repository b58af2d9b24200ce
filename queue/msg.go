package queue

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ackTimeout bounds a double ack whose context has no deadline.
const ackTimeout = 5 * time.Second

// Acknowledgement bodies of the JetStream protocol (sent to the message's
// reply subject).
var (
	ackAck      = []byte("+ACK")
	ackNak      = []byte("-NAK")
	ackProgress = []byte("+WPI")
	ackTerm     = []byte("+TERM")
)

// pulledMsg is a message received on one of our pull-request inboxes. It
// implements jetstream.Msg with the JetStream acknowledgement protocol, so
// a Delivery works the same whatever pulled it.
type pulledMsg struct {
	m  *nats.Msg
	nc *nats.Conn

	mu   sync.Mutex
	done bool // a terminal acknowledgement was sent
}

var _ jetstream.Msg = (*pulledMsg)(nil)

func (p *pulledMsg) Metadata() (*jetstream.MsgMetadata, error) {
	md, err := p.m.Metadata() // parses the $JS.ACK reply subject
	if err != nil {
		return nil, err
	}
	return &jetstream.MsgMetadata{
		Sequence:     jetstream.SequencePair{Consumer: md.Sequence.Consumer, Stream: md.Sequence.Stream},
		NumDelivered: md.NumDelivered,
		NumPending:   md.NumPending,
		Timestamp:    md.Timestamp,
		Stream:       md.Stream,
		Consumer:     md.Consumer,
		Domain:       md.Domain,
	}, nil
}

// ackMetadata is what a delivery keeps of the JetStream metadata in a
// message's $JS.ACK reply subject, read as nats.Msg.Metadata reads it
// (both forms: $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<tm>.<pending>,
// and the newer one with <domain>.<account hash> after $JS.ACK and a token
// at the end), without the two structs that Metadata allocates for every
// message. ok is false when the subject is not one.
func ackMetadata(reply string) (stream string, streamSeq, delivered uint64, published time.Time, ok bool) {
	tok, ok := ackTokens(reply)
	if !ok {
		return "", 0, 0, time.Time{}, false
	}
	return tok[0], ackNum(tok[3]), ackNum(tok[2]), time.Unix(0, int64(ackNum(tok[5]))), true
}

// ackConsumer is the stream and consumer a message was delivered by, read
// from its $JS.ACK reply subject as ackMetadata reads it.
func ackConsumer(reply string) (stream, consumer string, ok bool) {
	tok, ok := ackTokens(reply)
	return tok[0], tok[1], ok
}

// ackTokens splits an ack subject: stream, consumer, delivered, sseq,
// cseq, tm.
func ackTokens(reply string) (tok [6]string, ok bool) {
	const prefix = "$JS.ACK."
	n := strings.Count(reply, ".") + 1
	if n < 9 || (n > 9 && n < 11) || !strings.HasPrefix(reply, prefix) {
		return tok, false
	}
	rest := reply[len(prefix):]
	if n > 9 {
		_, rest, _ = strings.Cut(rest, ".") // domain
		_, rest, _ = strings.Cut(rest, ".") // account hash
	}
	for i := range tok {
		tok[i], rest, _ = strings.Cut(rest, ".")
	}
	return tok, true
}

// ackNum is a number token of an ack subject, 0 when it is not one (as
// nats.go reads them).
func ackNum(d string) (n uint64) {
	for _, c := range []byte(d) {
		if c < '0' || c > '9' {
			return 0
		}
		n = n*10 + uint64(c-'0')
	}
	return n
}

func (p *pulledMsg) Data() []byte         { return p.m.Data }
func (p *pulledMsg) Headers() nats.Header { return p.m.Header }
func (p *pulledMsg) Subject() string      { return p.m.Subject }
func (p *pulledMsg) Reply() string        { return p.m.Reply }
func (p *pulledMsg) Ack() error           { return p.reply(ackAck, true) }
func (p *pulledMsg) Nak() error           { return p.reply(ackNak, true) }
func (p *pulledMsg) InProgress() error    { return p.reply(ackProgress, false) }
func (p *pulledMsg) Term() error          { return p.reply(ackTerm, true) }

// DoubleAck acknowledges and waits for the server's confirmation (5s when
// ctx has no deadline).
func (p *pulledMsg) DoubleAck(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, ackTimeout)
		defer cancel()
	}
	return p.send(func() error {
		_, err := p.nc.RequestWithContext(ctx, p.m.Reply, ackAck)
		return err
	}, true)
}

func (p *pulledMsg) NakWithDelay(delay time.Duration) error {
	if delay <= 0 {
		return p.Nak()
	}
	return p.reply(fmt.Appendf(nil, `%s {"delay": %d}`, ackNak, delay.Nanoseconds()), true)
}

func (p *pulledMsg) TermWithReason(reason string) error {
	return p.reply(fmt.Appendf(nil, "%s %s", ackTerm, reason), true)
}

// reply publishes body to the reply subject.
func (p *pulledMsg) reply(body []byte, terminal bool) error {
	return p.send(func() error { return p.nc.Publish(p.m.Reply, body) }, terminal)
}

// send runs one acknowledgement; a terminal one may succeed only once.
func (p *pulledMsg) send(ack func() error, terminal bool) error {
	if p.m.Reply == "" {
		return jetstream.ErrMsgNoReply
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		return jetstream.ErrMsgAlreadyAckd
	}
	err := ack()
	if err == nil && terminal {
		p.done = true
	}
	return err
}
