package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/throttlekit/throttlekit/internal/certtest"
	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/internal/xdstest"
)

// envoyGatewayEnv is the environment Envoy Gateway gives the container of
// its rate-limit Deployment, with the default settings, a Redis backend,
// Prometheus on (its default) and no tracing: read from
// github.com/envoyproxy/gateway, expectedRateLimitContainerEnv in
// internal/infrastructure/kubernetes/ratelimit/resource.go (commit
// 0f0e417dfc346b5ec562be552456981d02d20940) as rendered in
// internal/infrastructure/kubernetes/ratelimit/testdata/deployments/default-env.yaml
// (commit 138ecda0bed3e01dd6d52be263b8605f5121bae4). Its values are
// Envoy Gateway's but for what points into the cluster: the files of the
// envoy-rate-limit secret (mounted at /certs) are in certs, the xDS server
// (envoy-gateway:18001) is xdsAddr, the Redis (redis.redis.svc:6379) is
// redisAddr, and PROMETHEUS_ADDR's port (:19001) is promPort.
func envoyGatewayEnv(certs *certtest.SecretDir, xdsAddr, redisAddr, promPort string) map[string]string {
	return map[string]string{
		"RUNTIME_ROOT":                       "/data",
		"RUNTIME_SUBDIRECTORY":               "ratelimit",
		"RUNTIME_IGNOREDOTFILES":             "true",
		"RUNTIME_WATCH_ROOT":                 "false",
		"LOG_LEVEL":                          "info",
		"USE_STATSD":                         "false",
		"CONFIG_TYPE":                        "GRPC_XDS_SOTW",
		"CONFIG_GRPC_XDS_SERVER_URL":         xdsAddr,
		"CONFIG_GRPC_XDS_NODE_ID":            "envoy-ratelimit",
		"GRPC_SERVER_USE_TLS":                "true",
		"GRPC_SERVER_TLS_CERT":               certs.Path("tls.crt"),
		"GRPC_SERVER_TLS_KEY":                certs.Path("tls.key"),
		"GRPC_SERVER_TLS_CA_CERT":            certs.Path("ca.crt"),
		"CONFIG_GRPC_XDS_SERVER_USE_TLS":     "true",
		"CONFIG_GRPC_XDS_CLIENT_TLS_CERT":    certs.Path("tls.crt"),
		"CONFIG_GRPC_XDS_CLIENT_TLS_KEY":     certs.Path("tls.key"),
		"CONFIG_GRPC_XDS_SERVER_TLS_CACERT":  certs.Path("ca.crt"),
		"FORCE_START_WITHOUT_INITIAL_CONFIG": "true",
		"REDIS_SOCKET_TYPE":                  "tcp",
		"REDIS_URL":                          redisAddr,
		"USE_PROMETHEUS":                     "true",
		"PROMETHEUS_ADDR":                    ":" + promPort,
		"PROMETHEUS_MAPPER_YAML":             "/etc/statsd-exporter/conf.yaml",
	}
}

// envoyGatewayTakes is what serve must make of each of Envoy Gateway's
// variables: take it, or ignore it saying why (the rest are upstream's
// settings throttlekit has no use for, GRPC_SERVER_TLS_CA_CERT is read by
// neither upstream nor throttlekit).
var envoyGatewayTakes = map[string]bool{
	"RUNTIME_ROOT": false, "RUNTIME_SUBDIRECTORY": false, "RUNTIME_IGNOREDOTFILES": false, "RUNTIME_WATCH_ROOT": false,
	"LOG_LEVEL": true, "USE_STATSD": false, "CONFIG_TYPE": true, "CONFIG_GRPC_XDS_SERVER_URL": true, "CONFIG_GRPC_XDS_NODE_ID": true,
	"GRPC_SERVER_USE_TLS": true, "GRPC_SERVER_TLS_CERT": true, "GRPC_SERVER_TLS_KEY": true, "GRPC_SERVER_TLS_CA_CERT": false,
	"CONFIG_GRPC_XDS_SERVER_USE_TLS": true, "CONFIG_GRPC_XDS_CLIENT_TLS_CERT": true, "CONFIG_GRPC_XDS_CLIENT_TLS_KEY": true,
	"CONFIG_GRPC_XDS_SERVER_TLS_CACERT": true, "FORCE_START_WITHOUT_INITIAL_CONFIG": true, "REDIS_SOCKET_TYPE": true, "REDIS_URL": true,
	"USE_PROMETHEUS": true, "PROMETHEUS_ADDR": true, "PROMETHEUS_MAPPER_YAML": false,
}

