package cli

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// docFiles are the Markdown files whose shell blocks and links are
// checked: the README and every guide in docs/.
func docFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"../README.md"}, files...)
}

// shellLine is one command line of a document's shell block.
type shellLine struct {
	file string
	line int
	text string
}

// shellLines reads the command lines of a Markdown file's shell blocks:
// fenced blocks marked sh, bash, shell or console (a console block's
// commands are its "$ " lines), and indented blocks (four spaces, after a
// blank line). Continuation lines (a trailing backslash) are joined.
func shellLines(t *testing.T, path string) []shellLine {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []shellLine
	var (
		fence, console, indented bool
		lang                     string
		pending                  strings.Builder
		start                    int
		prevBlank                = true
	)
	add := func(n int, text string) {
		if pending.Len() == 0 {
			start = n
		}
		if s, ok := strings.CutSuffix(strings.TrimRight(text, " "), `\`); ok {
			pending.WriteString(s + " ")
			return
		}
		pending.WriteString(text)
		out = append(out, shellLine{file: path, line: start, text: pending.String()})
		pending.Reset()
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		trimmed := strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(trimmed, "```"):
			if fence {
				fence = false
				continue
			}
			fence, lang = true, strings.TrimPrefix(trimmed, "```")
			console = lang == "console"
			continue
		case fence:
			switch {
			case console:
				if cmd, ok := strings.CutPrefix(trimmed, "$ "); ok {
					add(n, cmd)
				}
			case lang == "sh" || lang == "bash" || lang == "shell":
				add(n, l)
			case lang == "" && pending.Len() > 0:
				add(n, l)
			case lang == "":
				// An output block: its "$ " lines are commands.
				if cmd, ok := strings.CutPrefix(trimmed, "$ "); ok {
					add(n, cmd)
				}
			}
			continue
		}
		if strings.HasPrefix(l, "    ") && (prevBlank || indented) && !strings.HasPrefix(trimmed, "-") && !strings.HasPrefix(trimmed, "|") {
			indented = true
			add(n, strings.TrimPrefix(l, "    "))
		} else if trimmed != "" {
			indented = false
		}
		prevBlank = trimmed == ""
	}
	return out
}

// shellWords splits a command line as a shell would, for the purpose of
// finding commands and flags: quotes group, a backslash escapes, and the
// separators ; && || | & end a command (returned as their own words).
func shellWords(s string) []string {
	var words []string
	var cur strings.Builder
	inWord := false
	var quote rune
	flush := func() {
		if inWord {
			words = append(words, cur.String())
			cur.Reset()
			inWord = false
		}
	}
	rs := []rune(s)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == '\\' && i+1 < len(rs):
			i++
			cur.WriteRune(rs[i])
			inWord = true
		case r == '#' && !inWord:
			flush()
			return words // a comment
		case r == ' ' || r == '\t':
			flush()
		case r == ';' || r == '|' || r == '&' || r == '<' || r == '>' || r == '(' || r == ')':
			flush()
			words = append(words, string(r))
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	flush()
	return words
}

// notifierCalls finds the notifier invocations among a line's words: a
// simple command (at the start or after a separator, past VAR=value
// assignments and sudo, env, time, nohup or exec) that is notifier, a path
// ending in /notifier, or go run ./cmd/notifier; each up to the next
// separator.
func notifierCalls(words []string) [][]string {
	isSep := func(w string) bool { return len(w) == 1 && strings.ContainsAny(w, ";|&<>()") }
	var calls [][]string
	start := true
	for i := 0; i < len(words); i++ {
		w := words[i]
		switch {
		case isSep(w):
			start = true
			continue
		case !start:
			continue
		case w == "sudo" || w == "env" || w == "time" || w == "nohup" || w == "exec" || regexp.MustCompile(`^[A-Z_][A-Z0-9_]*=`).MatchString(w):
			continue
		}
		start = false
		var args []string
		switch {
		case w == "notifier" || strings.HasSuffix(w, "/notifier"):
			args = words[i+1:]
		case w == "go" && i+1 < len(words) && words[i+1] == "run":
			j := i + 2
			for j < len(words) && strings.HasPrefix(words[j], "-") {
				j++
			}
			if j < len(words) && words[j] == "./cmd/notifier" {
				args, i = words[j+1:], j
			}
		}
		if args == nil {
			continue
		}
		end := len(args)
		for k, a := range args {
			if isSep(a) {
				end = k
				break
			}
		}
		calls = append(calls, args[:end])
		i += end
	}
	return calls
}

