package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/throttlekit/throttlekit/pkg/engine"
)

// probeCounters are the sidecar's counters that say what an RLS answer
// cannot: requests for a domain no policy defines, and shadow rules over
// their limit (admitted all the same), read from its /metrics.
type probeCounters struct {
	unknown map[string]float64 // throttlekit_unknown_domain_total by domain
	shadow  map[string]float64 // throttlekit_decisions_total{code="shadow"} of the probed domain, by rule
	// cost is throttlekit_cost_{reserved,refunded,extra,overrun}_units_total
	// by what ("reserved", ...) and "domain/rule": what a request through
	// the gates reserved, and how it settled.
	cost map[string]map[string]float64
}

// costCounters are the cost metrics probe --extproc reads, by what each
// counts.
var costCounters = map[string]string{
	"throttlekit_cost_reserved_units_total": "reserved",
	"throttlekit_cost_refunded_units_total": "refunded",
	"throttlekit_cost_extra_units_total":    "extra",
	"throttlekit_cost_overrun_units_total":  "overrun",
}

// readCounters reads url (the sidecar's /metrics) for domain's counters.
func readCounters(ctx context.Context, url string, tlsConf *tls.Config, timeout time.Duration, domain string) (*probeCounters, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConf}}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return parseCounters(resp.Body, domain)
}

// parseCounters reads Prometheus's text format for the counters of
// probeCounters.
func parseCounters(r io.Reader, domain string) (*probeCounters, error) {
	c := &probeCounters{unknown: map[string]float64{}, shadow: map[string]float64{}, cost: map[string]map[string]float64{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, rest, ok := strings.Cut(line, "{")
		if !ok || (name != "throttlekit_unknown_domain_total" && name != "throttlekit_decisions_total" && costCounters[name] == "") {
			continue
		}
		labels, value, ok := parseLabels(rest)
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			continue
		}
		switch {
		case costCounters[name] != "":
			what := costCounters[name]
			if c.cost[what] == nil {
				c.cost[what] = map[string]float64{}
			}
			c.cost[what][labels["domain"]+"/"+labels["rule"]] = v
		case name == "throttlekit_unknown_domain_total":
			c.unknown[labels["domain"]] = v
		case labels["domain"] == domain && labels["code"] == "shadow":
			c.shadow[labels["rule"]] = v
		}
	}
	return c, sc.Err()
}

// parseLabels reads `a="x",b="y"} value` into its labels and the rest.
func parseLabels(s string) (map[string]string, string, bool) {
	labels := map[string]string{}
	for {
		s = strings.TrimLeft(s, ", ")
		if strings.HasPrefix(s, "}") {
			return labels, s[1:], true
		}
		name, rest, ok := strings.Cut(s, `="`)
		if !ok {
			return nil, "", false
		}
		var b strings.Builder
		i := 0
		for ; i < len(rest) && rest[i] != '"'; i++ {
			if rest[i] == '\\' && i+1 < len(rest) {
				i++
				switch rest[i] {
				case 'n':
					b.WriteByte('\n')
				default:
					b.WriteByte(rest[i])
				}
				continue
			}
			b.WriteByte(rest[i])
		}
		if i == len(rest) {
			return nil, "", false
		}
		labels[name] = b.String()
		s = rest[i+1:]
	}
}

// probeNotes says what the counters read before (was) and after (now) the
// probe's request show that the answer does not: its domain is unknown,
// or a shadow rule of it went over its limit. Other traffic to the sidecar
// at the same moment can show here too: the notes say "during the probe".
func probeNotes(domain string, was, now *probeCounters) []string {
	var notes []string
	d := domain
	if _, ok := now.unknown[d]; !ok {
		d = engine.OtherValue // past the counter's distinct domains
	}
	if now.unknown[d] > was.unknown[d] {
		notes = append(notes, fmt.Sprintf("domain %q is unknown to throttlekit: no policy file defines it, so every request of it is answered OK and nothing is limited; check Envoy's rate limit domain and the policy files' domain:", domain))
	}
	for _, rule := range slices.Sorted(maps.Keys(now.shadow)) {
		if now.shadow[rule] > was.shadow[rule] {
			notes = append(notes, fmt.Sprintf("shadow rule %s of domain %s went over its limit during the probe: shadow_mode counts it and answers OK, without enforcing", rule, domain))
		}
	}
	return notes
}

// costNote says what a request through the gates reserved of its cost
// limits, and how it settled, from the counters read before (was) and
// after (now) it; "" when it reserved nothing. Other traffic at the same
// moment shows here too.
func costNote(was, now *probeCounters) string {
	delta := func(what, key string) float64 { return now.cost[what][key] - was.cost[what][key] }
	var parts []string
	for _, key := range slices.Sorted(maps.Keys(now.cost["reserved"])) {
		r := delta("reserved", key)
		if r <= 0 {
			continue
		}
		domain, rule, _ := strings.Cut(key, "/")
		p := fmt.Sprintf("reserved %.0f of rule %s (domain %s)", r, rule, domain)
		switch back, extra, over := delta("refunded", key), delta("extra", key), delta("overrun", key); {
		case back > 0:
			p += fmt.Sprintf(", settled at %.0f: %.0f given back", r-back, back)
		case extra > 0 || over > 0:
			p += fmt.Sprintf(", settled at %.0f: %.0f more counted", r+extra+over, extra+over)
		default:
			p += ", settled at its reservation (the cost was that, or not read: a reset stream, or no cost where the policy reads it)"
		}
		parts = append(parts, p)
	}
	if len(parts) == 0 {
		return ""
	}
	return "cost: " + strings.Join(parts, "; ")
}
