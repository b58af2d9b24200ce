package deploy_test

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	k8syaml "sigs.k8s.io/yaml"

	"github.com/notifier/notifier/config"
)

// No Docker engine, kubectl or cluster runs where these tests run: they
// check what can be checked without one. The Dockerfile is parsed and its
// build stage's command run here (the binary it makes must be static); the
// compose file is decoded into a typed, strict model of what it must hold;
// the Kubernetes manifests are decoded strictly into the API's own types;
// the systemd units' keys are read, and `systemd-analyze verify` runs
// where it is installed.

// ---- the Dockerfile ----

// instruction is one Dockerfile instruction: its keyword, its flags
// (--from=build) and the rest of its line, continuations joined.
type instruction struct {
	cmd   string
	flags []string
	args  string
	line  int
}

// parseDockerfile reads a Dockerfile's instructions: comments and blank
// lines dropped, lines ending in a backslash joined with the next.
func parseDockerfile(t *testing.T, path string) []instruction {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []instruction
	var cur strings.Builder
	start := 0
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") || line == "" && cur.Len() == 0 {
			continue
		}
		if cur.Len() == 0 {
			start = n
		}
		if s, ok := strings.CutSuffix(line, `\`); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(line)
		f := strings.Fields(cur.String())
		in := instruction{cmd: strings.ToUpper(f[0]), line: start}
		rest := f[1:]
		for len(rest) > 0 && strings.HasPrefix(rest[0], "--") {
			in.flags, rest = append(in.flags, rest[0]), rest[1:]
		}
		in.args = strings.Join(rest, " ")
		out = append(out, in)
		cur.Reset()
	}
	if cur.Len() > 0 {
		t.Fatalf("%s: a continuation line ends the file", path)
	}
	return out
}

// stage is a FROM and the instructions after it.
type stage struct {
	image, name string
	ins         []instruction
}

func stages(ins []instruction) []stage {
	var out []stage
	for _, in := range ins {
		if in.cmd == "FROM" {
			f := strings.Fields(in.args)
			s := stage{image: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				s.name = f[2]
			}
			out = append(out, s)
			continue
		}
		if len(out) > 0 {
			out[len(out)-1].ins = append(out[len(out)-1].ins, in)
		}
	}
	return out
}

func (s stage) all(cmd string) []instruction {
	var out []instruction
	for _, in := range s.ins {
		if in.cmd == cmd {
			out = append(out, in)
		}
	}
	return out
}

// execForm decodes an instruction's JSON array (exec) form.
func execForm(t *testing.T, in instruction) []string {
	t.Helper()
	var argv []string
	if err := json.Unmarshal([]byte(in.args), &argv); err != nil || len(argv) == 0 {
		t.Fatalf("Dockerfile:%d %s %s: not the exec form (a JSON array): the image has no shell", in.line, in.cmd, in.args)
	}
	return argv
}

// TestDockerfile: two stages; the build stage makes a static binary
// (CGO_ENABLED=0) of ./cmd/notifier from files the repository has; the
// final stage copies it from the build stage, runs as a non-root user,
// enters the binary (exec form: no shell) and checks /healthz with it.
// The build stage's command is run here and its binary must be static;
// the HEALTHCHECK's command is run against a server answering /healthz.
func TestDockerfile(t *testing.T) {
	t.Parallel()
	ins := parseDockerfile(t, "../Dockerfile")
	st := stages(ins)
	if len(st) != 2 || st[0].name == "" || !strings.HasPrefix(st[0].image, "golang:") {
		t.Fatalf("stages %+v: want a golang build stage with a name, then the image", st)
	}
	build, final := st[0], st[1]
	// The builder's Go is the module's (go.mod's go line): an older one
	// would try to download a toolchain the image cannot reach.
	var goVersion string
	for _, in := range ins {
		if v, ok := strings.CutPrefix(in.args, "GO_VERSION="); in.cmd == "ARG" && ok {
			goVersion = v
		}
	}
	mod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	modGo := "(none)"
	if m := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(mod); m != nil {
		modGo = string(m[1])
	}
	if goVersion != modGo || build.image != "golang:${GO_VERSION}-bookworm" {
		t.Errorf("the build stage is %s with GO_VERSION %q: want golang:${GO_VERSION}-bookworm at go.mod's go %s", build.image, goVersion, modGo)
	}
	if final.name != "" || final.image == build.name || !strings.Contains(final.image, "distroless/static") {
		t.Errorf("the final stage is FROM %s: want distroless's static base, not the build stage", final.image)
	}
	for _, in := range ins {
		if in.cmd == "ADD" {
			t.Errorf("Dockerfile:%d ADD: use COPY", in.line)
		}
	}

	// The build stage: its sources exist; its go build is static.
	for _, in := range build.all("COPY") {
		f := strings.Fields(in.args)
		for _, src := range f[:len(f)-1] {
			if _, err := os.Stat(filepath.Join("..", src)); err != nil {
				t.Errorf("Dockerfile:%d COPY %s: %v", in.line, src, err)
			}
		}
	}
	var goBuild string
	for _, in := range build.all("RUN") {
		if strings.Contains(in.args, "go build") {
			goBuild = in.args
		}
	}
	if !strings.Contains(goBuild, "CGO_ENABLED=0") || !strings.Contains(goBuild, "./cmd/notifier") || !strings.Contains(goBuild, "-o /out/notifier") {
		t.Fatalf("the build stage's go build %q: want CGO_ENABLED=0 ... -o /out/notifier ./cmd/notifier", goBuild)
	}

	// The final stage: the binary from the build stage, a config file of
	// the repository, a non-root user, exec forms.
	var binary string
	for _, in := range final.all("COPY") {
		f := strings.Fields(in.args)
		switch {
		case slices.Contains(in.flags, "--from="+build.name):
			if f[0] != "/out/notifier" {
				t.Errorf("Dockerfile:%d copies %s from the build stage, want /out/notifier", in.line, f[0])
			}
			binary = f[1]
		default:
			if _, err := os.Stat(filepath.Join("..", f[0])); err != nil {
				t.Errorf("Dockerfile:%d COPY %s: %v", in.line, f[0], err)
			}
		}
	}
	if binary == "" {
		t.Fatal("the final stage copies no binary from the build stage")
	}
	users := final.all("USER")
	if len(users) == 0 {
		t.Fatal("the final stage sets no USER: it would run as root")
	}
	user := strings.Split(users[len(users)-1].args, ":")[0]
	if uid, err := strconv.Atoi(user); user == "root" || err == nil && uid == 0 || err != nil && user != "nonroot" {
		t.Errorf("USER %s: want a non-root user (a number other than 0, or nonroot)", users[len(users)-1].args)
	}
	ep := final.all("ENTRYPOINT")
	if len(ep) != 1 || execForm(t, ep[0])[0] != binary {
		t.Errorf("ENTRYPOINT %v: want [%q] in exec form", ep, binary)
	}
	cmd := final.all("CMD")
	if len(cmd) != 1 || strings.Join(execForm(t, cmd[0]), " ") != "run --config /etc/notifier/config.yaml" {
		t.Errorf("CMD %v: want notifier run on the copied configuration", cmd)
	}
	hc := final.all("HEALTHCHECK")
	if len(hc) != 1 {
		t.Fatalf("HEALTHCHECK: %d of them, want 1", len(hc))
	}
	hcArgs, ok := strings.CutPrefix(hc[0].args, "CMD ")
	if !ok {
		t.Fatalf("HEALTHCHECK %s: want its options then CMD [...]", hc[0].args)
	}
	probe := execForm(t, instruction{cmd: "HEALTHCHECK", args: hcArgs, line: hc[0].line})
	if probe[0] != binary || probe[1] != "healthcheck" || !strings.HasSuffix(probe[len(probe)-1], ":9464/healthz") {
		t.Errorf("HEALTHCHECK CMD %v: want %s healthcheck --url …:9464/healthz", probe, binary)
	}
	if s := final.all("STOPSIGNAL"); len(s) != 1 || s[0].args != "SIGTERM" {
		t.Errorf("STOPSIGNAL %v: want SIGTERM", s)
	}

	// The build, as the build stage runs it, here: a static binary.
	bin := staticBinary(t)
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("the CGO_ENABLED=0 binary has a %v program header: it is not static", p.Type)
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the binary needs %v", libs)
	}
	// The HEALTHCHECK's command, with this binary, against /healthz.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintln(w, "ok")
	}))
	defer srv.Close()
	argv := append([]string{}, probe[1:len(probe)-1]...)
	argv = append(argv, strings.Replace(probe[len(probe)-1], "http://127.0.0.1:9464", srv.URL, 1))
	if out, err := exec.Command(bin, argv...).CombinedOutput(); err != nil {
		t.Errorf("the HEALTHCHECK command %v: %v\n%s", argv, err, out)
	}
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// staticBinary builds ./cmd/notifier as the Dockerfile's build stage
// does (CGO_ENABLED=0, -trimpath, -s -w), once per test run.
func staticBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "notifier-static-*")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "notifier")
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", binPath, "../cmd/notifier")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// ---- the compose file ----

// composeFile is what deploy/compose/compose.yaml may hold: decoded with
// unknown fields refused, so a misspelt key fails.
type composeFile struct {
	Name      string                    `yaml:"name"`
	Notifier  composeService            `yaml:"x-notifier"` // the services' shared part (a YAML anchor)
	Services  map[string]composeService `yaml:"services"`
	Volumes   map[string]any            `yaml:"volumes"`
	XComments any                       `yaml:"x-comments"`
}

type composeService struct {
	Build *struct {
		Context    string `yaml:"context"`
		Dockerfile string `yaml:"dockerfile"`
	} `yaml:"build"`
	Image           string            `yaml:"image"`
	Command         []string          `yaml:"command"`
	Environment     map[string]string `yaml:"environment"`
	Ports           []string          `yaml:"ports"`
	Volumes         []string          `yaml:"volumes"`
	DependsOn       any               `yaml:"depends_on"`
	Restart         string            `yaml:"restart"`
	StopGracePeriod string            `yaml:"stop_grace_period"`
	Healthcheck     *struct {
		Test     []string `yaml:"test"`
		Interval string   `yaml:"interval"`
		Timeout  string   `yaml:"timeout"`
		Retries  int      `yaml:"retries"`
		Disable  bool     `yaml:"disable"`
	} `yaml:"healthcheck"`
}

// TestComposeFile: NATS 2.10 or newer with JetStream, Redis 7 or newer, two run
// processes, a gateway, the sandbox and Prometheus, each with its image or
// build, the servers with healthchecks that the notifier's services wait
// for; every file it mounts and its build context exist; every NOTIFIER_
// variable it sets is one the configuration reads (setting it changes the
// loaded configuration), and the configuration it mounts loads with them;
// its Prometheus configuration is Prometheus's own valid one.
func TestComposeFile(t *testing.T) {
	t.Parallel()
	dir := "compose"
	b, err := os.ReadFile(filepath.Join(dir, "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cf composeFile
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&cf); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	want := []string{"gateway", "nats", "prometheus", "redis", "run-1", "run-2", "sandbox"}
	got := make([]string, 0, len(cf.Services))
	for name := range cf.Services {
		got = append(got, name)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("services %v, want %v", got, want)
	}
	nats := cf.Services["nats"]
	if m := regexp.MustCompile(`^nats:2\.(\d+)`).FindStringSubmatch(nats.Image); m == nil || mustAtoi(m[1]) < 10 {
		t.Errorf("nats image %q: want nats:2.10 or newer (notifier run refuses older)", nats.Image)
	}
	if !slices.Contains(nats.Command, "-js") {
		t.Errorf("nats command %v: JetStream off", nats.Command)
	}
	if !strings.HasPrefix(cf.Services["redis"].Image, "redis:") || !strings.HasPrefix(cf.Services["prometheus"].Image, "prom/prometheus:") {
		t.Errorf("images: redis %q, prometheus %q", cf.Services["redis"].Image, cf.Services["prometheus"].Image)
	}
	if m := regexp.MustCompile(`^redis:(\d+)`).FindStringSubmatch(cf.Services["redis"].Image); m == nil || mustAtoi(m[1]) < 7 {
		t.Errorf("redis image %q: want redis:7 or newer (notifier run refuses older)", cf.Services["redis"].Image)
	}
	for _, name := range []string{"nats", "redis"} {
		if hc := cf.Services[name].Healthcheck; hc == nil || len(hc.Test) < 2 || hc.Test[0] != "CMD" {
			t.Errorf("%s: no healthcheck to wait for", name)
		}
	}
	cmds := map[string]string{"run-1": "run", "run-2": "run", "gateway": "gateway", "sandbox": "sandbox"}
	for name, sub := range cmds {
		s := cf.Services[name]
		if s.Build == nil || s.Image != "notifier:local" {
			t.Errorf("%s: build %+v image %q, want this repository's image", name, s.Build, s.Image)
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, s.Build.Context, s.Build.Dockerfile)); err != nil {
			t.Errorf("%s: the build's Dockerfile: %v", name, err)
		}
		if len(s.Command) < 3 || s.Command[0] != sub || s.Command[1] != "--config" {
			t.Errorf("%s: command %v, want %s --config …", name, s.Command, sub)
		}
		if sub != "sandbox" {
			deps, _ := s.DependsOn.(map[string]any)
			for _, d := range []string{"nats", "redis"} {
				if c, _ := deps[d].(map[string]any); c["condition"] != "service_healthy" {
					t.Errorf("%s does not wait for %s to be healthy: %v", name, d, s.DependsOn)
				}
			}
		}
	}
	if hc := cf.Services["gateway"].Healthcheck; hc == nil || !slices.Contains(hc.Test, "healthcheck") || !strings.Contains(strings.Join(hc.Test, " "), ":8081/healthz") {
		t.Errorf("gateway healthcheck %+v: want notifier healthcheck on its own port", hc)
	}
	if hc := cf.Services["sandbox"].Healthcheck; hc == nil || !hc.Disable {
		t.Errorf("sandbox: the image's HEALTHCHECK asks run's port, which it does not serve: disable it")
	}

	// Every file mounted exists; every NOTIFIER_ variable takes effect.
	for name, s := range cf.Services {
		for _, v := range s.Volumes {
			src := strings.Split(v, ":")[0]
			if strings.HasPrefix(src, ".") {
				if _, err := os.Stat(filepath.Join(dir, src)); err != nil {
					t.Errorf("%s mounts %s: %v", name, src, err)
				}
			} else if _, ok := cf.Volumes[src]; !ok {
				t.Errorf("%s mounts the volume %s, which volumes does not declare", name, src)
			}
		}
		if sub, ok := cmds[name]; ok && sub != "sandbox" {
			checkEnvTakesEffect(t, name, filepath.Join(dir, "config.yaml"), s.Environment)
		}
	}
	if out, err := exec.Command(staticBinary(t), "check", "--config", filepath.Join(dir, "config.yaml")).CombinedOutput(); err != nil {
		t.Errorf("notifier check of compose/config.yaml: %v\n%s", err, out)
	}
	promCheck(t, filepath.Join(dir, "prometheus.yml"))
}

func mustAtoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// checkEnvTakesEffect loads path with and without each variable of env:
// each must change the configuration (a variable the configuration does
// not read would be silently ignored), and all of them together must load.
func checkEnvTakesEffect(t *testing.T, service, path string, env map[string]string) {
	t.Helper()
	if len(env) == 0 {
		t.Errorf("%s: no environment: it would reach 127.0.0.1 for NATS and Redis", service)
	}
	none := func(string) string { return "" }
	base, err := config.Load(path, none)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	for k, v := range env {
		if !strings.HasPrefix(k, "NOTIFIER_") {
			t.Errorf("%s sets %s, which the notifier does not read", service, k)
			continue
		}
		cfg, err := config.Load(path, func(name string) string {
			if name == k {
				return v
			}
			return ""
		})
		if err != nil {
			t.Errorf("%s: %s=%s: %v", service, k, v, err)
			continue
		}
		if reflect.DeepEqual(cfg, base) {
			t.Errorf("%s: %s=%s changes nothing in the configuration: no such key", service, k, v)
		}
	}
	if _, err := config.Load(path, func(name string) string { return env[name] }); err != nil {
		t.Errorf("%s: the configuration with its environment: %v", service, err)
	}
}

// promCheck runs Prometheus's own loader on a configuration; where
// promtool is installed it also checks it (rule files included).
func promCheck(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var pc struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
		Global map[string]string `yaml:"global"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&pc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var targets []string
	for _, sc := range pc.ScrapeConfigs {
		for _, s := range sc.StaticConfigs {
			targets = append(targets, s.Targets...)
		}
	}
	slices.Sort(targets)
	if got := strings.Join(targets, " "); got != "gateway:8081 run-1:9464 run-2:9464" {
		t.Errorf("%s scrapes %s, want both run processes and the gateway", path, got)
	}
	if !slices.Equal(pc.RuleFiles, []string{"/etc/prometheus/alerts.yaml"}) {
		t.Errorf("%s rule_files %v, want the mounted alerts", path, pc.RuleFiles)
	}
	if promtool, err := exec.LookPath("promtool"); err == nil {
		if out, err := exec.Command(promtool, "check", "config", "--syntax-only", path).CombinedOutput(); err != nil {
			t.Errorf("promtool check config: %v\n%s", err, out)
		}
	}
}

