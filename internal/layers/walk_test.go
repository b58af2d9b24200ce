package layers

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// flow is dispatch's per-job pipeline in the order of docs/ARCHITECTURE.md's
// diagram: a job is taken in (job.go), admitted (admit.go), waits for its
// slot (waits.go), is sent (send.go), ends (end.go) and its send is settled
// (settle.go). A move from one of these files into an earlier one goes back
// up the plan.
var flow = []string{"job.go", "admit.go", "waits.go", "send.go", "end.go", "settle.go"}

// once are the steps a job's way goes through exactly once: the admission,
// the wait for the send slot, the send. (An end is reached from any step
// that ends the job, and the settle from each end that acknowledges.)
var once = []string{"admit.go", "waits.go", "send.go"}

// walkEntry is where a delivered message enters dispatch's pipeline.
const walkEntry = "pipeline.handle"

// maxEntries is how many times the walk may enter one file of dispatch.
const maxEntries = 3

// TestAJobWalksDownTheDispatchPipeline follows one job through dispatch, from
// the message (pipeline.handle) to its end, as a reader does: every call to
// one of the pipeline's steps (onTheWalk), in the order the source makes
// it, going into each the first time it is called. A move is such a call
// into another file. No move may go back up the flow (from a step's file
// into an earlier step's), no file may be entered more than maxEntries
// times, and the admission, the wait and the send are entered once each: a
// step that keeps going back to a file for a helper is a step whose
// behaviour lives in two places. go test -v prints the walk; issue 30
// counted 101 moves, 53 of them back up the plan, with job.go entered 23
// times.
func TestAJobWalksDownTheDispatchPipeline(t *testing.T) {
	w := loadWalk(t, "../../dispatch")
	moves := w.walk(walkEntry)
	if len(moves) == 0 {
		t.Fatalf("the walk from %s made no move: is %s still the entry?", walkEntry, walkEntry)
	}
	entered := map[string]int{}
	back := 0
	order := []string{flow[0]} // the walk starts in it
	for _, m := range moves {
		entered[m.to]++
		if rank(m.to) >= 0 && rank(m.from) > rank(m.to) {
			back++
		}
		if rank(m.to) >= 0 && !slices.Contains(order, m.to) {
			order = append(order, m.to)
		}
		t.Logf("%-12s %-28s -> %-12s %s", m.from, m.caller, m.to, m.callee)
	}
	files := make([]string, 0, len(entered))
	for f := range entered {
		files = append(files, f)
	}
	slices.Sort(files)
	var tally []string
	for _, f := range files {
		tally = append(tally, fmt.Sprintf("%s %d", f, entered[f]))
	}
	t.Logf("%d moves between %d files, %d back up the plan; entered: %s",
		len(moves), len(files), back, strings.Join(tally, ", "))
	for _, f := range files {
		if entered[f] > maxEntries {
			t.Errorf("the walk enters %s %d times (at most %d)", f, entered[f], maxEntries)
		}
	}
	if back > 0 {
		t.Errorf("%d moves go back up the pipeline's plan (%s)", back, strings.Join(flow, " → "))
	}
	for _, f := range flow[1:] {
		if entered[f] == 0 {
			t.Errorf("the walk never enters %s: is it still a step of the pipeline?", f)
		}
	}
	for _, f := range once {
		if entered[f] != 1 {
			t.Errorf("the walk enters %s %d times: a job's way goes down through it once", f, entered[f])
		}
	}
	t.Logf("pipeline files in the order first entered: %v", order)
}

func rank(file string) int { return slices.Index(flow, file) }

type move struct{ from, caller, to, callee string }

type walker struct {
	fset  *token.FileSet
	info  *types.Info
	decls map[*types.Func]*ast.FuncDecl
	names map[string]*types.Func // "pipeline.handle", "dead"
	done  map[*types.Func]bool
	moves []move
}

// loadWalk parses and type-checks a package's non-test files, with its
// imports read from the build cache's export data (go list -export;
// -trimpath as make's steps build, so a fresh clone finds it in the
// cache instead of compiling the module again).
func loadWalk(t *testing.T, dir string) *walker {
	t.Helper()
	out, err := exec.Command("go", "list", "-trimpath", "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}", dir).Output()
	if err != nil {
		t.Fatalf("go list -export %s: %v", dir, err)
	}
	exports := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if path, file, ok := strings.Cut(sc.Text(), "\t"); ok && file != "" {
			exports[path] = file
		}
	}
	fset := token.NewFileSet()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, n := range names {
		if strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, n, nil, 0)
		if err != nil {
			t.Fatalf("parse %s: %v", n, err)
		}
		files = append(files, f)
	}
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		file, ok := exports[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(file)
	})
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}, Defs: map[*ast.Ident]types.Object{}}
	if _, err := (&types.Config{Importer: imp}).Check(files[0].Name.Name, fset, files, info); err != nil {
		t.Fatalf("type-check %s: %v", dir, err)
	}
	w := &walker{fset: fset, info: info, decls: map[*types.Func]*ast.FuncDecl{}, names: map[string]*types.Func{}, done: map[*types.Func]bool{}}
	for _, f := range files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok {
				continue
			}
			fn := info.Defs[fd.Name].(*types.Func)
			w.decls[fn] = fd
			w.names[funcName(fn)] = fn
		}
	}
	return w
}

