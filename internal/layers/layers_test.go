// Package layers holds the test that keeps the module's packages in their
// layers (docs/ARCHITECTURE.md): no package imports one above it.
package layers

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/notifier/notifier/"

// layer is each package's layer; a package may import only lower layers
// (and, within layer 1, none of its neighbours but queue for gateway).
var layer = map[string]int{
	"internal/luapre": 0, "internal/text": 0, "internal/stats": 0, "internal/steptrace": 0,
	"internal/roundtrip": 0, "internal/sleep": 0, "localenv": 0,
	"queue": 1, "providers": 1, "userlimit": 1, "globallimit": 1, "leaky": 1, "gateway": 1, "suppress": 1, "digest": 1, "ledger": 1, "fleet": 1,
	"dispatch": 2, "client": 2,
	"config": 3, "inspect": 3,
	"statuspage": 4,
	"worker":     5, "bench": 5, "demo": 5,
	"cli": 6, "cmd/notifier": 7,
	// test support: above what they test, never imported by production code
	"testenv": 8, "testenv/browser": 8, "leaky/leakytest": 8, "userlimit/userlimittest": 8,
	"globallimit/globallimittest": 8, "providers/providertest": 8,
	"deploy": 8, "internal/layers": 8,
}

// sameLayerAllowed are the imports within a layer the design has.
var sameLayerAllowed = map[string]bool{"gateway->queue": true}

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
			case dl > l || dl == 7 && l < 7:
				t.Errorf("%s (layer %d) imports %s (layer %d): a package above it", name, l, dep, dl)
			case dl == l && l < 6 && !sameLayerAllowed[name+"->"+dep]:
				t.Errorf("%s imports %s of its own layer %d", name, dep, l)
			}
		}
	}
	if seen < 20 {
		t.Fatalf("go list saw %d packages of the module", seen)
	}
}
