package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Parse reads one policy file: data is its contents and file the name its
// errors and Domain.File carry. It returns the domain with every default
// filled in, or a nil Domain and an Errors listing every problem found
// (sorted by line). The checks that span files (a domain defined twice) are
// Load's. Parse is safe for concurrent use.
func Parse(file string, data []byte) (*Domain, error) {
	d, _, errs := parseFile(file, data)
	if len(errs) > 0 {
		return nil, errs
	}
	return d, nil
}

// parseFile is Parse, also returning where the domain's name is (for Load's
// duplicate-domain check); it returns the domain even when there are errors,
// as far as it could be read.
func parseFile(file string, data []byte) (*Domain, Pos, Errors) {
	r := &reader{file: file}
	top := r.document(data)
	var d *Domain
	var namePos Pos
	if top != nil {
		d, namePos = r.domain(top)
		r.checkDomain(d)
	}
	sortErrors(r.errs)
	return d, namePos, r.errs
}

// document decodes data into one YAML document and returns its top node, or
// nil after recording why there is none.
func (r *reader) document(data []byte) *yaml.Node {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := decode(dec, &doc); err != nil {
		if errors.Is(err, io.EOF) {
			r.errorf(nil, "", "no domain: the file is empty or holds only comments (start it with domain: <name>)")
		} else {
			r.syntaxError(data, err)
		}
		return nil
	}
	// Documents after the first may only be empty: a trailing "---" (which
	// envoyproxy/ratelimit accepts) is fine; a second domain is not.
	for {
		var next yaml.Node
		err := decode(dec, &next)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			r.syntaxError(data, err)
			return nil
		}
		if len(next.Content) > 0 && !isNull(next.Content[0]) {
			r.errorf(&next, "", "a second YAML document starts here; a policy file holds one document (one domain): move it to a file of its own")
			return nil
		}
	}
	if len(doc.Content) == 0 {
		r.errorf(&doc, "", "no domain: the document is empty (start it with domain: <name>)")
		return nil
	}
	top := r.deref(doc.Content[0])
	switch {
	case isNull(top):
		r.errorf(top, "", "no domain: the document is empty (start it with domain: <name>)")
		return nil
	case top.Kind != yaml.MappingNode:
		r.errorf(top, "", "the top level is %s, not a mapping (a policy file is a mapping: domain: <name> and descriptors: [...])", describe(top))
		return nil
	}
	return top
}

// decode runs one Decode, turning a panic inside yaml.v3 into an error: a
// policy file is untrusted input and the parser is not ours, so this is the
// one place a recover stands guard (no panic reaches a reload).
func decode(dec *yaml.Decoder, n *yaml.Node) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("yaml: the YAML parser failed on this input (%v)", v)
		}
	}()
	return dec.Decode(n)
}

// domain reads the top-level mapping.
func (r *reader) domain(top *yaml.Node) (*Domain, Pos) {
	d := &Domain{File: r.file}
	var nameNode, costsNode *yaml.Node
	nameOK := true
	for _, p := range r.pairs(top, "", 0) {
		switch p.name {
		case "domain":
			nameNode = p.val
			d.Name, nameOK = r.str(p.val, "domain", "domain")
		case "descriptors":
			d.Descriptors = r.descriptors(p.val, "descriptors", 1)
		case "concurrency":
			d.Gates = r.gates(p.val, "concurrency")
		case "costs":
			costsNode = p.val
			d.Costs = r.costs(p.val, "costs")
		default:
			r.unknownKey(p.key, "", topLevel)
		}
	}
	switch {
	case r.halted, !nameOK:
	case nameNode == nil && len(d.Gates) > 0 && len(d.Descriptors) == 0 && len(d.Costs) > 0:
		r.errorf(costsNode, "costs", "costs take their units from the file's domain: add domain: <name> and the descriptors its limits are on")
	case nameNode == nil && len(d.Gates) > 0 && len(d.Descriptors) == 0:
		// A file of gates only: no domain needed.
	case nameNode == nil:
		r.errorf(top, "domain", "no domain: add domain: <name> at the top of the file")
	case d.Name == "":
		r.errorf(nameNode, "domain", "domain is empty: write its name, e.g. domain: edge")
	}
	for _, c := range d.Costs {
		c.Domain = d.Name
	}
	return d, r.pos(nameNode)
}

