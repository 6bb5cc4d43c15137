package benchgate

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/throttlekit/throttlekit/internal/testenv"
)

// startDeadline bounds a sidecar's start: its "serving" line, then /readyz.
const startDeadline = 20 * time.Second

// sidecar is one running `throttlekit serve`.
type sidecar struct {
	cmd  *exec.Cmd
	conn *grpc.ClientConn
	http string
	log  *testenv.ServingLog // everything it wrote, for a failure's report
}

// startSidecar starts bin serving the gates policy (gates.yaml's content)
// with args, and waits until it answers /readyz.
func startSidecar(t *testing.T, bin, gates string, args ...string) *sidecar {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "gates.yaml"), []byte(gates), 0o644); err != nil {
		t.Fatal(err)
	}
	s := &sidecar{log: testenv.NewServingLog()}
	s.cmd = exec.Command(bin, append([]string{"serve", "--policy", dir,
		"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
		"--log-format", "json", "--log-level", "info"}, args...)...)
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	exited := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = s.cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("throttlekit %s output:\n%s", strings.Join(s.cmd.Args[1:], " "), s.log.String())
		}
	})
	var addrs testenv.ServingAddrs
	select {
	case addrs = <-s.log.Serving:
	case <-exited:
		t.Fatalf("throttlekit exited before serving:\n%s", s.log.String())
	case <-time.After(startDeadline):
		t.Fatalf("throttlekit logged no \"serving\" line within %v:\n%s", startDeadline, s.log.String())
	}
	s.http = addrs.HTTP
	ready := time.Now().Add(startDeadline)
	for {
		r, err := http.Get("http://" + s.http + "/readyz")
		if err == nil {
			r.Body.Close()
			if r.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(ready) {
			t.Fatalf("/readyz not 200 within %v (%v):\n%s", startDeadline, err, s.log.String())
		}
		select { // polling a condition with a deadline
		case <-time.After(20 * time.Millisecond):
		case <-exited:
			t.Fatalf("throttlekit exited before it was ready:\n%s", s.log.String())
		}
	}
	conn, err := grpc.NewClient(addrs.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	s.conn = conn
	t.Cleanup(func() { _ = s.conn.Close() })
	return s
}

// String names the sidecar in messages.
func (s *sidecar) String() string { return fmt.Sprintf("sidecar %s", s.http) }

// gateGauges are the gate's gauges (throttlekit_gate_<name>) the log and
// the table read.
var gateGauges = []string{"limit", "inflight", "fleet_share", "fleet_global_limit", "fleet_local_limit"}

// gauge is one of gateGauges as /metrics showed it.
type gauge struct {
	name  string
	value float64
}

// gauges reads the sidecar's gateGauges from its /metrics now, in the
// order it shows them.
func (s *sidecar) gauges() ([]gauge, error) {
	r, err := http.Get("http://" + s.http + "/metrics")
	if err != nil {
		return nil, err
	}
	defer r.Body.Close()
	var out []gauge
	sc := bufio.NewScanner(r.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "throttlekit_gate_")
		if !ok {
			continue
		}
		name, rest, ok := strings.Cut(rest, "{")
		if !ok || !slices.Contains(gateGauges, name) {
			continue
		}
		if _, v, ok := strings.Cut(rest, "} "); ok {
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				out = append(out, gauge{name, f})
			}
		}
	}
	return out, sc.Err()
}

// gaugeValue is the named gauge of gs.
func gaugeValue(gs []gauge, name string) (float64, bool) {
	for _, g := range gs {
		if g.name == name {
			return g.value, true
		}
	}
	return 0, false
}

// formatGauges is gs for the log: name=value; ….
func formatGauges(gs []gauge, err error) string {
	if err != nil {
		return err.Error()
	}
	out := make([]string, len(gs))
	for i, g := range gs {
		out[i] = g.name + "=" + strconv.FormatFloat(g.value, 'g', -1, 64)
	}
	return strings.Join(out, "; ")
}

// gateState is the sidecar's gate gauges for the log.
func (s *sidecar) gateState() string { return formatGauges(s.gauges()) }
