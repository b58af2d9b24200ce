package cli

import (
	"bytes"
	"os"
	"os/exec"
	"runtime/debug"
	"strings"
	"testing"
)

// TestVersionFromBuildInfo: the -ldflags -X version wins; without it the
// module version go install stamps; without either "dev". The revision,
// its time and a modified tree come from the VCS settings.
func TestVersionFromBuildInfo(t *testing.T) {
	t.Parallel()
	bi := &debug.BuildInfo{
		Main: debug.Module{Path: "github.com/notifier/notifier", Version: "v0.0.0-20261204101500-1ee04ab0c0de+dirty"},
		Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: "1ee04ab0c0de1ee04ab0c0de1ee04ab0c0de1ee0"},
			{Key: "vcs.time", Value: "2026-12-04T10:15:00Z"},
			{Key: "vcs.modified", Value: "true"},
		},
		Deps: []*debug.Module{{Path: "github.com/nats-io/nats.go", Version: "v1.55.0"}, {Path: "golang.org/x/sync", Version: "v0.25.0"}},
	}
	for _, c := range []struct {
		ld   string
		bi   *debug.BuildInfo
		want string
	}{
		{"v1.2.3", bi, "notifier v1.2.3\n"},
		{"dev", bi, "notifier v0.0.0-20261204101500-1ee04ab0c0de+dirty\n"},
		{"", &debug.BuildInfo{Main: debug.Module{Path: "m", Version: "(devel)"}}, "notifier dev\n"},
		{"dev", nil, "notifier dev\n"},
	} {
		var b bytes.Buffer
		if err := printVersion(&b, c.ld, c.bi); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(b.String(), c.want) {
			t.Errorf("ld %q: first line of\n%s\nwant %q", c.ld, b.String(), c.want)
		}
	}
	var b bytes.Buffer
	_ = printVersion(&b, "dev", bi)
	for _, want := range []string{
		"  revision: 1ee04ab0c0de1ee04ab0c0de1ee04ab0c0de1ee0\n",
		"  time:     2026-12-04T10:15:00Z\n",
		"  modified: true",
		"  module:   github.com/notifier/notifier v0.0.0-20261204101500-1ee04ab0c0de+dirty\n",
		"  dep:      github.com/nats-io/nats.go v1.55.0\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("version output lacks %q:\n%s", want, b.String())
		}
	}
	if strings.Contains(b.String(), "x/sync") {
		t.Errorf("version lists a dependency it does not name:\n%s", b.String())
	}
}

// TestVersionOfTheBuiltBinary: a binary built from this repository names
// the revision it was built from (go build stamps it), as `git rev-parse
// HEAD` says.
func TestVersionOfTheBuiltBinary(t *testing.T) {
	t.Parallel()
	// The go command finds a repository by its .git directory: a git
	// worktree's .git is a file, and its builds carry no revision.
	if st, err := os.Stat("../.git"); err != nil || !st.IsDir() {
		t.Skip("not a git clone (no ../.git directory): go build stamps no revision")
	}
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse HEAD: %v", err)
	}
	out, err := exec.Command(notifierBinary(t), "version").CombinedOutput()
	if err != nil {
		t.Fatalf("version: %v\n%s", err, out)
	}
	if want := "  revision: " + strings.TrimSpace(string(head)) + "\n"; !strings.Contains(string(out), want) {
		t.Errorf("version output lacks %q:\n%s", want, out)
	}
	if strings.HasPrefix(string(out), "notifier dev\n") {
		t.Errorf("version is dev, not the stamped module version:\n%s", out)
	}
}