// ---- the systemd units ----

// unitFile reads a systemd unit's sections and keys (a key may repeat).
func unitFile(t *testing.T, path string) map[string]map[string][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string][]string{}
	section := ""
	for n, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			out[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s:%d: %q is not KEY=value in a section", path, n+1, line)
			}
			out[section][k] = append(out[section][k], v)
		}
	}
	return out
}

// stopBound is how long the shipped configuration's stop may take: the
// longest provider timeout + 1 s, never past nats.ack_wait (README,
// Stopping).
func stopBound(t *testing.T, cfg config.Config) time.Duration {
	t.Helper()
	var longest time.Duration
	for _, p := range cfg.Providers {
		longest = max(longest, p.Timeout)
	}
	return min(longest+time.Second, cfg.NATS.AckWait)
}

// TestSystemdUnits: each unit runs its command on /etc/notifier/config.yaml
// as a user of its own, restarts on failure, stops with SIGTERM and waits
// longer than a stop can take before SIGKILL, and carries the hardening
// options; systemd-analyze verify accepts it where it is installed.
func TestSystemdUnits(t *testing.T) {
	t.Parallel()
	cfg, err := config.Load("../config.yaml", func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	bound := stopBound(t, cfg)
	for unit, sub := range map[string]string{"notifier.service": "run", "notifier-gateway.service": "gateway"} {
		path := filepath.Join("systemd", unit)
		u := unitFile(t, path)
		svc := u["Service"]
		one := func(k string) string {
			if len(svc[k]) != 1 {
				t.Errorf("%s: [Service] %s set %d times, want once", unit, k, len(svc[k]))
				return ""
			}
			return svc[k][0]
		}
		if got, want := one("ExecStart"), "/usr/local/bin/notifier "+sub+" --config /etc/notifier/config.yaml"; got != want {
			t.Errorf("%s: ExecStart=%s, want %s", unit, got, want)
		}
		if r := one("Restart"); r != "on-failure" && r != "always" {
			t.Errorf("%s: Restart=%s", unit, r)
		}
		if user := one("User"); user == "" || user == "root" || user == "0" {
			t.Errorf("%s: User=%s, want a user of its own", unit, user)
		}
		if s := one("KillSignal"); s != "SIGTERM" {
			t.Errorf("%s: KillSignal=%s, want SIGTERM (the clean stop)", unit, s)
		}
		stop, err := time.ParseDuration(one("TimeoutStopSec"))
		if err != nil || stop <= bound || stop <= cfg.NATS.AckWait {
			t.Errorf("%s: TimeoutStopSec=%s (%v), want longer than a stop can take (%s) and nats.ack_wait (%s)", unit, one("TimeoutStopSec"), err, bound, cfg.NATS.AckWait)
		}
		for k, want := range map[string]string{
			"NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes",
			"PrivateDevices": "yes", "ProtectKernelTunables": "yes", "ProtectKernelModules": "yes",
			"ProtectControlGroups": "yes", "RestrictSUIDSGID": "yes", "LockPersonality": "yes",
			"MemoryDenyWriteExecute": "yes", "CapabilityBoundingSet": "", "SystemCallArchitectures": "native",
		} {
			if got := one(k); got != want {
				t.Errorf("%s: %s=%s, want %s", unit, k, got, want)
			}
		}
		if !strings.Contains(one("RestrictAddressFamilies"), "AF_INET") {
			t.Errorf("%s: RestrictAddressFamilies without AF_INET: it could not reach NATS", unit)
		}
		if sub == "run" && one("ExecReload") != "/bin/kill -HUP $MAINPID" {
			t.Errorf("%s: ExecReload: run reloads on SIGHUP", unit)
		}
		if w := u["Install"]["WantedBy"]; len(w) != 1 || w[0] != "multi-user.target" {
			t.Errorf("%s: WantedBy %v", unit, w)
		}
		verifyUnit(t, path)
	}
}

// verifyUnit runs systemd-analyze verify on a copy of the unit whose
// commands are this test's binary (verify wants them to exist), where
// systemd-analyze is installed.
func verifyUnit(t *testing.T, path string) {
	t.Helper()
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Logf("systemd-analyze is not installed: %s checked by its keys only", path)
		return
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	copyPath := filepath.Join(dir, filepath.Base(path))
	if err := os.WriteFile(copyPath, bytes.ReplaceAll(b, []byte("/usr/local/bin/notifier"), []byte(staticBinary(t))), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(analyze, "verify", copyPath)
	cmd.Env = append(os.Environ(), "SYSTEMD_LOG_LEVEL=warning")
	out, err := cmd.CombinedOutput()
	var problems []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		// A container without systemd as PID 1 cannot look units up.
		if l != "" && !strings.Contains(l, "Failed to") && !strings.Contains(l, "System has not been booted") {
			problems = append(problems, l)
		}
	}
	if len(problems) > 0 {
		t.Errorf("systemd-analyze verify %s: %v\n%s", path, err, strings.Join(problems, "\n"))
	}
}

// ---- the Kubernetes manifests ----

// k8sObjects decodes every document of the manifests strictly into its
// Kubernetes API type: an unknown or misspelt field fails.
func k8sObjects(t *testing.T) (deps []*appsv1.Deployment, pdbs []*policyv1.PodDisruptionBudget, svcs []*corev1.Service, cms []*corev1.ConfigMap) {
	t.Helper()
	files, err := filepath.Glob("kubernetes/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
			if strings.TrimSpace(regexp.MustCompile(`(?m)^#.*$`).ReplaceAllString(doc, "")) == "" {
				continue
			}
			var tm metav1.TypeMeta
			if err := k8syaml.Unmarshal([]byte(doc), &tm); err != nil {
				t.Fatalf("%s #%d: %v", f, i, err)
			}
			var obj any
			switch tm.APIVersion + " " + tm.Kind {
			case "apps/v1 Deployment":
				d := &appsv1.Deployment{}
				deps, obj = append(deps, d), d
			case "policy/v1 PodDisruptionBudget":
				p := &policyv1.PodDisruptionBudget{}
				pdbs, obj = append(pdbs, p), p
			case "v1 Service":
				s := &corev1.Service{}
				svcs, obj = append(svcs, s), s
			case "v1 ConfigMap":
				c := &corev1.ConfigMap{}
				cms, obj = append(cms, c), c
			default:
				t.Fatalf("%s #%d: %s %s: a kind this test does not know", f, i, tm.APIVersion, tm.Kind)
			}
			if err := k8syaml.UnmarshalStrict([]byte(doc), obj); err != nil {
				t.Errorf("%s #%d (%s): %v", f, i, tm.Kind, err)
			}
		}
	}
	return deps, pdbs, svcs, cms
}

