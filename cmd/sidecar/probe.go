package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/throttlekit/throttlekit/internal/certs"
	"github.com/throttlekit/throttlekit/pkg/envoyrls"
	"github.com/throttlekit/throttlekit/pkg/gale"
)

// defaultGRPCAddr is serve's default --grpc-addr, where probe asks.
const defaultGRPCAddr = "127.0.0.1:8081"

// entry is one key=value of a descriptor.
type entry struct{ key, value string }

// probeConfig is what `throttlekit probe` is asked to send.
type probeConfig struct {
	addr    string
	timeout time.Duration // for each answer
	// tls, when tlsOn, is how to dial a TLS listener (serve's
	// --grpc-tls-cert; Envoy Gateway's mutual TLS).
	tls   certs.ClientFiles
	tlsOn bool
	// metricsURL is the sidecar's /metrics, read before and after a rate
	// limit request to tell what its answer cannot; "" for none.
	metricsURL string

	// RateLimitService: one request of descriptors.
	domain      string
	descriptors [][]entry
	hits        uint32
	// addend, when set, is every descriptor's own hits_addend: 0 checks
	// without counting (--check-only), N > 0 charges N (--charge).
	addend *uint64

	// rlqs: one bucket's subscription over the Rate Limit Quota Service
	// (probe_rlqs.go): the first --descriptor is the bucket id.
	rlqs bool

	// ext_proc: one HTTP request's headers, a hold, its response headers.
	extproc      bool
	method, path string
	authority    string
	headers      []entry
	hold         time.Duration
	status       int
	// The response's end, where a cost limit reads its real cost: more
	// response headers, trailers (sent after the headers when given), and
	// dynamic metadata (namespace, key, value) on the last message.
	respHeaders, respTrailers []entry
	metadata                  []metaEntry
	// costs: read --metrics-url around the request to say what its cost
	// limits reserved and how it settled (given a cost flag or the URL).
	costs bool
}

// metaEntry is one --metadata namespace:key=value.
type metaEntry struct{ ns, key, value string }

