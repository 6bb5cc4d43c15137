package redact_test

import (
	"fmt"
	"testing"

	"github.com/throttlekit/throttlekit/internal/redact"
)

func TestURL(t *testing.T) {
	for _, tc := range []struct{ name, raw, want string }{
		{"no password", "redis://r:6379/0", "redis://r:6379/0"},
		{"user information", "redis://app:hunter2@r:6379/0", "redis://app:xxxxx@r:6379/0"},
		{"password alone", "redis://:hunter2@r:6379/0", "redis://:xxxxx@r:6379/0"},
		{"password= parameter", "redis://s:26379/0?master_name=m&password=hunter2", "redis://s:26379/0?master_name=m&password=xxxxx"},
		{"unparsable", "redis://r:6379/0\x7fhunter2", "(unparsable URL)"},
		{"OTLP endpoint", "https://user:tok@collector:4318", "https://user:xxxxx@collector:4318"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := redact.URL(tc.raw); got != tc.want {
				t.Errorf("URL(%q) = %q, want %q", tc.raw, got, tc.want)
			}
		})
	}
}

func ExampleURL() {
	fmt.Println(redact.URL("rediss://app:hunter2@redis.example:6380/0"))
	// Output: rediss://app:xxxxx@redis.example:6380/0
}
