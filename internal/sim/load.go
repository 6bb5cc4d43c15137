package sim

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Load reads and validates the scenario in the YAML file at path. Every
// problem is reported at once, as Errors naming the file, line and field.
func Load(path string) (*Scenario, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	return Parse(path, data)
}

// Parse is Load for a file already read; file names it in errors.
func Parse(file string, data []byte) (*Scenario, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		msg := strings.TrimPrefix(err.Error(), "yaml: ")
		return nil, Errors{{File: file, Msg: "not valid YAML: " + msg}}
	}
	r := &reader{file: file, lines: map[string]int{}}
	s := &Scenario{
		File:    file,
		Name:    strings.TrimSuffix(filepath.Base(file), filepath.Ext(file)),
		Seed:    1,
		Settle:  10 * time.Second,
		Backend: Backend{Capacity: []CapacityStep{{At: 0, Factor: 1}}},
	}
	if len(doc.Content) == 0 {
		return nil, Errors{{File: file, Msg: "the file is empty; see config/scenarios/README.md for the fields"}}
	}
	r.scenario(doc.Content[0], s)
	v := &validator{file: file, line: r.lineOf}
	v.check(s)
	// A field the reader could not read is also invalid to the validator;
	// report it once, as the reader saw it.
	errs := r.errs
	for _, e := range v.errs {
		if !slices.ContainsFunc(r.errs, func(re *Error) bool { return within(e.Field, re.Field) }) {
			errs = append(errs, e)
		}
	}
	if len(errs) > 0 {
		slices.SortStableFunc(errs, func(a, b *Error) int { return a.Line - b.Line })
		return nil, errs
	}
	return s, nil
}

// within reports whether field is parent or lies inside it.
func within(field, parent string) bool {
	return field == parent || strings.HasPrefix(field, parent+".") || strings.HasPrefix(field, parent+"[")
}

// reader turns a YAML tree into a Scenario, recording where each field was
// written so that the validator's errors can name the line.
type reader struct {
	file  string
	errs  Errors
	lines map[string]int // field path → line
}

func (r *reader) errorf(n *yaml.Node, field, format string, args ...any) {
	r.errs = append(r.errs, &Error{File: r.file, Line: n.Line, Field: field, Msg: fmt.Sprintf(format, args...)})
}

// lineOf returns the line of field, or of its nearest recorded parent.
func (r *reader) lineOf(field string) int {
	for f := field; f != ""; {
		if l, ok := r.lines[f]; ok {
			return l
		}
		i := strings.LastIndexAny(f, ".[")
		if i < 0 {
			break
		}
		f = f[:i]
	}
	return 0
}

func join(parent, name string) string {
	if parent == "" {
		return name
	}
	return parent + "." + name
}

// fields walks mapping n, calling set for each key in keys and reporting any
// other key, a duplicate key or n not being a mapping.
func (r *reader) fields(n *yaml.Node, field, what string, keys []string, set func(key string, val *yaml.Node, f string)) {
	if n.Kind != yaml.MappingNode {
		r.errorf(n, field, "%s must be a mapping (key: value lines), not %s", what, describe(n))
		return
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		f := join(field, k.Value)
		switch {
		case !slices.Contains(keys, k.Value):
			r.errorf(k, f, "unknown field in %s; the fields are %s", what, strings.Join(keys, ", "))
			continue
		case seen[k.Value]:
			r.errorf(k, f, "given twice")
			continue
		}
		seen[k.Value] = true
		r.lines[f] = k.Line
		if val.Tag == "!!null" {
			continue // left out
		}
		set(k.Value, val, f)
	}
}

func (r *reader) list(n *yaml.Node, field, example string, each func(i int, item *yaml.Node, f string)) {
	if n.Kind != yaml.SequenceNode {
		r.errorf(n, field, "must be a list (%s), not %s", example, describe(n))
		return
	}
	for i, item := range n.Content {
		f := fmt.Sprintf("%s[%d]", field, i)
		r.lines[f] = item.Line
		each(i, item, f)
	}
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	}
	return fmt.Sprintf("%q", n.Value)
}

func (r *reader) scalar(n *yaml.Node, f string) (string, bool) {
	if n.Kind != yaml.ScalarNode {
		r.errorf(n, f, "must be a single value, not %s", describe(n))
		return "", false
	}
	return n.Value, true
}

func (r *reader) str(n *yaml.Node, f string, dst *string) {
	if s, ok := r.scalar(n, f); ok {
		*dst = s
	}
}