// descriptors reads a list of descriptors at one level of the tree.
func (r *reader) descriptors(n *yaml.Node, field string, depth int) []*Descriptor {
	if isNull(n) {
		return nil
	}
	if depth > maxDepth {
		r.halt(n, field, fmt.Sprintf("descriptors nest deeper than %d levels (does an alias refer to its own ancestor?)", maxDepth))
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		r.errorf(n, field, "descriptors must be a list, not %s (write each descriptor as a list item: - key: ...)", describe(n))
		return nil
	}
	var out []*Descriptor
	// Upstream keys its map by key+"_"+value, so key "a" value "b_c" and key
	// "a_b" value "c" collide there and the file is rejected as a duplicate.
	// We compare (key, value) pairs, which is what the file means: those two
	// are different descriptors and both load.
	type composite struct{ key, value string }
	seen := map[composite]*Descriptor{}
	for i, e := range n.Content {
		f := index(field, i)
		e = r.deref(e)
		if e == nil {
			break
		}
		if e.Kind != yaml.MappingNode {
			r.errorf(e, f, "a descriptor must be a mapping (key: ..., value: ..., rate_limit: ...), not %s", describe(e))
			continue
		}
		d := r.descriptor(e, f, depth)
		if d.Key == "" {
			continue // already reported
		}
		c := composite{d.Key, d.Value}
		if first, dup := seen[c]; dup {
			if d.Value == "" {
				r.errorAt(d.Pos, f, fmt.Sprintf("duplicate descriptor: key %s without a value is already defined at line %d at this level; merge the two", quote(d.Key), first.Pos.Line))
			} else {
				r.errorAt(d.Pos, f, fmt.Sprintf("duplicate descriptor: key %s with value %s is already defined at line %d at this level; merge the two", quote(d.Key), quote(d.Value), first.Pos.Line))
			}
			continue
		}
		seen[c] = d
		out = append(out, d)
	}
	return out
}

