package policy_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/throttlekit/throttlekit/pkg/policy"
)

const costPolicy = `
domain: llm
descriptors:
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 100000}
costs:
  - name: chat
    match: {path_prefix: /v1/chat}
    descriptor: [{key: tenant, header: X-Tenant}, {key: route, value: chat}]
    reserve: {header: X-Max-Tokens, max: 4000}
    cost: {response_header: X-Usage-Total-Tokens}
  - name: batch
    match: {authority: "batch.*"}
    descriptor: [{key: tenant, header: x-tenant}]
    reserve: 4000
    cost: {metadata: {namespace: io.envoy.ai_gateway, key: llm_total_token}}
  - name: grpc
    match: {header: {name: content-type, value: application/grpc}}
    descriptor: [{key: tenant, header: x-tenant}]
    reserve: {units: 100}
    cost: {response_trailer: x-tokens}
`

// TestCostSection: the costs section is read whole (names lower-cased
// where they are header names, the file's domain filled in), in both
// reserve forms and with each cost source, and Format writes it back.
func TestCostSection(t *testing.T) {
	d, err := policy.Parse("llm.yaml", []byte(costPolicy))
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Costs) != 3 {
		t.Fatalf("%d cost limits", len(d.Costs))
	}
	chat, batch, grpc := d.Costs[0], d.Costs[1], d.Costs[2]
	want := []policy.CostEntry{{Key: "tenant", Header: "x-tenant"}, {Key: "route", Value: "chat"}}
	if chat.Name != "chat" || chat.Domain != "llm" || chat.Match.PathPrefix != "/v1/chat" || !reflect.DeepEqual(chat.Descriptor, want) ||
		chat.Reserve != (policy.CostReserve{Header: "x-max-tokens", Max: 4000}) || chat.Reserve.Cap() != 4000 ||
		chat.Source != (policy.CostSource{Kind: policy.CostResponseHeader, Name: "x-usage-total-tokens"}) ||
		chat.Pos.Line != 7 || chat.Field != "costs[0]" {
		t.Fatalf("chat %+v", chat)
	}
	if batch.Reserve != (policy.CostReserve{Units: 4000}) || batch.Reserve.Cap() != 4000 ||
		batch.Source != (policy.CostSource{Kind: policy.CostMetadata, Namespace: "io.envoy.ai_gateway", Key: "llm_total_token"}) {
		t.Fatalf("batch %+v", batch)
	}
	if grpc.Reserve != (policy.CostReserve{Units: 100}) || grpc.Source != (policy.CostSource{Kind: policy.CostResponseTrailer, Name: "x-tokens"}) ||
		grpc.Match.Header.Name != "content-type" {
		t.Fatalf("grpc %+v", grpc)
	}
	out := roundTrip(t, d)
	if !strings.Contains(string(out), "reserve: 4000") {
		t.Errorf("a fixed reservation is written as a number:\n%s", out)
	}
}