func (r *reader) duration(n *yaml.Node, f string, dst *time.Duration) {
	s, ok := r.scalar(n, f)
	if !ok {
		return
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		r.errorf(n, f, "must be a duration with a unit, such as 50ms or 60s, not %q", s)
		return
	}
	*dst = d
}

func (r *reader) float(n *yaml.Node, f string, dst *float64) {
	s, ok := r.scalar(n, f)
	if !ok {
		return
	}
	x, err := strconv.ParseFloat(s, 64)
	if err != nil || n.Tag == "!!str" || math.IsNaN(x) || math.IsInf(x, 0) {
		r.errorf(n, f, "must be a number, not %q", s)
		return
	}
	*dst = x
}

func (r *reader) int(n *yaml.Node, f string, dst *int) {
	s, ok := r.scalar(n, f)
	if !ok {
		return
	}
	x, err := strconv.ParseInt(s, 10, 32)
	if err != nil || n.Tag == "!!str" {
		r.errorf(n, f, "must be a whole number, not %q", s)
		return
	}
	*dst = int(x)
}

var (
	scenarioKeys   = []string{"name", "description", "seed", "duration", "settle", "backend", "load", "clients", "queue", "controllers"}
	backendKeys    = []string{"base_latency", "knee", "jitter", "capacity", "latency", "growth", "jitter_dist", "concurrency_cap", "rate_cap"}
	concCapKeys    = []string{"limit", "action", "defer_latency"}
	rateCapKeys    = []string{"rate", "burst", "action", "defer_latency"}
	clientsKeys    = []string{"count", "requests", "timeout", "retries", "backoff", "think"}
	backoffKeys    = []string{"base", "cap"}
	capacityKeys   = []string{"at", "factor"}
	loadKeys       = []string{"at", "rate"}
	queueKeys      = []string{"max", "timeout"}
	controllerKeys = []string{"name", "kind", "min_limit", "max_limit", "initial_limit", "limit", "params"}
)

func (r *reader) scenario(n *yaml.Node, s *Scenario) {
	r.fields(n, "", "a scenario", scenarioKeys, func(key string, val *yaml.Node, f string) {
		switch key {
		case "name":
			r.str(val, f, &s.Name)
		case "description":
			r.str(val, f, &s.Description)
		case "seed":
			if v, ok := r.scalar(val, f); ok {
				seed, err := strconv.ParseUint(v, 10, 64)
				if err != nil {
					r.errorf(val, f, "must be a whole number ≥ 0, not %q", v)
				}
				s.Seed = seed
			}
		case "duration":
			r.duration(val, f, &s.Duration)
		case "settle":
			r.duration(val, f, &s.Settle)
		case "backend":
			r.backend(val, f, &s.Backend)
		case "load":
			s.Load = nil
			r.list(val, f, "- {at: 0s, rate: 300}", func(i int, item *yaml.Node, f string) {
				var st RateStep
				r.fields(item, f, "a load step", loadKeys, func(key string, val *yaml.Node, f string) {
					if key == "at" {
						r.duration(val, f, &st.At)
					} else {
						r.float(val, f, &st.Rate)
					}
				})
				s.Load = append(s.Load, st)
			})
		case "clients":
			s.Clients = &Clients{Retries: DefaultRetries, Backoff: Backoff{Base: DefaultBackoffBase, Cap: DefaultBackoffCap}}
			r.clients(val, f, s.Clients)
		case "queue":
			r.fields(val, f, "the queue", queueKeys, func(key string, val *yaml.Node, f string) {
				if key == "max" {
					r.int(val, f, &s.Queue.Max)
				} else {
					r.duration(val, f, &s.Queue.Timeout)
				}
			})
		case "controllers":
			r.list(val, f, "- {kind: gradient2}", func(i int, item *yaml.Node, f string) {
				c := ControllerSpec{Line: item.Line}
				r.controller(item, f, &c)
				s.Controllers = append(s.Controllers, c)
			})
		}
	})
}