// egPolicy is what Envoy Gateway might render for a listener's
// BackendTrafficPolicies, as a policy file; xdstest.Split makes the
// RateLimitConfig it pushes. Every limit counts per day, so no window
// ends between the two servers' answers to one request.
const egPolicy = `domain: default/eg/http
descriptors:
  - key: httproute/default/api/rule/0/match/0/api
    value: httproute/default/api/rule/0/match/0/api
    descriptors:
      - key: rule-0-match-0
        rate_limit: {unit: day, requests_per_unit: 3}
  - key: httproute/default/api/rule/1/match/0/api
    value: httproute/default/api/rule/1/match/0/api
    descriptors:
      - key: x-user-id
        value: one
        rate_limit: {name: one, unit: day, requests_per_unit: 2}
      - key: x-user-id
        value: admin
        rate_limit: {unlimited: true}
      - key: x-user-id
        value: banned
        rate_limit: {unit: day, requests_per_unit: 0}
      - key: x-user-id
        rate_limit: {name: user-default, unit: day, requests_per_unit: 4}
  - key: tier
    value: gold
    rate_limit: {name: gold, unit: day, requests_per_unit: 6, replaces: [{name: user-default}]}
  - key: httproute/default/api/rule/2/match/0/api
    value: httproute/default/api/rule/2/match/0/api
    shadow_mode: true
    rate_limit: {unit: day, requests_per_unit: 1}
`

const (
	egDomain = "default/eg/http"
	egRule0  = "httproute/default/api/rule/0/match/0/api"
	egRule1  = "httproute/default/api/rule/1/match/0/api"
	egRule2  = "httproute/default/api/rule/2/match/0/api"
)

// rlsRequest is a request of domain with one descriptor per list of
// key, value pairs.
func rlsRequest(domain string, descriptors ...[]string) *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: domain}
	for _, kv := range descriptors {
		d := &ratelimitv3.RateLimitDescriptor{}
		for i := 0; i+1 < len(kv); i += 2 {
			d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
		}
		req.Descriptors = append(req.Descriptors, d)
	}
	return req
}

// egLeaf is a certificate as Envoy Gateway's certgen makes them: no
// extended key usage (so a server's and a client's at once), named dns
// and, for the test, 127.0.0.1, where its servers listen.
func egLeaf(t *testing.T, ca *certtest.CA, cn string, dns ...string) certtest.Leaf {
	return ca.Sign(t, &x509.Certificate{Subject: pkix.Name{CommonName: cn}, DNSNames: dns, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment})
}

// egRateLimit is one serve run as Envoy Gateway's rate-limit container,
// and a RateLimitService client dialling it as Envoy Gateway's Envoy does.
type egRateLimit struct {
	*sidecar
	metrics *sidecar // the PROMETHEUS_ADDR listener, to scrape
	rls     rlsv3.RateLimitServiceClient
}

// startEnvoyGatewayRateLimit runs /bin/ratelimit under e, adding GRPC_PORT
// and PORT on free ports: Envoy Gateway leaves them at upstream's 8081 and
// 8080, which a test cannot count on owning. It adds
// THROTTLEKIT_STORE_TIMEOUT too: the test judges answers, not store
// latency, and serve's 50ms default, which no upstream variable sets, is
// missed on a loaded machine (UNAVAILABLE, "store failed: context deadline
// exceeded").
func startEnvoyGatewayRateLimit(t *testing.T, e map[string]string, ca *certtest.CA, envoy tls.Certificate) *egRateLimit {
	t.Helper()
	grpcPort, httpPort := loopbackPort(t), loopbackPort(t)
	e["GRPC_PORT"], e["PORT"] = grpcPort, httpPort
	e["THROTTLEKIT_STORE_TIMEOUT"] = testenv.StoreDeadline.String()
	s := runAs(t, []string{"/bin/ratelimit"}, e)
	// Upstream's HOST and GRPC_HOST: all interfaces; dial loopback.
	s.grpcAddr, s.httpAddr = "127.0.0.1:"+grpcPort, "127.0.0.1:"+httpPort
	_, promPort, _ := net.SplitHostPort(e["PROMETHEUS_ADDR"])
	rls := dialRLSOverTLS(t, s.grpcAddr, &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{envoy},
		ServerName: "envoy-ratelimit.envoy-gateway-system.svc.cluster.local"})
	return &egRateLimit{sidecar: s, metrics: &sidecar{httpAddr: "127.0.0.1:" + promPort}, rls: rls}
}