// descriptor reads one descriptor mapping and, recursively, its children.
func (r *reader) descriptor(m *yaml.Node, field string, depth int) *Descriptor {
	d := &Descriptor{
		Mode:         Strict,
		OnStoreError: OnErrorError,
		Lease:        Lease{WindowCoupled: true},
		Pos:          r.pos(m),
	}
	var (
		keyNode, shareKey, leaseVal, fedVal  *yaml.Node
		modeKey, leaseKey, storeKey, fairKey *yaml.Node
		fedKey                               *yaml.Node
		limit                                *Limit
		more                                 []*Limit
		modeOK                               = true
		hasKey, keyOK                        bool
	)
	for _, p := range r.pairs(m, field, 0) {
		f := join(field, p.name)
		switch p.name {
		case "key":
			hasKey, keyNode = true, p.val
			d.Key, keyOK = r.str(p.val, f, "key")
			d.Pos = r.pos(p.key)
		case "value":
			d.Value, _ = r.str(p.val, f, "value")
		case "rate_limit":
			limit = r.limit(p.val, f)
		case "rate_limits":
			more = r.limitList(p.val, f)
		case "descriptors":
			d.Descriptors = r.descriptors(p.val, f, depth+1)
		case "shadow_mode":
			d.ShadowMode, _ = r.boolean(p.val, f, p.name)
		case "quota_mode":
			d.QuotaMode, _ = r.boolean(p.val, f, p.name)
		case "detailed_metric":
			d.DetailedMetric, _ = r.boolean(p.val, f, p.name)
		case "value_to_metric":
			d.ValueToMetric, _ = r.boolean(p.val, f, p.name)
		case "share_threshold":
			d.ShareThreshold, _ = r.boolean(p.val, f, p.name)
			shareKey = p.key
		case "mode":
			if !isNull(p.val) {
				modeKey = p.key
				d.Mode, modeOK = r.mode(p.val, f)
			}
		case "lease":
			if !isNull(p.val) {
				leaseKey, leaseVal = p.key, p.val
			}
		case "on_store_error":
			if !isNull(p.val) {
				storeKey = p.key
				d.OnStoreError, _ = r.storeErrorPolicy(p.val, f)
			}
		case "fairness":
			if !isNull(p.val) {
				fairKey = p.key
				d.Fairness = r.fairness(p.val, f)
			}
		case "federation":
			if !isNull(p.val) {
				fedKey, fedVal = p.key, p.val
			}
		default:
			r.unknownKey(p.key, field, descriptorLevel)
		}
	}
	if r.halted {
		return d
	}
	switch {
	case !hasKey:
		r.errorf(m, field, "descriptor has no key: add key: <descriptor entry key>, e.g. key: remote_address")
	case keyOK && d.Key == "":
		r.errorf(keyNode, join(field, "key"), "descriptor key is empty: write the descriptor entry's key, e.g. key: remote_address")
	}
	if limit != nil {
		d.Limits = append(d.Limits, limit)
	}
	d.Limits = append(d.Limits, more...)
	r.checkCounters(d)

	if d.ShareThreshold && !d.HasWildcard() {
		r.errorf(shareKey, join(field, "share_threshold"), "share_threshold needs a wildcard value (one with *, e.g. value: /api/*) whose matches share one counter; this descriptor's value is %s", quote(d.Value))
	}
	if leaseVal != nil {
		d.Lease = r.lease(leaseVal, join(field, "lease"))
		if modeOK && d.Mode != Leased {
			r.errorf(leaseKey, join(field, "lease"), "lease applies only with mode: leased (add mode: leased, or remove lease)")
		}
	}
	if fedVal != nil {
		d.Federation = r.federation(fedVal, join(field, "federation"))
		if modeOK && d.Mode != Federated {
			r.errorf(fedKey, join(field, "federation"), "federation applies only with mode: federated (add mode: federated, or remove federation)")
		}
	}
	if d.Mode == Federated {
		if d.Federation == nil {
			d.Federation = &Federation{Outage: FailClosed}
		}
		r.checkFederated(d, field, modeKey, leaseKey, storeKey, fairKey)
	}
	r.needLimits(d, field, modeKey, leaseKey, storeKey, fairKey, fedKey)
	if d.Fairness != nil && fairKey != nil {
		switch {
		case len(d.Limits) != 1 || d.Limits[0].Unlimited || d.Limits[0].RequestsPerUnit == 0:
			r.errorf(fairKey, join(field, "fairness"), "fairness shares one limit: give this descriptor exactly one rate_limit with requests_per_unit ≥ 1")
		case d.Limits[0].Algorithm != FixedWindow:
			r.errorf(fairKey, join(field, "fairness"), "fairness splits a fixed window's budget: use algorithm: fixed_window (the default), not %s", d.Limits[0].Algorithm)
		case modeKey != nil:
			r.errorf(modeKey, join(field, "mode"), "a fair limit leases its budget itself: remove mode (and lease) beside fairness")
		}
	}
	return d
}

// needLimits reports mode, lease and on_store_error on a descriptor that has
// no limit they could apply to.
func (r *reader) needLimits(d *Descriptor, field string, keys ...*yaml.Node) {
	for _, l := range d.Limits {
		if !l.Unlimited {
			return
		}
	}
	why := "this descriptor has no rate_limit"
	if len(d.Limits) > 0 {
		why = "this descriptor's only limits are unlimited"
	}
	for _, k := range keys {
		if k != nil {
			r.errorf(k, join(field, k.Value), "%s has no limit to enforce: %s (add a rate_limit with a unit, or remove %s)", k.Value, why, k.Value)
		}
	}
}

