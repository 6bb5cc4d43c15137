package source

import (
	"fmt"
	"strconv"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"gopkg.in/yaml.v3"
)

// maxDepth bounds how deep a pushed descriptor tree may nest; real ones
// are a few levels deep.
const maxDepth = 32

// ConfigError is a problem in one pushed RateLimitConfig resource that
// stops it from becoming policy YAML. Policy errors found later (a bad
// value, a limit name used twice) are policy.Errors naming the resource as
// their file.
type ConfigError struct {
	Resource string // the resource's name
	Field    string // the field's path, e.g. descriptors[1].rate_limit.unit
	Msg      string
}

func (e *ConfigError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("RateLimitConfig %q: %s", e.Resource, e.Msg)
	}
	return fmt.Sprintf("RateLimitConfig %q: %s: %s", e.Resource, e.Field, e.Msg)
}

// ResourceFile is the name a pushed resource's policy carries in errors and
// in Domain.File: "xds:RateLimitConfig/<name>".
func ResourceFile(name string) string { return "xds:RateLimitConfig/" + name }

// ConfigYAML turns one RateLimitConfig into the policy YAML document
// envoyproxy/ratelimit would load from a file: domain, descriptors with
// key, value, rate_limit (unit, requests_per_unit, unlimited, name,
// replaces), shadow_mode and detailed_metric. It checks only what YAML
// cannot say (a unit outside the enum, a tree too deep); pkg/policy checks
// the rest. The node is a fresh document the caller may change (the
// overlay does).
func ConfigYAML(cfg *rlsconfv3.RateLimitConfig) (*yaml.Node, error) {
	if cfg.GetName() == "" {
		return nil, &ConfigError{Resource: "", Field: "name", Msg: fmt.Sprintf("the resource of domain %q has no name; every RateLimitConfig needs a unique name", cfg.GetDomain())}
	}
	c := converter{resource: cfg.GetName()}
	top := mapping()
	add(top, "domain", str(cfg.GetDomain()))
	if len(cfg.GetDescriptors()) > 0 {
		add(top, "descriptors", c.descriptors(cfg.GetDescriptors(), "descriptors", 1))
	}
	if c.err != nil {
		return nil, c.err
	}
	return &yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{top}}, nil
}

type converter struct {
	resource string
	err      *ConfigError // the first problem; the rest are not looked for
}

func (c *converter) fail(field, format string, args ...any) {
	if c.err == nil {
		c.err = &ConfigError{Resource: c.resource, Field: field, Msg: fmt.Sprintf(format, args...)}
	}
}

func (c *converter) descriptors(ds []*rlsconfv3.RateLimitDescriptor, field string, depth int) *yaml.Node {
	seq := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
	if depth > maxDepth {
		c.fail(field, "descriptors nest deeper than %d levels", maxDepth)
		return seq
	}
	for i, d := range ds {
		f := fmt.Sprintf("%s[%d]", field, i)
		if d == nil {
			c.fail(f, "is null")
			continue
		}
		n := mapping()
		add(n, "key", str(d.GetKey()))
		if d.GetValue() != "" {
			add(n, "value", str(d.GetValue()))
		}
		if rl := d.GetRateLimit(); rl != nil {
			add(n, "rate_limit", c.rateLimit(rl, f+".rate_limit"))
		}
		if d.GetShadowMode() {
			add(n, "shadow_mode", boolean(true))
		}
		if d.GetDetailedMetric() {
			add(n, "detailed_metric", boolean(true))
		}
		if len(d.GetDescriptors()) > 0 {
			add(n, "descriptors", c.descriptors(d.GetDescriptors(), f+".descriptors", depth+1))
		}
		seq.Content = append(seq.Content, n)
	}
	return seq
}

// units maps the proto's enum to the YAML's words.
var units = map[rlsconfv3.RateLimitUnit]string{
	rlsconfv3.RateLimitUnit_SECOND: "second",
	rlsconfv3.RateLimitUnit_MINUTE: "minute",
	rlsconfv3.RateLimitUnit_HOUR:   "hour",
	rlsconfv3.RateLimitUnit_DAY:    "day",
}

func (c *converter) rateLimit(rl *rlsconfv3.RateLimitPolicy, field string) *yaml.Node {
	n := mapping()
	if rl.GetName() != "" {
		add(n, "name", str(rl.GetName()))
	}
	if rl.GetUnlimited() {
		add(n, "unlimited", boolean(true))
	}
	switch u := rl.GetUnit(); {
	case units[u] != "":
		add(n, "unit", str(units[u]))
	case u == rlsconfv3.RateLimitUnit_UNKNOWN && rl.GetUnlimited():
		// An unlimited limit carries no unit.
	default:
		c.fail(field+".unit", "%s is not a unit; want SECOND, MINUTE, HOUR or DAY (week, month and year: set the whole rate_limit in the overlay)", unitName(u))
	}
	if !rl.GetUnlimited() {
		add(n, "requests_per_unit", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatUint(uint64(rl.GetRequestsPerUnit()), 10)})
	}
	if len(rl.GetReplaces()) > 0 {
		seq := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		for i, r := range rl.GetReplaces() {
			if r == nil {
				c.fail(fmt.Sprintf("%s.replaces[%d]", field, i), "is null")
				continue
			}
			m := mapping()
			add(m, "name", str(r.GetName()))
			seq.Content = append(seq.Content, m)
		}
		add(n, "replaces", seq)
	}
	return n
}

func unitName(u rlsconfv3.RateLimitUnit) string {
	if name, ok := rlsconfv3.RateLimitUnit_name[int32(u)]; ok {
		return name
	}
	return strconv.Itoa(int(u))
}

func mapping() *yaml.Node { return &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"} }

func str(s string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s, Style: yaml.DoubleQuotedStyle}
}

func boolean(b bool) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(b)}
}

func add(m *yaml.Node, key string, v *yaml.Node) {
	m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}, v)
}
