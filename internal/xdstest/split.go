package xdstest

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"gopkg.in/yaml.v3"
)

// Split turns one policy file into what a control plane would push for it
// and the overlay file (pkg/source's) that adds what the RateLimitConfig
// proto cannot carry: the resource holds domain, key, value, shadow_mode,
// detailed_metric and rate_limit with a unit of second to day (name,
// unlimited, unit, requests_per_unit, replaces); the overlay holds every
// other field (nil when there is none). The resource is named after the
// file. Split reads YAML as the policy does: aliases and merge keys are
// resolved, YAML 1.1 booleans left to the overlay.
func Split(path string, data []byte) (*rlsconfv3.RateLimitConfig, []byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(doc.Content) == 0 {
		return nil, nil, fmt.Errorf("%s: empty", path)
	}
	top := resolve(doc.Content[0])
	name := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	cfg := &rlsconfv3.RateLimitConfig{Name: name}
	over := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	extra := false
	for i := 0; i+1 < len(top.Content); i += 2 {
		k, v := top.Content[i], top.Content[i+1]
		switch k.Value {
		case "domain":
			cfg.Domain = v.Value
			over.Content = append(over.Content, k, v)
		case "descriptors":
			ds, ov, ext := splitDescriptors(v)
			cfg.Descriptors = ds
			if ext {
				extra = true
				over.Content = append(over.Content, k, ov)
			}
		default:
			extra = true
			over.Content = append(over.Content, k, v)
		}
	}
	if !extra {
		return cfg, nil, nil
	}
	out, err := yaml.Marshal(&yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{over}})
	return cfg, out, err
}

var protoUnits = map[string]rlsconfv3.RateLimitUnit{
	"second": rlsconfv3.RateLimitUnit_SECOND, "minute": rlsconfv3.RateLimitUnit_MINUTE,
	"hour": rlsconfv3.RateLimitUnit_HOUR, "day": rlsconfv3.RateLimitUnit_DAY,
}

func splitDescriptors(list *yaml.Node) ([]*rlsconfv3.RateLimitDescriptor, *yaml.Node, bool) {
	var ds []*rlsconfv3.RateLimitDescriptor
	over := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
	for _, n := range list.Content {
		d := &rlsconfv3.RateLimitDescriptor{}
		ov := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		ext := false
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			switch k.Value {
			case "key":
				d.Key = v.Value
				ov.Content = append(ov.Content, k, v)
			case "value":
				d.Value = v.Value
				ov.Content = append(ov.Content, k, v)
			case "shadow_mode", "detailed_metric":
				b, err := strconv.ParseBool(v.Value)
				if v.Tag != "!!bool" || err != nil {
					ext = true
					ov.Content = append(ov.Content, k, v)
					continue
				}
				if k.Value == "shadow_mode" {
					d.ShadowMode = b
				} else {
					d.DetailedMetric = b
				}
			case "rate_limit":
				rl, rov := splitRateLimit(v)
				d.RateLimit = rl
				if rov != nil {
					ext = true
					ov.Content = append(ov.Content, k, rov)
				}
			case "descriptors":
				sub, sov, sext := splitDescriptors(v)
				d.Descriptors = sub
				if sext {
					ext = true
					ov.Content = append(ov.Content, k, sov)
				}
			default:
				ext = true
				ov.Content = append(ov.Content, k, v)
			}
		}
		ds = append(ds, d)
		if ext {
			over.Content = append(over.Content, ov)
		}
	}
	return ds, over, len(over.Content) > 0
}

// splitRateLimit is the proto's part of a rate_limit and the overlay's
// (nil for none); a rate_limit the proto cannot hold at all (null, a unit
// past day) goes to the overlay whole.
func splitRateLimit(n *yaml.Node) (*rlsconfv3.RateLimitPolicy, *yaml.Node) {
	if n.Kind != yaml.MappingNode {
		return nil, n
	}
	unit := ""
	unlimited := false
	for i := 0; i+1 < len(n.Content); i += 2 {
		switch n.Content[i].Value {
		case "unit":
			unit = strings.ToLower(n.Content[i+1].Value)
		case "unlimited":
			unlimited = n.Content[i+1].Value == "true"
		}
	}
	if _, ok := protoUnits[unit]; !ok && !(unlimited && unit == "") {
		return nil, n
	}
	rl := &rlsconfv3.RateLimitPolicy{Unit: protoUnits[unit], Unlimited: unlimited}
	ov := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		switch k.Value {
		case "unit", "unlimited":
		case "requests_per_unit":
			u, err := strconv.ParseUint(v.Value, 10, 32)
			if err != nil {
				return nil, n
			}
			rl.RequestsPerUnit = uint32(u)
		case "name":
			rl.Name = v.Value
		case "replaces":
			for _, r := range v.Content {
				for j := 0; j+1 < len(r.Content); j += 2 {
					if r.Content[j].Value == "name" {
						rl.Replaces = append(rl.Replaces, &rlsconfv3.RateLimitReplace{Name: r.Content[j+1].Value})
					}
				}
			}
		default:
			ov.Content = append(ov.Content, k, v)
		}
	}
	if len(ov.Content) == 0 {
		return rl, nil
	}
	return rl, ov
}

// resolve is a deep copy of n with aliases replaced by what they name and
// merge keys (<<) expanded, explicit keys winning.
func resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	c := *n
	c.Anchor = ""
	c.Content = nil
	if n.Kind == yaml.MappingNode {
		var merged []*yaml.Node
		seen := map[string]bool{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == "<<" && n.Content[i].Tag == "!!merge" {
				src := resolve(n.Content[i+1])
				srcs := []*yaml.Node{src}
				if src.Kind == yaml.SequenceNode {
					srcs = src.Content
				}
				for _, s := range srcs {
					merged = append(merged, s.Content...)
				}
				continue
			}
			seen[n.Content[i].Value] = true
			c.Content = append(c.Content, resolve(n.Content[i]), resolve(n.Content[i+1]))
		}
		for i := 0; i+1 < len(merged); i += 2 {
			if !seen[merged[i].Value] {
				seen[merged[i].Value] = true
				c.Content = append(c.Content, merged[i], merged[i+1])
			}
		}
		return &c
	}
	for _, ch := range n.Content {
		c.Content = append(c.Content, resolve(ch))
	}
	return &c
}