func funcName(fn *types.Func) string {
	sig := fn.Type().(*types.Signature)
	if sig.Recv() == nil {
		return fn.Name()
	}
	rt := sig.Recv().Type()
	if p, ok := rt.(*types.Pointer); ok {
		rt = p.Elem()
	}
	if n, ok := rt.(*types.Named); ok {
		return n.Obj().Name() + "." + fn.Name()
	}
	return fn.Name()
}

func (w *walker) file(fn *types.Func) string {
	return filepath.Base(w.fset.Position(w.decls[fn].Pos()).Filename)
}

func (w *walker) walk(entry string) []move {
	fn, ok := w.names[entry]
	if !ok {
		return nil
	}
	w.visit(fn)
	return w.moves
}

// visit goes through fn's body in source order (function literals included,
// where they are written), recording each call into another file and going
// into each callee the first time.
func (w *walker) visit(fn *types.Func) {
	w.done[fn] = true
	ast.Inspect(w.decls[fn].Body, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		callee := w.callee(call.Fun)
		if callee == nil || !onTheWalk(callee) {
			return true
		}
		if from, to := w.file(fn), w.file(callee); from != to {
			w.moves = append(w.moves, move{from: from, caller: funcName(fn), to: to, callee: funcName(callee)})
		}
		if !w.done[callee] {
			w.visit(callee)
		}
		return true
	})
}

// vocabulary are the package-level functions that build the pipeline's
// values (an end), called from every step as errors.New is: not a step.
var vocabulary = map[string]bool{"dead": true, "suppressed": true, "stopped": true}

// parts are the types whose methods the walk does not go into: each is a
// part below the pipeline, called as another package's API is (the core's
// clock, jitter and heartbeat; the backend switch; the fetcher's counts;
// the job's, the admission's and the end's own state), and none calls back
// into the pipeline (TestPartsSitBelowThePipeline). A method of any other
// type counts as a move: a step moved onto a new type is still a step.
var parts = map[string]bool{
	"core": true, "backendSwitch": true, "fetcher": true, "job": true, "admission": true, "end": true,
	"breaker": true, "probes": true, "clockSync": true, "rolling": true, "latencies": true,
	"denialRates": true, "RetryConfig": true,
}

// onTheWalk says whether a call is a move of the pipeline: a call to one of
// the pipeline's methods, to a function of the package (but vocabulary),
// or to a method of a type that is not one of the parts.
func onTheWalk(fn *types.Func) bool {
	name := funcName(fn)
	if recv, _, ok := strings.Cut(name, "."); ok {
		return !parts[recv]
	}
	return !vocabulary[name]
}

// TestPartsSitBelowThePipeline: no method of a part calls one of the
// pipeline's methods (its steps), so the walk loses nothing by not going into them (a
// part that called back up would hide a step from the walk).
func TestPartsSitBelowThePipeline(t *testing.T) {
	w := loadWalk(t, "../../dispatch")
	seen := map[string]bool{}
	for fn, fd := range w.decls {
		recv, _, ok := strings.Cut(funcName(fn), ".")
		if !ok || !parts[recv] {
			continue
		}
		seen[recv] = true
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			if call, ok := n.(*ast.CallExpr); ok {
				if callee := w.callee(call.Fun); callee != nil && strings.HasPrefix(funcName(callee), "pipeline.") {
					t.Errorf("%s (%s) calls the pipeline's %s: a part calls no step", funcName(fn), w.file(fn), funcName(callee))
				}
			}
			return true
		})
	}
	for p := range parts {
		if !seen[p] {
			t.Errorf("parts names %s, which has no method in dispatch: take it out", p)
		}
	}
}

// callee is the package's own function a call expression calls, if any.
func (w *walker) callee(e ast.Expr) *types.Func {
	var id *ast.Ident
	switch x := ast.Unparen(e).(type) {
	case *ast.Ident:
		id = x
	case *ast.SelectorExpr:
		id = x.Sel
	case *ast.IndexExpr:
		return w.callee(x.X)
	default:
		return nil
	}
	fn, ok := w.info.Uses[id].(*types.Func)
	if !ok {
		return nil
	}
	fn = fn.Origin()
	if _, ours := w.decls[fn]; !ours {
		return nil
	}
	return fn
}
