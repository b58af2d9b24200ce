package cli_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/notifier/notifier/cli"
)

// Main is the whole command line as a function: the arguments, the
// process's streams and environment in, the exit code out (SPEC §5), the
// error printed to stderr. A program can run the notifier's commands
// without a child process.
func ExampleMain() {
	var stdout, stderr strings.Builder
	code := cli.Main(context.Background(), []string{"check", "--config", "/nonexistent/config.yaml"},
		strings.NewReader(""), &stdout, &stderr, func(string) string { return "" })
	fmt.Println("exit", code)
	fmt.Print(stderr.String())
	// Output:
	// exit 2
	// notifier: configuration /nonexistent/config.yaml: 1 problem
	//   - cannot read the file: no such file or directory
}
