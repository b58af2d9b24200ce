package localenv_test

import (
	"bytes"
	"fmt"
	"net/http"

	"github.com/notifier/notifier/internal/localenv"
)

// A sandbox lane enforces its contract as a strict SMS gateway does: the
// third request inside a second of the first is answered 429.
func ExampleStartSandbox() {
	sb, err := localenv.StartSandbox(localenv.SandboxOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sb.Close()
	url := sb.Lane("/sms", 2, 0)
	for i := range 3 {
		resp, err := http.Post(url, "application/json", bytes.NewBufferString(fmt.Sprintf(`{"id":"job-%d"}`, i)))
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
		fmt.Println(resp.StatusCode)
	}
	fmt.Println(sb.Stats("/sms").Accepted, "accepted")
	// Output:
	// 200
	// 200
	// 429
	// 2 accepted
}