func parseProbe(args []string, stdout io.Writer) (*probeConfig, error) {
	c := &probeConfig{}
	var descs, headers, respHeaders, respTrailers, metadata stringsFlag
	var hits, charge uint64
	var checkOnly bool
	fs := flag.NewFlagSet("probe", flag.ContinueOnError)
	fs.SetOutput(stdout)
	fs.StringVar(&c.addr, "addr", defaultGRPCAddr, "the sidecar's gRPC address (serve's --grpc-addr)")
	fs.DurationVar(&c.timeout, "timeout", 5*time.Second, "how long to wait for each answer")
	fs.StringVar(&c.tls.CAFile, "tls-ca", "", "dial over TLS, trusting this CA (PEM file) for the sidecar's certificate (serve's --grpc-tls-cert); without it the system's roots")
	fs.StringVar(&c.tls.CertFile, "tls-cert", "", "dial over TLS presenting this client certificate chain (PEM file; needs --tls-key), for a listener with --grpc-tls-client-ca (mutual TLS, as Envoy Gateway dials)")
	fs.StringVar(&c.tls.KeyFile, "tls-key", "", "the private key of --tls-cert (PEM file)")
	fs.StringVar(&c.tls.ServerName, "tls-server-name", "", "dial over TLS, checking that the sidecar's certificate names this host (default: the host of --addr)")
	fs.StringVar(&c.metricsURL, "metrics-url", "http://127.0.0.1:8080/metrics", "the sidecar's /metrics (serve's --http-addr or --metrics-addr), read before and after the request: for a rate limit, to tell an unknown domain or a shadow rule over its limit, which the answer cannot; through the gates (given, or with a --response-header, --response-trailer or --metadata), to say what the request's cost limits reserved and how it settled; an https URL uses the --tls-* flags; empty to skip")
	fs.StringVar(&c.domain, "domain", "", "rate limit: the policy domain to ask (e.g. edge)")
	fs.Var(&descs, "descriptor", "rate limit: one descriptor, key=value, or key=value,key2=value2 for nested entries; repeat for more descriptors")
	fs.Uint64Var(&hits, "hits", 1, "rate limit: how many hits the request counts (the request's hits_addend)")
	fs.BoolVar(&checkOnly, "check-only", false, "rate limit: check without counting, as Envoy asks when a request starts under a cost-based limit (each descriptor's hits_addend 0)")
	fs.Uint64Var(&charge, "charge", 0, "rate limit: charge N units, counted even past the limit, as Envoy charges a cost when the response is done (each descriptor's hits_addend N)")
	fs.BoolVar(&c.extproc, "extproc", false, "send one request through the concurrency gates (ext_proc) instead")
	fs.BoolVar(&c.rlqs, "rlqs", false, "subscribe one bucket over the Rate Limit Quota Service instead (serve --rlqs), as Envoy's rate_limit_quota filter does on the bucket's first request, and say what the sidecar assigns it: --domain and one --descriptor, its entries the bucket id")
	fs.StringVar(&c.path, "path", "/", "ext_proc: the request's :path")
	fs.StringVar(&c.method, "method", "GET", "ext_proc: the request's :method")
	fs.StringVar(&c.authority, "authority", "localhost", "ext_proc: the request's :authority (Host)")
	fs.Var(&headers, "header", "ext_proc: a request header, name=value; repeatable")
	fs.DurationVar(&c.hold, "hold", 0, "ext_proc: how long to hold the admitted request (and its gate slot) before its response headers")
	fs.IntVar(&c.status, "status", 200, "ext_proc: the :status of the response headers sent after --hold (5xx counts as an error)")
	fs.Var(&respHeaders, "response-header", "ext_proc: a response header, name=value, where a cost limit may read the real cost (costs: cost: {response_header: ...}); repeatable")
	fs.Var(&respTrailers, "response-trailer", "ext_proc: a response trailer, name=value, sent after the response headers (costs: cost: {response_trailer: ...}); repeatable")
	fs.Var(&metadata, "metadata", "ext_proc: dynamic metadata namespace:key=value on the response's last message, as Envoy forwards it (costs: cost: {metadata: ...}); repeatable")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: throttlekit probe --domain D --descriptor k=v [--descriptor k=v ...] [--hits N | --check-only | --charge N]
       throttlekit probe --extproc --path /p [--hold 2s] [--header k=v ...]
       throttlekit probe --rlqs --domain D --descriptor k=v[,k2=v2]

Asks a running throttlekit one question and says the answer in words:
one ShouldRateLimit request of the descriptors given, one HTTP request's
headers through the concurrency gates (ext_proc, in Envoy's order: request
headers, then after --hold the response headers), or one bucket's
subscription over RLQS (--rlqs: what the sidecar assigns it). Hold a request open in
one terminal and probe again in another to see a gate reject.

A TLS listener (serve's --grpc-tls-cert) takes --tls-ca, and mutual TLS
(--grpc-tls-client-ca, as Envoy Gateway dials) --tls-cert and --tls-key too.
Reading the sidecar's /metrics (--metrics-url) before and after, probe also
says when the domain is unknown or a shadow rule went over its limit: both
are answered OK.

Exits 0 when admitted, 3 on OVER_LIMIT or a gate's rejection, 1 when no
answer came, 2 on a bad command line.

`)
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	switch {
	case fs.NArg() > 0:
		return nil, fmt.Errorf("probe takes no arguments (got %q): descriptors go in --descriptor key=value", fs.Args())
	case c.timeout <= 0:
		return nil, errors.New("--timeout must be positive")
	}
	c.tlsOn = c.tls != certs.ClientFiles{}
	if c.tlsOn {
		if _, err := certs.ClientConfig(c.tls); err != nil {
			return nil, err
		}
	}
	if c.metricsURL != "" && !strings.HasPrefix(c.metricsURL, "http://") && !strings.HasPrefix(c.metricsURL, "https://") {
		return nil, fmt.Errorf("--metrics-url %q: want http://host:port/metrics or https://…, or empty to skip", c.metricsURL)
	}
	if c.rlqs {
		for _, name := range []string{"extproc", "hits", "check-only", "charge", "path", "method", "authority", "header", "hold", "status", "response-header", "response-trailer", "metadata"} {
			if given[name] {
				return nil, fmt.Errorf("--%s does not go with --rlqs: a subscription reports the bucket's first request, as Envoy does", name)
			}
		}
		switch {
		case c.domain == "":
			return nil, errors.New("--rlqs needs --domain: the domain of the rate_limit_quota filter (its policy file's)")
		case len(descs) != 1:
			return nil, errors.New("--rlqs takes one --descriptor, the bucket id: key=value, or key=value,key2=value2")
		}
		es, err := parseDescriptor(descs[0])
		if err != nil {
			return nil, err
		}
		c.descriptors = [][]entry{es}
		return c, nil
	}
	if c.extproc {
		for _, name := range []string{"domain", "descriptor", "hits", "check-only", "charge"} {
			if given[name] {
				return nil, errors.New("--domain and --descriptor go without --extproc: a probe asks the rate limiter or the gates, not both")
			}
		}
		switch {
		case !strings.HasPrefix(c.path, "/"):
			return nil, fmt.Errorf("--path must start with /, e.g. --path /checkout (got %q)", c.path)
		case c.hold < 0:
			return nil, errors.New("--hold must not be negative")
		case c.status < 100 || c.status > 599:
			return nil, fmt.Errorf("--status %d: want an HTTP status, 100 to 599", c.status)
		}
		for _, l := range []struct {
			flag string
			in   stringsFlag
			out  *[]entry
		}{{"header", headers, &c.headers}, {"response-header", respHeaders, &c.respHeaders}, {"response-trailer", respTrailers, &c.respTrailers}} {
			for _, h := range l.in {
				k, v, ok := strings.Cut(h, "=")
				if !ok || k == "" {
					return nil, fmt.Errorf("--%s %q: want name=value", l.flag, h)
				}
				*l.out = append(*l.out, entry{strings.ToLower(k), v})
			}
		}
		for _, m := range metadata {
			nk, v, ok := strings.Cut(m, "=")
			ns, k, ok2 := strings.Cut(nk, ":")
			if !ok || !ok2 || ns == "" || k == "" {
				return nil, fmt.Errorf("--metadata %q: want namespace:key=value (e.g. io.envoy.ai_gateway:llm_total_token=1200)", m)
			}
			c.metadata = append(c.metadata, metaEntry{ns, k, v})
		}
		c.costs = c.metricsURL != "" && (given["metrics-url"] || len(c.respHeaders)+len(c.respTrailers)+len(c.metadata) > 0)
		return c, nil
	}
	for _, name := range []string{"path", "method", "authority", "header", "hold", "status", "response-header", "response-trailer", "metadata"} {
		if given[name] {
			return nil, fmt.Errorf("--%s goes with --extproc (a request through the gates)", name)
		}
	}
	switch {
	case c.domain == "":
		return nil, errors.New("--domain is required: the domain of the policy file to ask, e.g. --domain edge")
	case len(descs) == 0:
		return nil, errors.New("give at least one --descriptor key=value (repeat it for more descriptors; key=value,key2=value2 is one descriptor of two entries)")
	case hits < 1:
		return nil, errors.New("--hits must be at least 1")
	case hits > math.MaxUint32:
		return nil, fmt.Errorf("--hits %d: at most %d", hits, uint32(math.MaxUint32))
	case given["check-only"] && given["charge"], given["hits"] && (given["check-only"] || given["charge"]):
		return nil, errors.New("give one of --hits, --check-only and --charge: --check-only asks without counting, --charge N counts N even past the limit, --hits N counts N only when they fit")
	case given["charge"] && charge < 1:
		return nil, errors.New("--charge must be at least 1 (--check-only checks without counting)")
	case charge > 1<<40:
		return nil, fmt.Errorf("--charge %d: at most %d", charge, uint64(1<<40))
	}
	c.hits = uint32(hits)
	switch {
	case checkOnly:
		c.addend = new(uint64)
	case given["charge"]:
		c.addend = &charge
	}
	for _, d := range descs {
		es, err := parseDescriptor(d)
		if err != nil {
			return nil, err
		}
		c.descriptors = append(c.descriptors, es)
	}
	return c, nil
}

// parseDescriptor reads one --descriptor: key=value entries separated by
// commas, outermost first. A key is never empty; a value may be, and may
// hold "=" (only the first "=" of an entry separates).
func parseDescriptor(s string) ([]entry, error) {
	var es []entry
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--descriptor %q: want key=value (or key=value,key2=value2 for nested entries)", s)
		}
		es = append(es, entry{k, v})
	}
	return es, nil
}

// probeOnce sends what c says and prints the answer; it returns the exit
// code.
func probeOnce(ctx context.Context, c *probeConfig, stdout, stderr io.Writer) int {
	creds := insecure.NewCredentials()
	var tlsConf *tls.Config
	if c.tlsOn {
		var err error
		if tlsConf, err = certs.ClientConfig(c.tls); err != nil {
			fmt.Fprintf(stderr, "throttlekit probe: %v\n", err)
			return exitUsage
		}
		creds = credentials.NewTLS(tlsConf)
	}
	conn, err := grpc.NewClient(c.addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		fmt.Fprintf(stderr, "throttlekit probe: --addr %s: %v\n", c.addr, err)
		return exitUsage
	}
	defer conn.Close()
	if c.extproc {
		return probeGate(ctx, c, tlsConf, extprocv3.NewExternalProcessorClient(conn), stdout, stderr)
	}
	if c.rlqs {
		return probeQuota(ctx, c, rlqspb.NewRateLimitQuotaServiceClient(conn), stdout, stderr)
	}
	return probeLimit(ctx, c, tlsConf, rlsv3.NewRateLimitServiceClient(conn), stdout, stderr)
}

// unreachable says what to do when no verdict came: the sidecar did not
// answer, or answered that it could not decide (its store failed).
func unreachable(c *probeConfig, err error, stderr io.Writer) int {
	msg := status.Convert(err).Message()
	switch code := status.Code(err); {
	case strings.Contains(msg, gale.ErrStore.Error()):
		// The sidecar answered: a store failure under a limit whose
		// store_error policy is error (Envoy's failure_mode_deny decides).
		fmt.Fprintf(stderr, "throttlekit probe: throttlekit at %s answered, but could not decide: its store failed (%s); check the store it uses (--redis-url) and its /readyz\n", c.addr, msg)
	case code == codes.Unavailable && !c.tlsOn && tlsListener(msg):
		fmt.Fprintf(stderr, "throttlekit probe: cannot talk to throttlekit at %s (%s); is its gRPC listener TLS (serve's --grpc-tls-cert)? give --tls-ca, and for mutual TLS --tls-cert and --tls-key\n", c.addr, msg)
	case code == codes.Unavailable && c.tlsOn && tlsHint(msg) != "":
		fmt.Fprintf(stderr, "throttlekit probe: the TLS handshake with throttlekit at %s fails (%s): %s\n", c.addr, msg, tlsHint(msg))
	case code == codes.Unavailable && c.tlsOn && c.tls.CertFile == "" && hungUp(msg):
		// A listener that requires a client certificate may hang up
		// before its alert is read.
		fmt.Fprintf(stderr, "throttlekit probe: throttlekit at %s hung up during TLS (%s): if its listener asks for a client certificate (serve's --grpc-tls-client-ca), give --tls-cert and --tls-key\n", c.addr, msg)
	case code == codes.Unavailable || code == codes.DeadlineExceeded:
		fmt.Fprintf(stderr, "throttlekit probe: cannot reach throttlekit at %s (%s); is `throttlekit serve` running there? --addr sets the address\n", c.addr, msg)
	default:
		fmt.Fprintf(stderr, "throttlekit probe: %v\n", err)
	}
	return exitFailed
}

// tlsHint says which of probe's flags fixes a TLS handshake that failed
// with msg, or "" when msg is no such failure.
func tlsHint(msg string) string {
	switch {
	case strings.Contains(msg, "certificate required"), strings.Contains(msg, "bad certificate"):
		return "the listener asks for a client certificate its CA signed (serve's --grpc-tls-client-ca): give --tls-cert and --tls-key"
	case strings.Contains(msg, "certificate signed by unknown authority"):
		return "the sidecar's certificate is signed by a CA probe does not trust: give that CA (PEM) with --tls-ca"
	case strings.Contains(msg, "certificate is valid for"), strings.Contains(msg, "doesn't contain any IP SANs"):
		return "the sidecar's certificate does not name the host of --addr: give the name it carries with --tls-server-name"
	case strings.Contains(msg, "certificate has expired"), strings.Contains(msg, "not yet valid"):
		return "the sidecar's certificate is out of its validity: renew serve's --grpc-tls-cert"
	}
	return ""
}

// hungUp reports whether msg is a connection the peer closed.
func hungUp(msg string) bool {
	return strings.Contains(msg, "broken pipe") || strings.Contains(msg, "connection reset") || strings.Contains(msg, "EOF")
}

// tlsListener reports whether msg, a plaintext dial's failure, is a TLS
// listener hanging up on it.
func tlsListener(msg string) bool {
	return strings.Contains(msg, "server preface") || strings.Contains(msg, "tls:") || strings.Contains(msg, "EOF")
}

// probeLimit sends one ShouldRateLimit and prints each descriptor's verdict.
func probeLimit(ctx context.Context, c *probeConfig, tlsConf *tls.Config, client rlsv3.RateLimitServiceClient, stdout, stderr io.Writer) int {
	req := &rlsv3.RateLimitRequest{Domain: c.domain, HitsAddend: c.hits}
	if c.addend != nil {
		req.HitsAddend = 0 // unset, as Envoy sends a cost-based limit's
	}
	for _, d := range c.descriptors {
		rd := &ratelimitv3.RateLimitDescriptor{}
		if c.addend != nil {
			rd.HitsAddend = wrapperspb.UInt64(*c.addend)
		}
		for _, e := range d {
			rd.Entries = append(rd.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: e.key, Value: e.value})
		}
		req.Descriptors = append(req.Descriptors, rd)
	}
	var was *probeCounters
	var wasErr error
	if c.metricsURL != "" {
		was, wasErr = readCounters(ctx, c.metricsURL, tlsConf, c.timeout, c.domain)
	}
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	resp, err := client.ShouldRateLimit(cctx, req)
	if err != nil {
		return unreachable(c, err, stderr)
	}
	defer func() {
		if c.metricsURL == "" {
			return
		}
		now, err := readCounters(ctx, c.metricsURL, tlsConf, c.timeout, c.domain)
		if err == nil && wasErr == nil {
			for _, n := range probeNotes(c.domain, was, now) {
				fmt.Fprintln(stdout, "  note: "+n)
			}
			return
		}
		if err == nil {
			err = wasErr
		}
		if ambiguous(resp) {
			fmt.Fprintf(stderr, "throttlekit probe: could not read --metrics-url %s (%v): cannot tell whether the domain is unknown or a shadow rule is over its limit, which the answer does not say\n", c.metricsURL, err)
		}
	}()
	lines := make([]string, len(c.descriptors))
	for i, d := range c.descriptors {
		var st *rlsv3.RateLimitResponse_DescriptorStatus
		if i < len(resp.GetStatuses()) {
			st = resp.GetStatuses()[i]
		}
		lines[i] = describeStatus(d, st)
	}
	if len(lines) == 1 {
		fmt.Fprintln(stdout, lines[0])
	} else {
		fmt.Fprintln(stdout, resp.GetOverallCode())
		for _, l := range lines {
			fmt.Fprintln(stdout, "  "+l)
		}
	}
	for _, h := range resp.GetResponseHeadersToAdd() {
		fmt.Fprintf(stdout, "  header %s: %s\n", h.GetKey(), h.GetValue())
	}
	switch resp.GetOverallCode() {
	case rlsv3.RateLimitResponse_OK:
		return exitOK
	case rlsv3.RateLimitResponse_OVER_LIMIT:
		return exitDenied
	}
	return exitFailed
}

// ambiguous reports whether resp is an answer the sidecar's counters could
// explain: OK with no limit applying (an unknown domain looks so), or OK
// with nothing remaining (a shadow rule over its limit looks so).
func ambiguous(resp *rlsv3.RateLimitResponse) bool {
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		return false
	}
	for _, st := range resp.GetStatuses() {
		if st.GetCurrentLimit() != nil && st.GetLimitRemaining() > 0 {
			continue
		}
		return true
	}
	return len(resp.GetStatuses()) == 0
}

// entriesString is es as --descriptor takes them: k=v,k2=v2.
func entriesString(es []entry) string {
	kvs := make([]string, len(es))
	for i, e := range es {
		kvs[i] = e.key + "=" + e.value
	}
	return strings.Join(kvs, ",")
}

// describeStatus is one descriptor's verdict in words: "OVER_LIMIT:
// descriptor path=/x, limit 5 per minute, remaining 0, resets in 51.8s".
func describeStatus(d []entry, st *rlsv3.RateLimitResponse_DescriptorStatus) string {
	head := "descriptor " + entriesString(d)
	if st == nil {
		return "UNKNOWN: " + head + ", no status in the answer"
	}
	l := st.GetCurrentLimit()
	if l == nil {
		return fmt.Sprintf("%s: %s, no limit applies", st.GetCode(), head)
	}
	unit := strings.ToLower(l.GetUnit().String())
	per := unit
	if m := l.GetUnitMultiplier().GetValue(); m > 1 {
		per = fmt.Sprintf("%d %ss", m, unit)
	}
	name := ""
	if l.GetName() != "" {
		name = l.GetName() + ": "
	}
	return fmt.Sprintf("%s: %s, limit %s%d per %s, remaining %d, resets in %s",
		st.GetCode(), head, name, l.GetRequestsPerUnit(), per, st.GetLimitRemaining(), resetIn(st.GetDurationUntilReset().AsDuration()))
}

// resetIn is 51.8s under a minute, 23h59m59s beyond.
func resetIn(d time.Duration) string {
	if d <= time.Minute {
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
	}
	return prettyDuration(d.Round(time.Second))
}

// probeGate drives one request through the gates in Envoy's order: request
// headers; if admitted, a hold with the slot taken; then response headers,
// which release the slot.
func probeGate(ctx context.Context, c *probeConfig, tlsConf *tls.Config, client extprocv3.ExternalProcessorClient, stdout, stderr io.Writer) int {
	// Ctrl-C ends a hold early: the stream is cancelled, and throttlekit
	// releases the slot as dropped.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := client.Process(sctx)
	if err != nil {
		return unreachable(c, err, stderr)
	}
	// answer waits at most --timeout for the sidecar's next message.
	var timedOut atomic.Bool
	answer := func() (*extprocv3.ProcessingResponse, error) {
		t := time.AfterFunc(c.timeout, func() { timedOut.Store(true); cancel() })
		defer t.Stop()
		resp, err := stream.Recv()
		if err != nil && timedOut.Load() {
			err = status.Errorf(codes.DeadlineExceeded, "no answer within --timeout %s", prettyDuration(c.timeout))
		}
		return resp, err
	}
	// The cost counters before, to say what the request reserved and how
	// it settled (its cost limits, costs:).
	var was *probeCounters
	if c.costs {
		var err error
		if was, err = readCounters(ctx, c.metricsURL, tlsConf, c.timeout, ""); err != nil {
			fmt.Fprintf(stderr, "throttlekit probe: note: could not read %s (%v): what the request's cost limits did is not shown\n", c.metricsURL, err)
			was = nil
		}
	}
	hdrs := []entry{{":method", c.method}, {":authority", c.authority}, {":path", c.path}, {":scheme", "http"}}
	if err := stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: headerMap(append(hdrs, c.headers...)), EndOfStream: true}}}); err != nil {
		return unreachable(c, err, stderr)
	}
	resp, err := answer()
	if err != nil {
		return unreachable(c, err, stderr)
	}
	if ir := resp.GetImmediateResponse(); ir != nil {
		fmt.Fprintln(stdout, describeRejection(ir))
		return exitDenied
	}
	if resp.GetRequestHeaders() == nil {
		fmt.Fprintf(stderr, "throttlekit probe: an unexpected answer to the request headers: %v\n", resp)
		return exitFailed
	}
	what := c.method + " " + c.path
	if c.hold > 0 {
		fmt.Fprintf(stdout, "admitted: %s continues; holding the request open for %s (Ctrl-C lets go early)\n", what, prettyDuration(c.hold))
	} else {
		fmt.Fprintf(stdout, "admitted: %s continues\n", what)
	}
	start := time.Now()
	hold := time.NewTimer(c.hold)
	defer hold.Stop()
	select {
	case <-hold.C:
	case <-ctx.Done():
		fmt.Fprintf(stderr, "throttlekit probe: interrupted after %s: the stream is cancelled and throttlekit releases the slot as dropped\n", prettyDuration(time.Since(start).Round(time.Millisecond)))
		return exitFailed
	}
	// The response's end: its headers, then its trailers when given; the
	// metadata rides on the last message, as Envoy forwards it.
	last := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocv3.HttpHeaders{Headers: headerMap(append([]entry{{":status", strconv.Itoa(c.status)}}, c.respHeaders...)), EndOfStream: len(c.respTrailers) == 0}}}
	msgs := []*extprocv3.ProcessingRequest{last}
	if len(c.respTrailers) > 0 {
		last = &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseTrailers{
			ResponseTrailers: &extprocv3.HttpTrailers{Trailers: headerMap(c.respTrailers)}}}
		msgs = append(msgs, last)
	}
	if len(c.metadata) > 0 {
		last.MetadataContext = metadataContext(c.metadata)
	}
	for _, m := range msgs {
		if err := stream.Send(m); err != nil {
			return unreachable(c, err, stderr)
		}
		if _, err := answer(); err != nil {
			return unreachable(c, err, stderr)
		}
	}
	_ = stream.CloseSend()
	fmt.Fprintf(stdout, "released: sent response headers (:status %d) after %s\n", c.status, prettyDuration(time.Since(start).Round(time.Millisecond)))
	if was != nil {
		// The sidecar settles a cost after it answers the response's last
		// message: read until the settlement shows, or --timeout.
		// A cost equal to its reservation moves no counter: a second is
		// long enough to tell it from a settlement not yet counted.
		deadline := time.Now().Add(min(c.timeout, time.Second))
		for {
			now, err := readCounters(ctx, c.metricsURL, tlsConf, c.timeout, "")
			if err != nil {
				fmt.Fprintf(stderr, "throttlekit probe: note: could not read %s after the request (%v): what the request's cost limits did is not shown\n", c.metricsURL, err)
				break
			}
			note := costNote(was, now)
			if note == "" || !strings.Contains(note, "reservation (") || time.Now().After(deadline) {
				if note != "" {
					fmt.Fprintln(stdout, note)
				}
				break
			}
			time.Sleep(20 * time.Millisecond) // a CLI polling the sidecar's counters, not a test
		}
	}
	return exitOK
}

// metadataContext is ms as Envoy forwards dynamic metadata: a number where
// the value is one, a string otherwise.
func metadataContext(ms []metaEntry) *corev3.Metadata {
	md := &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{}}
	for _, m := range ms {
		st := md.FilterMetadata[m.ns]
		if st == nil {
			st = &structpb.Struct{Fields: map[string]*structpb.Value{}}
			md.FilterMetadata[m.ns] = st
		}
		if f, err := strconv.ParseFloat(m.value, 64); err == nil {
			st.Fields[m.key] = structpb.NewNumberValue(f)
		} else {
			st.Fields[m.key] = structpb.NewStringValue(m.value)
		}
	}
	return md
}

func headerMap(es []entry) *corev3.HeaderMap {
	m := &corev3.HeaderMap{}
	for _, e := range es {
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: e.key, RawValue: []byte(e.value)})
	}
	return m
}

// describeRejection is a gate's ImmediateResponse in words: "rejected by
// gate checkout: 503, concurrency limit 4 reached (retry-after 1s)".
func describeRejection(ir *extprocv3.ImmediateResponse) string {
	h := map[string]string{}
	for _, o := range ir.GetHeaders().GetSetHeaders() {
		v := string(o.GetHeader().GetRawValue())
		if v == "" {
			v = o.GetHeader().GetValue()
		}
		h[strings.ToLower(o.GetHeader().GetKey())] = v
	}
	code := int(ir.GetStatus().GetCode())
	gate, limit := h[envoyrls.HeaderGate], h[envoyrls.HeaderGateLimit]
	if gate == "" {
		return fmt.Sprintf("rejected: %d %s", code, strings.TrimSpace(string(ir.GetBody())))
	}
	s := fmt.Sprintf("rejected by gate %s: %d, concurrency limit %s reached", gate, code, limit)
	if ra := h["retry-after"]; ra != "" {
		s += " (retry-after " + ra + "s)"
	}
	return s
}