// TestCostRejections: every mistake in a cost limit is an error at its
// line and field that says what to write.
func TestCostRejections(t *testing.T) {
	const head = "domain: llm\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: hour, requests_per_unit: 10}\ncosts:\n"
	const ok = "    match: {path_prefix: /}\n    descriptor: [{key: tenant, header: x-tenant}]\n    reserve: 10\n    cost: {response_header: x-cost}\n"
	for _, tc := range []struct{ src, want string }{
		{head + "  - " + ok[4:], "llm.yaml:6: costs[0].name: a cost limit needs a name"},
		{head + "  - name: c\n    descriptor: [{key: tenant, header: x}]\n    reserve: 1\n    cost: {response_header: x}\n", `costs[0].match: cost limit "c" has no match`},
		{head + "  - name: c\n    match: {}\n" + strings.TrimPrefix(ok, "    match: {path_prefix: /}\n"), "costs[0].match: match is empty: give path_prefix, authority or header (a cost limit for every request"},
		{head + "  - name: c\n    match: {path_prefix: /}\n    reserve: 1\n    cost: {response_header: x}\n", `cost limit "c" has no descriptor`},
		{head + "  - name: c\n    match: {path_prefix: /}\n    descriptor: []\n    reserve: 1\n    cost: {response_header: x}\n", "costs[0].descriptor: descriptor is empty"},
		{head + "  - name: c\n    match: {path_prefix: /}\n    descriptor: [{key: tenant}]\n    reserve: 1\n    cost: {response_header: x}\n", `entry "tenant" needs exactly one of value`},
		{head + "  - name: c\n    match: {path_prefix: /}\n    descriptor: [{key: t, value: a, header: b}]\n    reserve: 1\n    cost: {response_header: x}\n", "exactly one of value"},
		{head + "  - name: c\n    match: {path_prefix: /}\n    descriptor: [{header: b}]\n    reserve: 1\n    cost: {response_header: x}\n", "costs[0].descriptor[0].key: a descriptor entry needs a key"},
		{head + "  - name: c\n    match: {path_prefix: /}\n    descriptor: [{key: t, headr: b}]\n    reserve: 1\n    cost: {response_header: x}\n", `unknown key "headr" (did you mean header?)`},
		{head + "  - name: c\n    match: {path_prefix: /}\n    descriptor: [{key: t, header: b}]\n    cost: {response_header: x}\n", `cost limit "c" has no reserve`},
		{head + "  - name: c\n    match: {path_prefix: /}\n    descriptor: [{key: t, header: b}]\n    reserve: 0\n    cost: {response_header: x}\n", "costs[0].reserve: reserve must be at least 1"},
		{head + "  - name: c\n    match: {path_prefix: /}\n    descriptor: [{key: t, header: b}]\n    reserve: -5\n    cost: {response_header: x}\n", "reserve must be a whole number from 0 to 4294967295, not -5"},
		{head + "  - name: c\n    match: {path_prefix: /}\n    descriptor: [{key: t, header: b}]\n    reserve: 99999999999\n    cost: {response_header: x}\n", "reserve must be a whole number from 0 to 4294967295"},
		{head + "  - name: c\n    match: {path_prefix: /}\n    descriptor: [{key: t, header: b}]\n    reserve: {header: x-max}\n    cost: {response_header: x}\n", `costs[0].reserve.max: reserve from header "x-max" needs max`},
		{head + "  - name: c\n    match: {path_prefix: /}\n    descriptor: [{key: t, header: b}]\n    reserve: {max: 5}\n    cost: {response_header: x}\n", "reserve needs units: <n>, or header"},
		{head + "  - name: c\n    match: {path_prefix: /}\n    descriptor: [{key: t, header: b}]\n    reserve: {units: 5, header: h, max: 6}\n    cost: {response_header: x}\n", "not both"},
		{head + "  - name: c\n    match: {path_prefix: /}\n    descriptor: [{key: t, header: b}]\n    reserve: 1\n", `cost limit "c" has no cost`},
		{head + "  - name: c\n    match: {path_prefix: /}\n    descriptor: [{key: t, header: b}]\n    reserve: 1\n    cost: {}\n", "costs[0].cost: cost takes exactly one of response_header, response_trailer or metadata (got 0)"},
		{head + "  - name: c\n    match: {path_prefix: /}\n    descriptor: [{key: t, header: b}]\n    reserve: 1\n    cost: {response_header: a, response_trailer: b}\n", "(got 2)"},
		{head + "  - name: c\n    match: {path_prefix: /}\n    descriptor: [{key: t, header: b}]\n    reserve: 1\n    cost: {metadata: {namespace: io.envoy.ai_gateway}}\n", "metadata needs a namespace and a key"},
		{head + "  - name: c\n    match: {path_prefix: /}\n    descriptor: [{key: t, header: b}]\n    reserve: 1\n    cost: {response_body: x}\n", `unknown key "response_body"`},
		{head + "  - name: c\n    match: {path_prefix: /}\n    descriptor: [{key: t, header: b}]\n    reserve: 1\n    cost: {response_header: \"\"}\n", "response_header is empty"},
		{head + "  - name: c\n    match: {path_prefix: /}\n    limit: 3\n", `unknown key "limit"`},
		{head + "  name: c\n", "costs must be a list of cost limits"},
		{"concurrency:\n  - name: g\n    match: {path_prefix: /}\ncosts:\n  - name: c\n" + ok, "g.yaml:5: costs: costs take their units from the file's domain"},
	} {
		file := "llm.yaml"
		if strings.HasPrefix(tc.src, "concurrency") {
			file = "g.yaml"
		}
		_, err := policy.Parse(file, []byte(tc.src))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q:\nerr = %v\nwant it to contain %q", tc.src, err, tc.want)
		}
	}
}

func TestCostNamesUniqueAcrossFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	one := "costs:\n  - name: tokens\n    match: {path_prefix: /}\n    descriptor: [{key: k, header: h}]\n    reserve: 1\n    cost: {response_header: c}\n"
	write("a.yaml", "domain: a\n"+one)
	write("b.yaml", "domain: b\n"+one)
	_, err := policy.Load(dir)
	if err == nil || !strings.Contains(err.Error(), `b.yaml:3: costs[0].name: cost limit "tokens" is already defined at `) {
		t.Fatalf("err = %v", err)
	}
	write("b.yaml", "domain: b\n"+strings.Replace(one, "tokens", "other", 1))
	set, err := policy.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Domains) != 2 || set.Domains[0].Costs[0].Domain != "a" || set.Domains[1].Costs[0].Domain != "b" {
		t.Fatalf("domains %+v", set.Domains)
	}
}