func (r *reader) backend(n *yaml.Node, field string, b *Backend) {
	r.fields(n, field, "the backend", backendKeys, func(key string, val *yaml.Node, f string) {
		switch key {
		case "base_latency":
			r.duration(val, f, &b.Base)
		case "knee":
			r.float(val, f, &b.Knee)
		case "jitter":
			r.float(val, f, &b.Jitter)
		case "capacity":
			b.Capacity = nil
			r.list(val, f, "- {at: 0s, factor: 1}", func(i int, item *yaml.Node, f string) {
				var st CapacityStep
				r.fields(item, f, "a capacity step", capacityKeys, func(key string, val *yaml.Node, f string) {
					if key == "at" {
						r.duration(val, f, &st.At)
					} else {
						r.float(val, f, &st.Factor)
					}
				})
				b.Capacity = append(b.Capacity, st)
			})
		case "latency":
			r.enum(val, f, latencyModels, (*uint8)(&b.Latency))
		case "growth":
			r.float(val, f, &b.Growth)
		case "jitter_dist":
			r.enum(val, f, jitterDists, (*uint8)(&b.JitterDist))
		case "concurrency_cap":
			b.ConcurrencyCap = &ConcurrencyCap{}
			cc := b.ConcurrencyCap
			r.backendCap(val, f, "a concurrency cap", concCapKeys, &cc.Refusal, func(_ string, val *yaml.Node, f string) {
				r.int(val, f, &cc.Limit)
			})
		case "rate_cap":
			b.RateCap = &RateCap{}
			rc := b.RateCap
			r.backendCap(val, f, "a rate cap", rateCapKeys, &rc.Refusal, func(key string, val *yaml.Node, f string) {
				if key == "rate" {
					r.float(val, f, &rc.Rate)
				} else {
					r.int(val, f, &rc.Burst)
				}
			})
		}
	})
}

// backendCap reads a cap: its own keys through set, and its Refusal.
func (r *reader) backendCap(n *yaml.Node, field, what string, keys []string, ref *Refusal, set func(key string, val *yaml.Node, f string)) {
	r.fields(n, field, what, keys, func(key string, val *yaml.Node, f string) {
		switch key {
		case "action":
			r.enum(val, f, capActions, (*uint8)(&ref.Action))
		case "defer_latency":
			r.duration(val, f, &ref.DeferLatency)
		default:
			set(key, val, f)
		}
	})
}

func (r *reader) clients(n *yaml.Node, field string, c *Clients) {
	r.fields(n, field, "the clients", clientsKeys, func(key string, val *yaml.Node, f string) {
		switch key {
		case "count":
			r.int(val, f, &c.Count)
		case "requests":
			r.int(val, f, &c.Requests)
		case "timeout":
			r.duration(val, f, &c.Timeout)
		case "retries":
			r.int(val, f, &c.Retries)
		case "think":
			r.duration(val, f, &c.Think)
		case "backoff":
			r.fields(val, f, "the backoff", backoffKeys, func(key string, val *yaml.Node, f string) {
				if key == "base" {
					r.duration(val, f, &c.Backoff.Base)
				} else {
					r.duration(val, f, &c.Backoff.Cap)
				}
			})
		}
	})
}

// enum sets *dst to the index of n's value in names.
func (r *reader) enum(n *yaml.Node, f string, names []string, dst *uint8) {
	s, ok := r.scalar(n, f)
	if !ok {
		return
	}
	i := slices.Index(names, s)
	if i < 0 {
		r.errorf(n, f, "must be one of %s, not %q", strings.Join(names, ", "), s)
		return
	}
	*dst = uint8(i)
}

func (r *reader) controller(n *yaml.Node, field string, c *ControllerSpec) {
	r.fields(n, field, "a controller", controllerKeys, func(key string, val *yaml.Node, f string) {
		switch key {
		case "name":
			r.str(val, f, &c.Name)
		case "kind":
			r.str(val, f, &c.Kind)
		case "min_limit":
			r.int(val, f, &c.MinLimit)
		case "max_limit":
			r.int(val, f, &c.MaxLimit)
		case "initial_limit":
			r.int(val, f, &c.InitialLimit)
		case "limit":
			r.int(val, f, &c.Limit)
		case "params":
			if val.Kind != yaml.MappingNode {
				r.errorf(val, f, "params must be a mapping (tolerance: 1.5, ...), not %s", describe(val))
				return
			}
			c.Params = map[string]Param{}
			for i := 0; i+1 < len(val.Content); i += 2 {
				k, v := val.Content[i], val.Content[i+1]
				pf := join(f, k.Value)
				r.lines[pf] = v.Line
				if _, dup := c.Params[k.Value]; dup {
					r.errorf(k, pf, "given twice")
					continue
				}
				if s, ok := r.scalar(v, pf); ok {
					c.Params[k.Value] = Param{Value: s, Line: v.Line}
				}
			}
		}
	})
	if c.Name == "" {
		c.Name = c.Kind
	}
}