// TestKubernetesManifests: a run and a gateway Deployment, each with
// readiness on /readyz and liveness on /healthz at a port the container
// declares, resource requests, a non-root read-only container, a grace
// period longer than a stop of the configuration it mounts can take, the
// pods' labels under their selector, and a PodDisruptionBudget selecting
// them; the gateway's Service selects its pods; the ConfigMap holds a
// configuration `notifier check` accepts.
func TestKubernetesManifests(t *testing.T) {
	t.Parallel()
	deps, pdbs, svcs, cms := k8sObjects(t)
	if len(cms) != 1 || cms[0].Data["config.yaml"] == "" {
		t.Fatalf("want one ConfigMap with config.yaml, got %d", len(cms))
	}
	cfg, err := config.Parse([]byte(cms[0].Data["config.yaml"]), func(string) string { return "" })
	if err != nil {
		t.Fatalf("the ConfigMap's config.yaml: %v", err)
	}
	bound := stopBound(t, cfg)
	byName := map[string]*appsv1.Deployment{}
	for _, d := range deps {
		byName[d.Name] = d
	}
	for name, sub := range map[string]string{"notifier-run": "run", "notifier-gateway": "gateway"} {
		d := byName[name]
		if d == nil {
			t.Errorf("no Deployment %s", name)
			continue
		}
		spec := d.Spec.Template.Spec
		sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
		if err != nil || !sel.Matches(labelSet(d.Spec.Template.Labels)) {
			t.Errorf("%s: its pods' labels %v are not under its selector %v", name, d.Spec.Template.Labels, d.Spec.Selector)
		}
		if d.Spec.Replicas == nil || *d.Spec.Replicas < 2 {
			t.Errorf("%s: replicas %v, want at least 2", name, d.Spec.Replicas)
		}
		if g := spec.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second <= bound {
			t.Errorf("%s: terminationGracePeriodSeconds %v, want longer than a stop can take (%s)", name, g, bound)
		}
		if sub == "run" && time.Duration(*spec.TerminationGracePeriodSeconds)*time.Second <= cfg.NATS.AckWait {
			t.Errorf("%s: the grace period is not longer than nats.ack_wait (%s)", name, cfg.NATS.AckWait)
		}
		if len(spec.Containers) != 1 {
			t.Fatalf("%s: %d containers", name, len(spec.Containers))
		}
		c := spec.Containers[0]
		if len(c.Args) < 3 || c.Args[0] != sub || c.Args[2] != "/etc/notifier/config.yaml" {
			t.Errorf("%s: args %v, want %s --config /etc/notifier/config.yaml", name, c.Args, sub)
		}
		ports := map[string]int32{}
		for _, p := range c.Ports {
			ports[p.Name] = p.ContainerPort
		}
		for probe, want := range map[*corev1.Probe]string{c.ReadinessProbe: "/readyz", c.LivenessProbe: "/healthz"} {
			if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != want {
				t.Errorf("%s: want a probe on %s, got %+v", name, want, probe)
				continue
			}
			if p := probe.HTTPGet.Port; p.Type != intstr.String || ports[p.StrVal] == 0 {
				t.Errorf("%s: probe %s on port %v, which the container does not name", name, want, p.String())
			}
		}
		listen := cfg.Metrics.Listen
		if sub == "gateway" {
			listen = cfg.Gateway.Listen
		}
		if len(c.Ports) != 1 || !strings.HasSuffix(listen, fmt.Sprintf(":%d", c.Ports[0].ContainerPort)) || !strings.HasPrefix(listen, "0.0.0.0:") {
			t.Errorf("%s: container port %v, configuration listens on %s (want 0.0.0.0 and that port)", name, c.Ports, listen)
		}
		if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
			t.Errorf("%s: no resource requests", name)
		}
		sc, psc := c.SecurityContext, spec.SecurityContext
		if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
			sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("%s: want runAsNonRoot, a read-only root and no privilege escalation", name)
		}
		covered := false
		for _, p := range pdbs {
			ps, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
			if err == nil && ps.Matches(labelSet(d.Spec.Template.Labels)) && (p.Spec.MinAvailable != nil || p.Spec.MaxUnavailable != nil) {
				covered = true
			}
		}
		if !covered {
			t.Errorf("%s: no PodDisruptionBudget selects its pods", name)
		}
		mounted := false
		for _, v := range spec.Volumes {
			if v.ConfigMap != nil && v.ConfigMap.Name == cms[0].Name {
				mounted = true
			}
		}
		if !mounted {
			t.Errorf("%s: does not mount the ConfigMap %s", name, cms[0].Name)
		}
	}
	if len(svcs) != 1 || !labelsMatch(svcs[0].Spec.Selector, byName["notifier-gateway"].Spec.Template.Labels) {
		t.Errorf("the gateway's Service does not select its pods: %+v", svcs)
	}
}

type labelSet map[string]string

func (l labelSet) Has(k string) bool   { _, ok := l[k]; return ok }
func (l labelSet) Get(k string) string { return l[k] }
func (l labelSet) Lookup(k string) (string, bool) {
	v, ok := l[k]
	return v, ok
}

func labelsMatch(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return len(selector) > 0
}