// checkCall walks args through the command tree: subcommands by name,
// then every flag must be one the command (or an ancestor's persistent
// flags) has; a flag's value is skipped. It returns the problem, or "".
func checkCall(root *cobra.Command, args []string) string {
	cmd := root
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if strings.HasPrefix(a, "-") {
			break
		}
		next := findSub(cmd, a)
		if next == nil {
			if len(cmd.Commands()) > 0 && cmd.Args == nil && !cmd.Runnable() {
				return "unknown command " + cmd.CommandPath() + " " + a
			}
			if cmd == root {
				return "unknown command notifier " + a
			}
			break // a positional argument
		}
		cmd = next
	}
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			continue
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		var f *pflag.Flag
		if strings.HasPrefix(a, "--") {
			f = lookupFlag(cmd, name)
		} else if len(name) == 1 {
			f = lookupShorthand(cmd, name)
		}
		if f == nil {
			return cmd.CommandPath() + ": no flag " + a
		}
		if !hasValue && f.Value.Type() != "bool" {
			i++ // its value
		}
	}
	return ""
}

func findSub(cmd *cobra.Command, name string) *cobra.Command {
	for _, c := range cmd.Commands() {
		if c.Name() == name || slicesContains(c.Aliases, name) {
			return c
		}
	}
	if name == "help" {
		return cmd
	}
	return nil
}

func lookupFlag(cmd *cobra.Command, name string) *pflag.Flag {
	if name == "help" {
		return &pflag.Flag{Name: "help", Value: boolValue{}}
	}
	for c := cmd; c != nil; c = c.Parent() {
		if f := c.Flags().Lookup(name); f != nil && (c == cmd || c.PersistentFlags().Lookup(name) != nil) {
			return f
		}
		if f := c.PersistentFlags().Lookup(name); f != nil {
			return f
		}
	}
	return nil
}

func lookupShorthand(cmd *cobra.Command, s string) *pflag.Flag {
	if s == "h" {
		return &pflag.Flag{Name: "help", Value: boolValue{}}
	}
	for c := cmd; c != nil; c = c.Parent() {
		if f := c.Flags().ShorthandLookup(s); f != nil {
			return f
		}
	}
	return nil
}

type boolValue struct{}

func (boolValue) String() string   { return "false" }
func (boolValue) Set(string) error { return nil }
func (boolValue) Type() string     { return "bool" }

func slicesContains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// commandTree is the CLI's root command with every subcommand, as run
// builds it.
func commandTree() *cobra.Command {
	var out strings.Builder
	return rootCmd(&env{stdin: strings.NewReader(""), stdout: &out, stderr: &out, getenv: noEnv})
}

// TestDocsShellBlocksUseRealCommandsAndFlags: every notifier command in a
// shell block of the README or a guide in docs/ is a command of the CLI,
// with flags it has; a few cheap ones run for real.
func TestDocsShellBlocksUseRealCommandsAndFlags(t *testing.T) {
	root := commandTree()
	calls := 0
	seen := map[string]bool{}
	for _, file := range docFiles(t) {
		for _, l := range shellLines(t, file) {
			for _, args := range notifierCalls(shellWords(l.text)) {
				calls++
				if len(args) > 0 {
					seen[args[0]] = true
				}
				if p := checkCall(root, args); p != "" {
					t.Errorf("%s:%d: %s\n  %s", l.file, l.line, p, strings.TrimSpace(l.text))
				}
			}
		}
	}
	if calls < 40 {
		t.Fatalf("found %d notifier commands in the docs' shell blocks: the parser misses them", calls)
	}
	for _, want := range []string{"dev", "demo", "run", "check", "publish", "gateway", "status", "explain", "dead", "sandbox", "version", "bench"} {
		if !seen[want] {
			t.Errorf("no shell block of the docs runs notifier %s", want)
		}
	}
	// The checker itself: a made-up flag and command are caught.
	for _, bad := range [][]string{{"publish", "--chanel", "sms"}, {"frobnicate"}, {"dead", "lsit"}, {"top", "--once"}} {
		if checkCall(root, bad) == "" {
			t.Errorf("checkCall(%v) found no problem", bad)
		}
	}

	// Cheap ones for real: the README's.
	if out, errs, code := runCLI(t, nil, "", "check", "--config", "../config.yaml"); code != 0 {
		t.Errorf("notifier check --config config.yaml: exit %d\n%s%s", code, out, errs)
	}
	if out, _, code := runCLI(t, nil, "", "version"); code != 0 || !strings.HasPrefix(out, "notifier ") {
		t.Errorf("notifier version: exit %d\n%s", code, out)
	}
	if out, errs, code := runCLI(t, nil, "", "check", "--config", "../deploy/compose/config.yaml"); code != 0 {
		t.Errorf("notifier check --config deploy/compose/config.yaml: exit %d\n%s%s", code, out, errs)
	}
}