func (r *egRateLimit) ask(t *testing.T, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := r.rls.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatalf("ShouldRateLimit %v: %v", req.GetDescriptors(), err)
	}
	return resp
}

// codes are the overall codes of n requests req.
func (r *egRateLimit) codes(t *testing.T, req *rlsv3.RateLimitRequest, n int) string {
	t.Helper()
	var out []string
	for range n {
		out = append(out, r.ask(t, req).GetOverallCode().String())
	}
	return strings.Join(out, " ")
}

// TestEnvoyGatewayDeployment runs serve with nothing but the environment
// Envoy Gateway gives its rate-limit Deployment (envoyGatewayEnv), against
// a real go-control-plane xDS server standing in for Envoy Gateway over
// mutual TLS and a real Redis. It must be ready before the first push
// (FORCE_START_WITHOUT_INITIAL_CONFIG), answer the pushed RateLimitConfig
// over TLS as Envoy Gateway's Envoy asks, follow an update, keep the last
// good policy when a push is NACKed, serve /metrics at PROMETHEUS_ADDR,
// and answer exactly as a serve given the same policy as a file does.
//
// Deviations from Envoy Gateway's set: GRPC_PORT and PORT are added on
// free ports (startEnvoyGatewayRateLimit); paths and addresses point at
// the test's files and servers (envoyGatewayEnv). The file twin sets
// CONFIG_TYPE=FILE and its own RUNTIME_ROOT.
func TestEnvoyGatewayDeployment(t *testing.T) {
	ca := certtest.NewCA(t, "envoy-gateway")
	kubeNames := func(svc string) []string {
		ns := svc + ".envoy-gateway-system"
		return []string{svc, ns, ns + ".svc", ns + ".svc.cluster.local"}
	}
	rl := egLeaf(t, ca, "envoy-ratelimit", kubeNames("envoy-ratelimit")...)
	certs := certtest.NewSecretDir(t, map[string][]byte{"tls.crt": rl.CertPEM, "tls.key": rl.KeyPEM, "ca.crt": ca.PEM})
	envoy := egLeaf(t, ca, "*", "*.envoy-gateway-system").Pair(t)
	cp := xdstest.Start(t, xdstest.Options{TLS: &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool(),
		Certificates: []tls.Certificate{egLeaf(t, ca, "envoy-gateway", kubeNames("envoy-gateway")...).Pair(t)}}})
	redisXDS, redisFile := testenv.StartRedis(t), testenv.StartRedis(t)

	rs := startEnvoyGatewayRateLimit(t, envoyGatewayEnv(certs, cp.Addr, redisXDS.Addr, loopbackPort(t)), ca, envoy)

	// Ready before any push, answering as with no rule.
	if code, body := rs.get(t, "/healthcheck"); code != http.StatusOK || body != "OK" {
		t.Fatalf("before the first push /healthcheck = %d %q, want 200 OK (FORCE_START_WITHOUT_INITIAL_CONFIG)", code, body)
	}
	rs.waitReady(t, http.StatusOK)
	if got := rs.codes(t, rlsRequest(egDomain, []string{egRule0, egRule0, "rule-0-match-0", "10.0.0.9"}), 4); got != "OK OK OK OK" {
		t.Fatalf("before the first push: %s, want OK (no rule yet)", got)
	}

	// Over TLS only. Envoy's own certificate is not asked for: Envoy
	// Gateway names its CA GRPC_SERVER_TLS_CA_CERT, which upstream does not
	// read either (it reads GRPC_CLIENT_TLS_CACERT).
	plain, err := grpc.NewClient(rs.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	if _, err := rlsv3.NewRateLimitServiceClient(plain).ShouldRateLimit(ctx, rlsRequest(egDomain)); err == nil {
		t.Error("a plaintext client was answered: GRPC_SERVER_USE_TLS not honoured")
	}
	cancel()
	plain.Close()

	// The first push, over mutual TLS, for node CONFIG_GRPC_XDS_NODE_ID.
	v1, overlay, err := xdstest.Split("default-eg-http.yaml", []byte(egPolicy))
	if err != nil || overlay != nil {
		t.Fatalf("egPolicy does not fit a RateLimitConfig (overlay %q): %v", overlay, err)
	}
	v1.Name = egDomain // Envoy Gateway names the resource after the listener
	cp.Push("envoy-ratelimit", "v1", v1)
	if !testenv.Eventually(func() bool { return cp.Acked("v1") }) {
		t.Fatal("v1 not ACKed")
	}

	// The same policy as a file, in the RUNTIME_ROOT layout, with its own
	// Redis.
	fileEnv := envoyGatewayEnv(certs, cp.Addr, redisFile.Addr, loopbackPort(t))
	fileEnv["CONFIG_TYPE"], fileEnv["RUNTIME_ROOT"] = "FILE", runtimeRoot(t, "default-eg-http.yaml", egPolicy)
	rf := startEnvoyGatewayRateLimit(t, fileEnv, ca, envoy)
	rf.waitReady(t, http.StatusOK)

	// Each request to both, one after the other: the same answers, every
	// one, and the answers the policy means.
	for _, step := range []struct {
		name string
		req  *rlsv3.RateLimitRequest
		want string
	}{
		{"per address", rlsRequest(egDomain, []string{egRule0, egRule0, "rule-0-match-0", "10.0.0.1"}), "OK OK OK OVER_LIMIT"},
		{"another address", rlsRequest(egDomain, []string{egRule0, egRule0, "rule-0-match-0", "10.0.0.2"}), "OK"},
		{"named limit", rlsRequest(egDomain, []string{egRule1, egRule1, "x-user-id", "one"}), "OK OK OVER_LIMIT"},
		{"unlimited", rlsRequest(egDomain, []string{egRule1, egRule1, "x-user-id", "admin"}), "OK OK OK"},
		{"blocked", rlsRequest(egDomain, []string{egRule1, egRule1, "x-user-id", "banned"}), "OVER_LIMIT"},
		{"key-only default", rlsRequest(egDomain, []string{egRule1, egRule1, "x-user-id", "bob"}), "OK OK OK OK OVER_LIMIT"},
		{"replaced by gold", rlsRequest(egDomain, []string{egRule1, egRule1, "x-user-id", "carol"}, []string{"tier", "gold"}), "OK OK OK OK OK OK OVER_LIMIT"},
		{"shadow mode", rlsRequest(egDomain, []string{egRule2, egRule2}), "OK OK OK"},
		{"one of two descriptors over", rlsRequest(egDomain, []string{egRule0, egRule0, "rule-0-match-0", "10.0.0.1"}, []string{egRule1, egRule1, "x-user-id", "dave"}), "OVER_LIMIT"},
		{"no rule", rlsRequest(egDomain, []string{"route", "unknown"}), "OK"},
		{"unknown domain", rlsRequest("default/eg/https", []string{egRule0, egRule0}), "OK"},
	} {
		var got []string
		for range strings.Count(step.want, " ") + 1 {
			a, b := rs.ask(t, step.req), rf.ask(t, step.req)
			if !sameAnswer(a, b) {
				t.Fatalf("%s: over xDS\n%s\nfrom the file\n%s", step.name, prototext.Format(a), prototext.Format(b))
			}
			got = append(got, a.GetOverallCode().String())
		}
		if strings.Join(got, " ") != step.want {
			t.Errorf("%s: %s, want %s", step.name, strings.Join(got, " "), step.want)
		}
	}

	// An update: rule 0 down to 1 a day.
	v2 := proto.Clone(v1).(*rlsconfv3.RateLimitConfig)
	v2.Descriptors[0].Descriptors[0].RateLimit.RequestsPerUnit = 1
	cp.Push("envoy-ratelimit", "v2", v2)
	if !testenv.Eventually(func() bool { return cp.Acked("v2") }) {
		t.Fatal("v2 not ACKed")
	}
	if got := rs.codes(t, rlsRequest(egDomain, []string{egRule0, egRule0, "rule-0-match-0", "10.0.0.3"}), 2); got != "OK OVER_LIMIT" {
		t.Fatalf("after v2: %s, want OK OVER_LIMIT (1 a day)", got)
	}

	// A bad push: NACKed with what is wrong; v2 stays (v3 would admit
	// 100 a day on rule 0, were any of it applied).
	v3 := proto.Clone(v2).(*rlsconfv3.RateLimitConfig)
	v3.Descriptors[0].Descriptors[0].RateLimit.RequestsPerUnit = 100
	v3.Descriptors[1].Descriptors[0].RateLimit.Unit = rlsconfv3.RateLimitUnit_UNKNOWN
	cp.Push("envoy-ratelimit", "v3", v3)
	if !testenv.Eventually(func() bool { return len(cp.Nacks()) > 0 }) {
		t.Fatal("the bad push was not NACKed")
	}
	for _, nack := range cp.Nacks() { // the control plane may resend it: each is rejected
		if !strings.Contains(nack, `RateLimitConfig "`+egDomain+`"`) || !strings.Contains(nack, "rate_limit.unit") {
			t.Errorf("NACK %q does not name the resource and the field", nack)
		}
	}
	if cp.Acked("v3") {
		t.Error("v3 was ACKed")
	}
	if got := rs.codes(t, rlsRequest(egDomain, []string{egRule0, egRule0, "rule-0-match-0", "10.0.0.4"}), 2); got != "OK OVER_LIMIT" {
		t.Errorf("after the bad push: %s, want v2's OK OVER_LIMIT", got)
	}
	if code, _ := rs.get(t, "/healthcheck"); code != http.StatusOK {
		t.Errorf("a bad push made /healthcheck %d", code)
	}

	// /metrics at PROMETHEUS_ADDR, where Envoy Gateway's pods are scraped.
	if !testenv.Eventually(func() bool {
		return rs.metrics.counter(t, "throttlekit_policy_reloads_total", "result", "failure") >= 1
	}) {
		t.Error("PROMETHEUS_ADDR's /metrics does not count the NACK as a failed reload")
	}

	// The start log accounts for every variable of Envoy Gateway's set,
	// and shows no key.
	var took, ignored string
	for _, line := range strings.Split(rs.stderr.String(), "\n") {
		if textField(line, "msg") == "envoyproxy/ratelimit environment" {
			took, ignored = ", "+textField(line, "took")+", ", "; "+textField(line, "ignored")
		}
	}
	for name, taken := range envoyGatewayTakes {
		switch {
		case taken && !strings.Contains(took, ", "+name+", "):
			t.Errorf("%s not taken (took %s)", name, took)
		case !taken && !strings.Contains(ignored, "; "+name+" ("):
			t.Errorf("%s not ignored with a reason (ignored %s)", name, ignored)
		}
	}
	if strings.Contains(rs.stderr.String(), "PRIVATE KEY") {
		t.Error("a private key was logged")
	}
}

// sameAnswer reports whether a and b, the answers of two servers to one
// request a moment apart, agree: everything equal but the time to each
// window's end, which may differ by the moment.
func sameAnswer(a, b *rlsv3.RateLimitResponse) bool {
	a, b = proto.Clone(a).(*rlsv3.RateLimitResponse), proto.Clone(b).(*rlsv3.RateLimitResponse)
	if len(a.Statuses) != len(b.Statuses) {
		return false
	}
	for i, sa := range a.Statuses {
		sb := b.Statuses[i]
		if (sa.DurationUntilReset == nil) != (sb.DurationUntilReset == nil) {
			return false
		}
		if d := sa.GetDurationUntilReset().AsDuration() - sb.GetDurationUntilReset().AsDuration(); d > time.Second || d < -time.Second {
			return false
		}
		sa.DurationUntilReset, sb.DurationUntilReset = nil, nil
	}
	return proto.Equal(a, b)
}
