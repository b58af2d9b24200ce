package providers

import "time"

// AgeIdleSMTPSessions makes p's idle sessions look idle for d longer
// (SMTPIdleTimeout is on the wall clock) and returns how many there are.
func AgeIdleSMTPSessions(p *SMTP, d time.Duration) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.idle {
		s.lastUsed = s.lastUsed.Add(-d)
	}
	return len(p.idle)
}
