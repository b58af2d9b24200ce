//go:build !unix

package service

// lockDir does nothing where flock is missing: do not run two notifier dev
// on one --data-dir.
func lockDir(string) (unlock func(), err error) { return func() {}, nil }
