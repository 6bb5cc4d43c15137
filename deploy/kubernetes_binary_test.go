package deploy

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/throttlekit/throttlekit/internal/testenv"
)

// listenAddrs reads the listen address flags a container gives throttlekit,
// from its args (which win) or its THROTTLEKIT_* environment.
func listenAddrs(t *testing.T, c *corev1.Container) map[string]string {
	t.Helper()
	addrs := map[string]string{}
	for _, e := range c.Env {
		if f := envFlag(e.Name); f == "grpc-addr" || f == "http-addr" {
			addrs[f] = e.Value
		}
	}
	for i, a := range c.Args {
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if (name == "grpc-addr" || name == "http-addr") && strings.HasPrefix(a, "-") {
			if !hasValue && i+1 < len(c.Args) {
				value = c.Args[i+1]
			}
			addrs[name] = value
		}
	}
	for _, f := range []string{"grpc-addr", "http-addr"} {
		if addrs[f] == "" {
			t.Errorf("container %s: sets no --%s (nor THROTTLEKIT_%s): say where it listens", c.Name, f, strings.ToUpper(strings.ReplaceAll(f, "-", "_")))
		}
	}
	return addrs
}

// TestManifestsMatchTheBinary checks every container that runs throttlekit
// against the binary built from this tree: each THROTTLEKIT_* variable and
// each --flag is one `throttlekit serve -h` lists; the HTTP listen port is a
// declared container port on an address the kubelet can reach; the gRPC
// port is declared unless it is on loopback; the probes ask the HTTP port
// for /healthz (liveness) and /readyz (readiness, startup); requests are
// set; the policy directory is a mounted ConfigMap.
func TestManifestsMatchTheBinary(t *testing.T) {
	ms := loadManifests(t)
	flags := serveFlags(t)
	found := 0
	for _, d := range ms.deployments {
		for _, c := range throttlekitContainers(d) {
			found++
			where := fmt.Sprintf("Deployment %s, container %s", d.Name, c.Name)
			for _, e := range c.Env {
				if f := envFlag(e.Name); f == "" || !flags[f] {
					t.Errorf("%s: env %s is no THROTTLEKIT_* twin of a `throttlekit serve` flag", where, e.Name)
				}
			}
			for _, a := range slices2(c.Command, c.Args) {
				if name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "="); strings.HasPrefix(a, "-") && !flags[name] {
					t.Errorf("%s: %s is no `throttlekit serve` flag", where, a)
				}
			}
			addrs := listenAddrs(t, c)
			ports := map[int32]string{}
			for _, p := range c.Ports {
				ports[p.ContainerPort] = p.Name
			}
			httpHost, httpPort := splitAddr(t, addrs["http-addr"])
			if _, ok := ports[httpPort]; !ok {
				t.Errorf("%s: listens for HTTP on port %d, which it does not declare (ports %v)", where, httpPort, c.Ports)
			}
			if isLoopback(httpHost) {
				t.Errorf("%s: HTTP on loopback %s: the kubelet's probes and Prometheus cannot reach it", where, addrs["http-addr"])
			}
			grpcHost, grpcPort := splitAddr(t, addrs["grpc-addr"])
			if _, ok := ports[grpcPort]; !ok && !isLoopback(grpcHost) {
				t.Errorf("%s: listens for gRPC on %s, port not declared (ports %v)", where, addrs["grpc-addr"], c.Ports)
			}
			for port := range ports {
				if port != httpPort && port != grpcPort {
					t.Errorf("%s: declares port %d, on which throttlekit does not listen", where, port)
				}
			}
			for _, pr := range []struct {
				kind, path string
				probe      *corev1.Probe
				required   bool
			}{{"liveness", "/healthz", c.LivenessProbe, true}, {"readiness", "/readyz", c.ReadinessProbe, true}, {"startup", "/readyz", c.StartupProbe, false}} {
				switch {
				case pr.probe == nil && pr.required:
					t.Errorf("%s: no %s probe", where, pr.kind)
				case pr.probe == nil:
				case pr.probe.HTTPGet == nil:
					t.Errorf("%s: %s probe is not an httpGet", where, pr.kind)
				case pr.probe.HTTPGet.Path != pr.path:
					t.Errorf("%s: %s probe asks %s, want %s", where, pr.kind, pr.probe.HTTPGet.Path, pr.path)
				default:
					if p, ok := containerPort(&d.Spec.Template.Spec, pr.probe.HTTPGet.Port.String()); !ok || p != httpPort {
						t.Errorf("%s: %s probe asks port %s, not the HTTP listen port %d", where, pr.kind, pr.probe.HTTPGet.Port.String(), httpPort)
					}
				}
			}
			if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
				t.Errorf("%s: no cpu and memory requests", where)
			}
			policyConfigMap(t, ms, d, c)
		}
	}
	if found < 2 {
		t.Fatalf("%d throttlekit containers in the manifests, want the shared service and the sidecar", found)
	}
}

func slices2(a, b []string) []string { return append(append([]string(nil), a...), b...) }

func splitAddr(t *testing.T, addr string) (string, int32) {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	var n int32
	if err == nil {
		_, err = fmt.Sscan(port, &n)
	}
	if err != nil {
		t.Errorf("listen address %q: %v", addr, err)
	}
	return host, n
}

func isLoopback(host string) bool {
	ip := net.ParseIP(host)
	return host == "localhost" || (ip != nil && ip.IsLoopback())
}