// mode reads a descriptor's enforcement mode.
func (r *reader) mode(n *yaml.Node, field string) (Mode, bool) {
	s, ok := r.str(n, field, "mode")
	if !ok {
		return Strict, false
	}
	for _, m := range []Mode{Strict, CachedDeny, Leased, Federated} {
		if strings.EqualFold(s, string(m)) {
			return m, true
		}
	}
	r.errorf(n, field, "%s", enumErr("mode", s, []string{"strict", "cached_deny", "leased", "federated"}))
	return Strict, false
}

// storeErrorPolicy reads on_store_error.
func (r *reader) storeErrorPolicy(n *yaml.Node, field string) (StoreErrorPolicy, bool) {
	s, ok := r.str(n, field, "on_store_error")
	if !ok {
		return OnErrorError, false
	}
	for _, p := range []StoreErrorPolicy{OnErrorError, OnErrorAllow, OnErrorDeny} {
		if strings.EqualFold(s, string(p)) {
			return p, true
		}
	}
	r.errorf(n, field, "%s", enumErr("on_store_error", s, []string{"error", "allow", "deny"}))
	return OnErrorError, false
}

// fairness reads a descriptor's fairness block: which request entry names the
// tenant, the tenants' weights, and how many tenants each counter tracks by
// name.
func (r *reader) fairness(n *yaml.Node, field string) *Fairness {
	if n.Kind != yaml.MappingNode {
		r.errorf(n, field, "fairness must be a mapping (tenant_key: ..., weights: {...}, default_weight: 1, max_tenants: %d), not %s", DefaultFairTenants, describe(n))
		return nil
	}
	fz := &Fairness{DefaultWeight: 1, Weights: map[string]float64{}, MaxTenants: DefaultFairTenants, Pos: r.pos(n)}
	weight := func(v *yaml.Node, f string) (float64, bool) {
		w, err := strconv.ParseFloat(v.Value, 64)
		if v.Kind != yaml.ScalarNode || err != nil || w <= 0 || math.IsInf(w, 0) {
			r.errorf(v, f, "a weight must be a positive number, not %s", describe(v))
			return 0, false
		}
		return w, true
	}
	for _, p := range r.pairs(n, field, 0) {
		f := join(field, p.name)
		switch p.name {
		case "tenant_key":
			fz.TenantKey, _ = r.str(p.val, f, p.name)
		case "default_weight":
			if w, ok := weight(p.val, f); ok {
				fz.DefaultWeight = w
			}
		case "max_tenants":
			if isNull(p.val) {
				continue // null leaves the default
			}
			var v int64
			if p.val.Kind != yaml.ScalarNode || p.val.ShortTag() != "!!int" || p.val.Decode(&v) != nil || v < 1 || v > MaxFairTenants {
				r.errorf(p.val, f, "max_tenants must be a whole number from 1 to %d (the tenants each counter tracks by name; those past it share one overflow account), not %s", MaxFairTenants, describe(p.val))
				continue
			}
			fz.MaxTenants = int(v)
		case "weights":
			if p.val.Kind != yaml.MappingNode {
				r.errorf(p.val, f, "weights must be a mapping of tenant: weight, not %s", describe(p.val))
				continue
			}
			for _, q := range r.pairs(p.val, f, 0) {
				if w, ok := weight(q.val, join(f, q.name)); ok {
					fz.Weights[q.name] = w
				}
			}
		default:
			r.unknownKey(p.key, field, fairLevel)
		}
	}
	if fz.TenantKey == "" {
		r.errorf(n, join(field, "tenant_key"), "fairness needs tenant_key: the descriptor entry whose value names the tenant (e.g. tenant_key: tenant)")
	}
	return fz
}
