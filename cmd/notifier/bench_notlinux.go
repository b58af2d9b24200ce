//go:build !linux

package main

import "os/exec"

// dieWithParent does nothing here: only Linux can tie a child's life to
// its parent's. The bench stops its children when it ends normally.
func dieWithParent(*exec.Cmd) {}
