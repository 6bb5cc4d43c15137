package upstreamenv

import (
	"fmt"
	"strconv"
	"strings"
)

// tracing maps envoyproxy/ratelimit's TRACING_* variables to the
// --tracing-* flags; value gives a variable's value or, when upstream's
// defaults apply, its default. Translate calls it.
func (u *Env) tracing(set map[string]string, value func(string) string) []error {
	names := []string{"TRACING_SERVICE_NAME", "TRACING_SERVICE_NAMESPACE", "TRACING_SERVICE_INSTANCE_ID", "TRACING_EXPORTER_PROTOCOL", "TRACING_SAMPLING_RATE"}
	has := func(name string) bool { _, ok := set[name]; return ok }
	on, err := strconv.ParseBool(set["TRACING_ENABLED"])
	if has("TRACING_ENABLED") && err != nil {
		return []error{fmt.Errorf("TRACING_ENABLED=%q: want true or false", set["TRACING_ENABLED"])}
	}
	if !on {
		if has("TRACING_ENABLED") {
			u.set("--tracing", "false", false, "TRACING_ENABLED")
		}
		for _, name := range names {
			if has(name) {
				u.ignore(name, "TRACING_ENABLED is not true")
			}
		}
		return nil
	}
	var errs []error
	u.set("--tracing", "true", false, "TRACING_ENABLED")
	// Upstream's defaults (service RateLimit, OTLP over HTTP) apply with
	// TRACING_ENABLED, which only upstream's environment sets.
	switch p := strings.ToLower(value("TRACING_EXPORTER_PROTOCOL")); p {
	case "", "http":
		u.set("--tracing-protocol", "http", !has("TRACING_EXPORTER_PROTOCOL"), "TRACING_EXPORTER_PROTOCOL")
	case "grpc":
		u.set("--tracing-protocol", "grpc", false, "TRACING_EXPORTER_PROTOCOL")
	default:
		errs = append(errs, fmt.Errorf("TRACING_EXPORTER_PROTOCOL=%q: want http or grpc", set["TRACING_EXPORTER_PROTOCOL"]))
	}
	if v := value("TRACING_SERVICE_NAME"); v != "" {
		u.set("--tracing-service-name", v, !has("TRACING_SERVICE_NAME"), "TRACING_SERVICE_NAME")
	}
	for _, f := range []struct{ name, flag string }{
		{"TRACING_SERVICE_NAMESPACE", "--tracing-service-namespace"},
		{"TRACING_SERVICE_INSTANCE_ID", "--tracing-service-instance-id"},
		{"TRACING_SAMPLING_RATE", "--tracing-sampling-rate"},
	} {
		if has(f.name) {
			u.set(f.flag, set[f.name], false, f.name)
		}
	}
	return errs
}
