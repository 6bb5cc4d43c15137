package upstreamenv_test

import (
	"flag"
	"fmt"

	"github.com/throttlekit/throttlekit/internal/upstreamenv"
)

func ExampleTranslate() {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	httpAddr := fs.String("http-addr", "127.0.0.1:8080", "")
	logLevel := fs.String("log-level", "info", "")
	// What a manifest written for envoyproxy/ratelimit sets; the caller
	// reads it from the environment (upstreamenv.Names lists what to read).
	env, err := upstreamenv.Translate(map[string]string{"PORT": "9090", "LOG_LEVEL": "warning"}, false)
	if err == nil {
		err = env.Apply(fs)
	}
	fmt.Println(*httpAddr, *logLevel, err)
	// Output: 127.0.0.1:9090 warn <nil>
}
