// Package layers holds the tests that keep the module's shape
// (docs/ARCHITECTURE.md): no package imports one above it, and a job's walk
// through dispatch goes down its pipeline's files in the order of the flow.
package layers

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/notifier/notifier/"

// layer is each package's layer; a package may import only lower layers.
var layer = map[string]int{
	"internal/luapre": 0, "internal/text": 0, "internal/stats": 0, "internal/steptrace": 0,
	"internal/roundtrip": 0, "internal/sleep": 0, "internal/localenv": 0, "internal/connlimit": 0,
	"queue": 1, "userlimit": 1, "globallimit": 1, "leaky": 1, "internal/topn": 1,
	"limits/ledger": 1, "limits/fleet": 1, "limits/digest": 1, "limits/suppress": 1,
	"providers": 2, "client": 2, "gateway": 2, // providers send the job: Message is a queue.Job
	"limits":   3,
	"dispatch": 4,
	"config":   5, "inspect": 5,
	"inspect/statuspage": 6,
	"internal/service":   7, "internal/bench": 7, "internal/demo": 7,
	"cli": 8, "cmd/notifier": 9,
	// test support: above what they test, never imported by production code
	"testenv": 10, "testenv/browser": 10, "leaky/leakytest": 10, "userlimit/userlimittest": 10,
	"globallimit/globallimittest": 10, "providers/providertest": 10,
	"deploy": 10, "internal/layers": 10,
}

// commands is the first layer whose packages may import their own layer's
// (what the commands run, and above): below it a package imports only
// lower layers, or what sameLayerAllowed names.
const commands = 7

// sameLayerAllowed are the imports within a layer the design has.
var sameLayerAllowed = map[string]bool{}

func TestNoPackageImportsOneAbove(t *testing.T) {
	out, err := exec.Command("go", "list", "-json", "../../...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	seen := 0
	for dec.More() {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(p.ImportPath, module)
		l, ok := layer[name]
		if !ok {
			t.Errorf("package %s has no layer: add it to layer (and to docs/ARCHITECTURE.md)", name)
			continue
		}
		seen++
		for _, imp := range p.Imports {
			dep, ok := strings.CutPrefix(imp, module)
			if !ok {
				continue
			}
			dl, known := layer[dep]
			switch {
			case !known:
				t.Errorf("%s imports %s, which has no layer", name, dep)
			case dl > l:
				t.Errorf("%s (layer %d) imports %s (layer %d): a package above it", name, l, dep, dl)
			case dl == l && l < commands && !sameLayerAllowed[name+"->"+dep]:
				t.Errorf("%s imports %s of its own layer %d", name, dep, l)
			}
		}
	}
	if seen < 20 {
		t.Fatalf("go list saw %d packages of the module", seen)
	}
}
