package source

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/throttlekit/throttlekit/pkg/policy"
)

// Overlay adds throttlekit's extensions to policy pushed over xDS, whose
// RateLimitConfig proto cannot carry them (modes, algorithms, bursts,
// unit multipliers, rate_limits, fairness, quota_mode, share_threshold,
// value_to_metric, weeks to years, concurrency gates).
//
// An overlay is a directory of policy files in the usual format. A file
// with domain: D applies to the pushed domain D: its descriptors are
// matched to the pushed ones level by level by key and value, and every
// field the pushed descriptor does not set is added to it (inside
// rate_limit too, so algorithm: gcra joins the pushed unit and
// requests_per_unit); its other top-level fields (concurrency) are added
// to the domain. A field set by both is an error, as is an overlay
// descriptor that matches no pushed one: the overlay adds, it never
// overrides or invents. A file without a domain (only concurrency gates)
// is loaded as it is, beside the pushed domains. An overlay for a domain
// that is not pushed is ignored until it is.
//
// The zero Overlay adds nothing. An Overlay is immutable and safe for
// concurrent use.
type Overlay struct {
	byDomain map[string]overlayFile
	plain    []policy.Data // files without a domain
}

type overlayFile struct {
	path string
	top  *yaml.Node // the file's top mapping
}

// LoadOverlay reads every *.yaml and *.yml file directly in dir (names
// starting with "." skipped, as policy.Load does). An empty dir names no
// overlay. Errors name the file and line.
func LoadOverlay(dir string) (*Overlay, error) {
	o := &Overlay{byDomain: map[string]overlayFile{}}
	if dir == "" {
		return o, nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("overlay: %w", err)
	}
	var errs []error
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") || !(strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")) {
			continue
		}
		path := filepath.Join(dir, name)
		if fi, err := os.Stat(path); err != nil || fi.IsDir() {
			continue
		}
		data, err := os.ReadFile(path)
		if err != nil {
			errs = append(errs, fmt.Errorf("overlay %s: %w", path, err))
			continue
		}
		if err := o.add(path, data); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return o, nil
}

// add reads one overlay file.
func (o *Overlay) add(path string, data []byte) error {
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); err != nil {
		// The policy parser gives syntax errors with a caret: use it.
		if _, perr := policy.Parse(path, data); perr != nil {
			return perr
		}
		return fmt.Errorf("%s: %w", path, err)
	}
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return fmt.Errorf("%s: an overlay file is a mapping (domain: <a pushed domain> and descriptors)", path)
	}
	top := doc.Content[0]
	dn := lookup(top, "domain")
	if dn == nil || dn.Value == "" {
		o.plain = append(o.plain, policy.Data{Name: path, Bytes: data})
		return nil
	}
	if first, dup := o.byDomain[dn.Value]; dup {
		return fmt.Errorf("%s:%d: domain: overlay for %q is already in %s; one overlay file per domain", path, dn.Line, dn.Value, first.path)
	}
	o.byDomain[dn.Value] = overlayFile{path: path, top: top}
	return nil
}

// Domains are the domains the overlay has a file for, sorted.
func (o *Overlay) Domains() []string {
	var ds []string
	for d := range o.byDomain {
		ds = append(ds, d)
	}
	sort.Strings(ds)
	return ds
}

// apply merges the overlay's file for domain into doc, a pushed resource's
// document (ConfigYAML's), and reports whether there was one.
func (o *Overlay) apply(domain string, doc *yaml.Node) (bool, error) {
	if o == nil {
		return false, nil
	}
	f, ok := o.byDomain[domain]
	if !ok {
		return false, nil
	}
	top := doc.Content[0]
	m := merger{path: f.path}
	for i := 0; i+1 < len(f.top.Content); i += 2 {
		k, v := f.top.Content[i], f.top.Content[i+1]
		switch k.Value {
		case "domain":
		case "descriptors":
			m.descriptors(top, v, "descriptors")
		default:
			if lookup(top, k.Value) != nil {
				m.failf(k, k.Value, "the pushed resource sets this already; an overlay only adds")
				continue
			}
			top.Content = append(top.Content, k, v)
		}
	}
	return true, errors.Join(m.errs...)
}

type merger struct {
	path string
	errs []error
}

func (m *merger) failf(n *yaml.Node, field, format string, args ...any) {
	m.errs = append(m.errs, fmt.Errorf("%s:%d: %s: %s", m.path, n.Line, field, fmt.Sprintf(format, args...)))
}

// descriptors merges the overlay's descriptor list ov into the list under
// parent's "descriptors" key.
func (m *merger) descriptors(parent, ov *yaml.Node, field string) {
	if ov.Kind != yaml.SequenceNode {
		m.failf(ov, field, "want a list of descriptors")
		return
	}
	pushed := lookup(parent, "descriptors")
	for i, od := range ov.Content {
		f := fmt.Sprintf("%s[%d]", field, i)
		if od.Kind != yaml.MappingNode {
			m.failf(od, f, "want a descriptor (key, value and the fields to add)")
			continue
		}
		key, value := scalar(od, "key"), scalar(od, "value")
		target := findDescriptor(pushed, key, value)
		if target == nil {
			m.failf(od, f, "no pushed descriptor has key %q and value %q at this level; an overlay descriptor must match a pushed one", key, value)
			continue
		}
		for j := 0; j+1 < len(od.Content); j += 2 {
			k, v := od.Content[j], od.Content[j+1]
			switch k.Value {
			case "key", "value":
			case "descriptors":
				m.descriptors(target, v, f+".descriptors")
			case "rate_limit":
				if have := lookup(target, "rate_limit"); have != nil && v.Kind == yaml.MappingNode {
					m.fields(have, v, f+".rate_limit")
					continue
				}
				m.fields(target, &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{k, v}}, f)
			default:
				m.fields(target, &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{k, v}}, f)
			}
		}
	}
}

// fields adds every field of ov to the mapping dst, refusing one dst has.
func (m *merger) fields(dst, ov *yaml.Node, field string) {
	for i := 0; i+1 < len(ov.Content); i += 2 {
		k, v := ov.Content[i], ov.Content[i+1]
		if lookup(dst, k.Value) != nil {
			m.failf(k, field+"."+k.Value, "the pushed resource sets this already; an overlay only adds")
			continue
		}
		dst.Content = append(dst.Content, k, v)
	}
}

// findDescriptor is the descriptor of list with this key and value.
func findDescriptor(list *yaml.Node, key, value string) *yaml.Node {
	if list == nil {
		return nil
	}
	for _, d := range list.Content {
		if scalar(d, "key") == key && scalar(d, "value") == value {
			return d
		}
	}
	return nil
}

// lookup is the value of key in mapping m, or nil.
func lookup(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// scalar is the scalar value of key in mapping m, or "".
func scalar(m *yaml.Node, key string) string {
	if n := lookup(m, key); n != nil && n.Kind == yaml.ScalarNode {
		return n.Value
	}
	return ""
}