// policyConfigMap returns the ConfigMap mounted where the container's
// THROTTLEKIT_POLICY (or --policy) points.
func policyConfigMap(t *testing.T, ms *manifests, d *appsv1.Deployment, c *corev1.Container) *corev1.ConfigMap {
	t.Helper()
	dir := ""
	for _, e := range c.Env {
		if envFlag(e.Name) == "policy" {
			dir = e.Value
		}
	}
	for _, m := range c.VolumeMounts {
		if m.MountPath != dir {
			continue
		}
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil {
				return ms.configMap(t, v.ConfigMap.Name)
			}
		}
	}
	t.Fatalf("Deployment %s, container %s: policy directory %q is no mounted ConfigMap", d.Name, c.Name, dir)
	return nil
}

// writeConfigMap writes a ConfigMap's keys as files in a new directory, as
// the kubelet mounts it.
func writeConfigMap(t *testing.T, cm *corev1.ConfigMap) string {
	t.Helper()
	dir := t.TempDir()
	for k, v := range cm.Data {
		if err := os.WriteFile(filepath.Join(dir, k), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestPolicyConfigMapValidates: the policy the manifests mount loads, by
// `throttlekit validate`, exactly as serve would load it.
func TestPolicyConfigMapValidates(t *testing.T) {
	dir := writeConfigMap(t, loadManifests(t).configMap(t, "throttlekit-policy"))
	if out, err := exec.Command(throttlekitBinary(t), "validate", dir).CombinedOutput(); err != nil {
		t.Fatalf("throttlekit validate: %v\n%s", err, out)
	}
}

// TestManifestEnvironmentServes runs the binary with each throttlekit
// container's own environment, changed only where the cluster supplies a
// value: the Secret's Redis URL (a real redis-server here), the pod name,
// the listen addresses (the same, on 127.0.0.1 and free ports) and the
// ConfigMap's files. It must start, and answer 200 on every probe path and
// on the ServiceMonitor's path; and with Redis killed (its store_up 0), on
// every probe path still: a native sidecar's readiness counts toward its
// application pod's, so a Redis outage must not take the application out
// of its Service (issue 42, item 3), and each rule answers the outage by
// its failure mode.
func TestManifestEnvironmentServes(t *testing.T) {
	ms := loadManifests(t)
	for _, d := range ms.deployments {
		for _, c := range throttlekitContainers(d) {
			t.Run(d.Name+"/"+c.Name, func(t *testing.T) {
				redis := testenv.StartRedis(t)
				policyDir := writeConfigMap(t, policyConfigMap(t, ms, d, c))
				var env []string
				hasLogFormat := false
				for _, e := range c.Env {
					v := e.Value
					switch {
					case envFlag(e.Name) == "grpc-addr" || envFlag(e.Name) == "http-addr":
						v = "127.0.0.1:0"
					case envFlag(e.Name) == "policy":
						v = policyDir
					case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
						if r := e.ValueFrom.SecretKeyRef; r.Name != "throttlekit-redis" || r.Key != "url" {
							t.Fatalf("env %s from Secret %s key %s: the test knows only throttlekit-redis/url", e.Name, r.Name, r.Key)
						}
						v = "redis://" + redis.Addr + "/0"
					case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil:
						v = "pod-0"
					case e.ValueFrom != nil:
						t.Fatalf("env %s: a valueFrom the test cannot supply", e.Name)
					}
					hasLogFormat = hasLogFormat || envFlag(e.Name) == "log-format"
					env = append(env, e.Name+"="+v)
				}
				if !hasLogFormat {
					env = append(env, "THROTTLEKIT_LOG_FORMAT=json") // the test reads the serving line
				}
				s := startServe(t, env, c.Args...)
				paths := []string{"/healthz", "/readyz"}
				for _, sm := range ms.serviceMonitors {
					for _, ep := range sm.Spec.Endpoints {
						paths = append(paths, ep.Path)
					}
				}
				client := &http.Client{Timeout: 5 * time.Second}
				for _, p := range paths {
					code := 0
					// /readyz waits for the first store probe.
					ok := testenv.Eventually(func() bool {
						resp, err := client.Get("http://" + s.httpAddr + p)
						if err != nil {
							return false
						}
						resp.Body.Close()
						code = resp.StatusCode
						return code == http.StatusOK
					})
					if !ok {
						t.Errorf("GET %s: status %d, want 200", p, code)
					}
				}
				redis.Kill()
				if !testenv.Eventually(func() bool {
					resp, err := client.Get("http://" + s.httpAddr + "/metrics")
					if err != nil {
						return false
					}
					defer resp.Body.Close()
					b, _ := io.ReadAll(resp.Body)
					return strings.Contains(string(b), "\nthrottlekit_store_up 0\n")
				}) {
					t.Fatal("throttlekit_store_up not 0 within 10s of Redis killed")
				}
				for _, pr := range []*corev1.Probe{c.StartupProbe, c.ReadinessProbe, c.LivenessProbe} {
					if pr == nil || pr.HTTPGet == nil {
						continue
					}
					resp, err := client.Get("http://" + s.httpAddr + pr.HTTPGet.Path)
					if err != nil {
						t.Fatalf("GET %s with Redis down: %v", pr.HTTPGet.Path, err)
					}
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						t.Errorf("GET %s with Redis down: status %d, want 200: the probe would take the pod out of its Service (or restart it) for the store's outage", pr.HTTPGet.Path, resp.StatusCode)
					}
				}
			})
		}
	}
}
