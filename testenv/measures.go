package testenv

import (
	"fmt"
	"os"
)

// TestsToRun is NOTIFIER_TEST_MEASURES, which says which tests that
// measure at a fake provider run (dispatch's and cli's): "" under -race
// every one but those, without -race every one; "only" those alone (make
// measure, without -race); "all" every one, also under -race (make
// mutate). Any other value is an error: a misspelt one would leave the
// measuring tests unrun without a word.
func TestsToRun() (string, error) {
	v := os.Getenv("NOTIFIER_TEST_MEASURES")
	if v != "" && v != "only" && v != "all" {
		return v, fmt.Errorf("NOTIFIER_TEST_MEASURES=%q: want only, all, or unset", v)
	}
	return v, nil
}
