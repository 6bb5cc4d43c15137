package deploy

import (
	"fmt"
	"net"
	"path"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	"google.golang.org/protobuf/encoding/protojson"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	// Registered so the typed_config Any values of the sidecar's Envoy
	// configuration resolve.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
)

// TestSidecarEnvoyReachesThrottlekit: in every pod that runs Envoy beside
// throttlekit, Envoy's configuration (a mounted ConfigMap) is a valid v3
// Bootstrap, unknown fields rejected, and its throttlekit cluster points at
// the address throttlekit's gRPC server listens on in that pod.
func TestSidecarEnvoyReachesThrottlekit(t *testing.T) {
	ms := loadManifests(t)
	pods := 0
	for _, d := range ms.deployments {
		tk := throttlekitContainers(d)
		for _, c := range d.Spec.Template.Spec.Containers {
			if !strings.HasPrefix(c.Image, "envoyproxy/envoy:") || len(tk) != 1 {
				continue
			}
			pods++
			b := sidecarBootstrap(t, ms, d.Spec.Template.Spec.Volumes, &c)
			want := listenAddrs(t, tk[0])["grpc-addr"]
			var got []string
			for _, cl := range b.GetStaticResources().GetClusters() {
				if cl.GetName() != "throttlekit" {
					continue
				}
				for _, le := range cl.GetLoadAssignment().GetEndpoints() {
					for _, ep := range le.GetLbEndpoints() {
						sa := ep.GetEndpoint().GetAddress().GetSocketAddress()
						got = append(got, net.JoinHostPort(sa.GetAddress(), fmt.Sprint(sa.GetPortValue())))
					}
				}
			}
			if len(got) != 1 || got[0] != want {
				t.Errorf("Deployment %s: Envoy's throttlekit cluster reaches %v, throttlekit listens on %s", d.Name, got, want)
			}
		}
	}
	if pods == 0 {
		t.Fatal("no Deployment runs Envoy beside throttlekit")
	}
}

// sidecarBootstrap decodes the Envoy configuration an Envoy container reads
// (-c FILE, from a mounted ConfigMap) as Envoy would: YAML → JSON → the
// proto3 JSON mapping, unknown fields rejected.
func sidecarBootstrap(t *testing.T, ms *manifests, volumes []corev1.Volume, c *corev1.Container) *bootstrapv3.Bootstrap {
	t.Helper()
	file := ""
	for i, a := range c.Args {
		if a == "-c" && i+1 < len(c.Args) {
			file = c.Args[i+1]
		}
	}
	for _, m := range c.VolumeMounts {
		if m.MountPath != path.Dir(file) {
			continue
		}
		for _, v := range volumes {
			if v.Name != m.Name || v.ConfigMap == nil {
				continue
			}
			cm := ms.configMap(t, v.ConfigMap.Name)
			raw, ok := cm.Data[path.Base(file)]
			if !ok {
				t.Fatalf("Envoy reads %s, but ConfigMap %s has no key %s", file, cm.Name, path.Base(file))
			}
			js, err := yaml.YAMLToJSONStrict([]byte(raw))
			if err != nil {
				t.Fatalf("ConfigMap %s key %s: %v", cm.Name, path.Base(file), err)
			}
			var b bootstrapv3.Bootstrap
			if err := protojson.Unmarshal(js, &b); err != nil {
				t.Fatalf("ConfigMap %s key %s: not a v3 Bootstrap: %v", cm.Name, path.Base(file), err)
			}
			if err := b.ValidateAll(); err != nil {
				t.Fatalf("ConfigMap %s key %s: %v", cm.Name, path.Base(file), err)
			}
			return &b
		}
	}
	t.Fatalf("container %s reads its configuration from %q, which no ConfigMap is mounted at", c.Name, file)
	return nil
}

// envoyGatewayConfig mirrors the fields of Envoy Gateway's EnvoyGateway
// configuration (gateway.envoyproxy.io/v1alpha1, api/v1alpha1 of
// envoyproxy/gateway) that envoy-gateway.yaml uses. Local, as for
// serviceMonitor: the envoyproxy/gateway module is far heavier than these
// fields, and strict decoding rejects any field not listed.
type envoyGatewayConfig struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Gateway    struct {
		ControllerName string `json:"controllerName"`
	} `json:"gateway"`
	Logging struct {
		Level map[string]string `json:"level"`
	} `json:"logging"`
	Provider struct {
		Type       string `json:"type"`
		Kubernetes struct {
			// EnvoyGatewayKubernetesProvider.RateLimitDeployment, a
			// KubernetesDeploymentSpec.
			RateLimitDeployment struct {
				Replicas  *int32   `json:"replicas"`
				Container struct { // KubernetesContainerSpec
					Image     string                       `json:"image"`
					Env       []corev1.EnvVar              `json:"env"`
					Resources *corev1.ResourceRequirements `json:"resources"`
				} `json:"container"`
			} `json:"rateLimitDeployment"`
		} `json:"kubernetes"`
	} `json:"provider"`
	RateLimit struct {
		Backend struct {
			Type  string `json:"type"`
			Redis struct {
				URL string `json:"url"`
			} `json:"redis"`
		} `json:"backend"`
	} `json:"rateLimit"`
}

// TestEnvoyGatewayUsesThrottlekit: Envoy Gateway's configuration decodes
// strictly, replaces its rate limit deployment's image with the image the
// other manifests run, gives it a Redis backend, and passes only THROTTLEKIT_*
// variables that `throttlekit serve` knows.
func TestEnvoyGatewayUsesThrottlekit(t *testing.T) {
	ms := loadManifests(t)
	flags := serveFlags(t)
	cm := ms.configMap(t, "envoy-gateway-config")
	var eg envoyGatewayConfig
	if err := decodeStrict([]byte(cm.Data["envoy-gateway.yaml"]), &eg); err != nil {
		t.Fatalf("ConfigMap %s key envoy-gateway.yaml: %v", cm.Name, err)
	}
	if eg.APIVersion != "gateway.envoyproxy.io/v1alpha1" || eg.Kind != "EnvoyGateway" || eg.Provider.Type != "Kubernetes" {
		t.Errorf("apiVersion %q kind %q provider %q: want gateway.envoyproxy.io/v1alpha1 EnvoyGateway, Kubernetes", eg.APIVersion, eg.Kind, eg.Provider.Type)
	}
	image := throttlekitContainers(ms.deployments[0])[0].Image
	if got := eg.Provider.Kubernetes.RateLimitDeployment.Container.Image; got != image {
		t.Errorf("provider.kubernetes.rateLimitDeployment.container.image %q, want throttlekit's %q", got, image)
	}
	if eg.RateLimit.Backend.Type != "Redis" || eg.RateLimit.Backend.Redis.URL == "" {
		t.Errorf("rateLimit.backend %+v: want type Redis with a url", eg.RateLimit.Backend)
	}
	for _, e := range eg.Provider.Kubernetes.RateLimitDeployment.Container.Env {
		if f := envFlag(e.Name); f == "" || !flags[f] {
			t.Errorf("rateLimitDeployment.container.env %s is no THROTTLEKIT_* twin of a `throttlekit serve` flag", e.Name)
		}
	}
}