// TestDocsShellParsing: the block and word splitting the check relies on.
func TestDocsShellParsing(t *testing.T) {
	t.Parallel()
	got := notifierCalls(shellWords(`notifier dev --config config.yaml &   # JetStream + a dispatcher`))
	if len(got) != 1 || strings.Join(got[0], " ") != "dev --config config.yaml" {
		t.Errorf("background call: %q", got)
	}
	got = notifierCalls(shellWords(`head -c 32 /dev/urandom | base64 > key.txt; notifier gateway hash-key < key.txt`))
	if len(got) != 1 || strings.Join(got[0], " ") != "gateway hash-key" {
		t.Errorf("after a pipe: %q", got)
	}
	got = notifierCalls(shellWords(`go run -buildvcs=true ./cmd/notifier publish --body "Hello, world" --high && notifier version`))
	if len(got) != 2 || strings.Join(got[0], " ") != "publish --body Hello, world --high" || got[1][0] != "version" {
		t.Errorf("go run and &&: %q", got)
	}
	dir := t.TempDir()
	md := filepath.Join(dir, "x.md")
	if err := os.WriteFile(md, []byte("text\n\n```sh\nnotifier a \\\n  --b c\n```\n\n```console\n$ notifier d\noutput\n```\n\n    notifier e --f\n\n```yaml\nnotifier: no\n```\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, l := range shellLines(t, md) {
		texts = append(texts, strings.Join(strings.Fields(l.text), " "))
	}
	if strings.Join(texts, "|") != "notifier a --b c|notifier d|notifier e --f" {
		t.Errorf("shell lines %q", texts)
	}
}

// TestDocsLinksResolve: every relative link of the README and the guides
// names a file of the repository, and a #fragment one of its headings.
func TestDocsLinksResolve(t *testing.T) {
	t.Parallel()
	link := regexp.MustCompile(`\[[^\]]*\]\(([^)\s]+)\)`)
	for _, file := range docFiles(t) {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		inFence := false
		for n, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(strings.TrimSpace(l), "```") {
				inFence = !inFence
			}
			if inFence {
				continue
			}
			for _, m := range link.FindAllStringSubmatch(l, -1) {
				target := m[1]
				if regexp.MustCompile(`^[a-z]+:`).MatchString(target) {
					continue
				}
				path, frag, _ := strings.Cut(target, "#")
				resolved := file
				if path != "" {
					resolved = filepath.Join(filepath.Dir(file), path)
				}
				if _, err := os.Stat(resolved); err != nil {
					t.Errorf("%s:%d: link %s: %v", file, n+1, target, err)
					continue
				}
				if frag != "" && strings.HasSuffix(resolved, ".md") && !hasHeading(t, resolved, frag) {
					t.Errorf("%s:%d: link %s: %s has no heading #%s", file, n+1, target, resolved, frag)
				}
			}
		}
	}
}

// hasHeading reports whether a Markdown file has a heading whose GitHub
// anchor is anchor.
func hasHeading(t *testing.T, path, anchor string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		h, ok := strings.CutPrefix(l, "#")
		if !ok {
			continue
		}
		var a strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(strings.TrimLeft(h, "#"))) {
			switch {
			case r == ' ':
				a.WriteRune('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
				a.WriteRune(r)
			}
		}
		if a.String() == anchor {
			return true
		}
	}
	return false
}
