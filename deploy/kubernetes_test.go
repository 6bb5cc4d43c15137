package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// kubernetesDir holds the manifests operators apply (deploy/kubernetes).
const kubernetesDir = "kubernetes"

// serviceMonitor mirrors the fields of the Prometheus Operator's
// monitoring.coreos.com/v1 ServiceMonitor that the manifests use. A local
// type rather than the operator's API module: that module pulls in
// controller-runtime and apiextensions-apiserver for one struct, and strict
// decoding into this one still rejects any field not listed here, so a
// manifest cannot carry a misspelt or unchecked field.
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path"`
			Interval string `json:"interval"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// manifests is every object of deploy/kubernetes, decoded strictly.
type manifests struct {
	deployments     []*appsv1.Deployment
	services        []*corev1.Service
	configMaps      []*corev1.ConfigMap
	pdbs            []*policyv1.PodDisruptionBudget
	serviceMonitors []*serviceMonitor
}

// decodeStrict decodes one YAML document into v as the API server does:
// duplicate keys, fields v has no place for and fields in the wrong case
// (readOnlyRootFileSystem) are errors, at every depth. encoding/json alone
// would take a field whose name differs only in case.
func decodeStrict(doc []byte, v any) error {
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	strict, err := sigsjson.UnmarshalStrict(js, v, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// splitYAML returns the non-empty documents of a multi-document YAML stream.
func splitYAML(raw []byte) ([][]byte, error) {
	r := k8syaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		var probe map[string]any
		if err := yaml.Unmarshal(doc, &probe); err != nil {
			return nil, err
		}
		if len(probe) > 0 { // not only comments
			docs = append(docs, doc)
		}
	}
}

// decodeManifest decodes one document into the k8s.io/api type its
// apiVersion and kind name, and adds it to ms.
func (ms *manifests) decodeManifest(doc []byte) error {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return err
	}
	var err error
	switch tm.APIVersion + " " + tm.Kind {
	case "apps/v1 Deployment":
		d := &appsv1.Deployment{}
		err = decodeStrict(doc, d)
		ms.deployments = append(ms.deployments, d)
	case "v1 Service":
		s := &corev1.Service{}
		err = decodeStrict(doc, s)
		ms.services = append(ms.services, s)
	case "v1 ConfigMap":
		c := &corev1.ConfigMap{}
		err = decodeStrict(doc, c)
		ms.configMaps = append(ms.configMaps, c)
	case "policy/v1 PodDisruptionBudget":
		p := &policyv1.PodDisruptionBudget{}
		err = decodeStrict(doc, p)
		ms.pdbs = append(ms.pdbs, p)
	case "monitoring.coreos.com/v1 ServiceMonitor":
		s := &serviceMonitor{}
		err = decodeStrict(doc, s)
		ms.serviceMonitors = append(ms.serviceMonitors, s)
	default:
		return fmt.Errorf("apiVersion %q kind %q: not a type this test decodes (add it to decodeManifest)", tm.APIVersion, tm.Kind)
	}
	return err
}

// loadManifests decodes every *.yaml of deploy/kubernetes.
func loadManifests(t *testing.T) *manifests {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(kubernetesDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s (%v)", kubernetesDir, err)
	}
	ms := &manifests{}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs, err := splitYAML(raw)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if len(docs) == 0 {
			t.Errorf("%s: no objects", f)
		}
		for i, doc := range docs {
			if err := ms.decodeManifest(doc); err != nil {
				t.Errorf("%s, document %d: %v", f, i+1, err)
			}
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return ms
}

func (ms *manifests) configMap(t *testing.T, name string) *corev1.ConfigMap {
	t.Helper()
	for _, c := range ms.configMaps {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no ConfigMap %q in %s", name, kubernetesDir)
	return nil
}

// podsSelectedBy returns the Deployments whose pods sel selects.
func (ms *manifests) podsSelectedBy(t *testing.T, sel *metav1.LabelSelector) []*appsv1.Deployment {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Fatalf("selector %v: %v", sel, err)
	}
	var out []*appsv1.Deployment
	for _, d := range ms.deployments {
		if !s.Empty() && s.Matches(labels.Set(d.Spec.Template.Labels)) {
			out = append(out, d)
		}
	}
	return out
}

// TestStrictDecodingRejectsUnknownFields: the decoding every manifest goes
// through fails on a misspelt field, deep in a pod spec as at the top.
func TestStrictDecodingRejectsUnknownFields(t *testing.T) {
	for name, doc := range map[string]string{
		"deep": "apiVersion: apps/v1\nkind: Deployment\nspec:\n  template:\n    spec:\n      containers:\n        - name: x\n          imagee: y\n",
		"top":  "apiVersion: v1\nkind: Service\nspce: {}\n",
		"case": "apiVersion: v1\nkind: Service\nspec: {clusterIp: None}\n",
		"dup":  "apiVersion: v1\nkind: ConfigMap\ndata: {a: b}\ndata: {c: d}\n",
		"kind": "apiVersion: v1\nkind: Pod\n",
		"sm":   "apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nspec:\n  endpoints: [{port: http, scrapeTimeout: 1s}]\n",
	} {
		if err := (&manifests{}).decodeManifest([]byte(doc)); err == nil {
			t.Errorf("%s: decoded without error:\n%s", name, doc)
		}
	}
}

// TestKubernetesManifestsDecode: every manifest decodes strictly, and the
// set holds what an operator needs: two Deployments (the shared service and
// the sidecar example), Services, a PodDisruptionBudget, a ServiceMonitor
// and the policy ConfigMap.
func TestKubernetesManifestsDecode(t *testing.T) {
	ms := loadManifests(t)
	if len(ms.deployments) < 2 || len(ms.services) < 1 || len(ms.pdbs) < 1 || len(ms.serviceMonitors) < 1 {
		t.Fatalf("%d Deployments, %d Services, %d PodDisruptionBudgets, %d ServiceMonitors: want at least 2, 1, 1, 1",
			len(ms.deployments), len(ms.services), len(ms.pdbs), len(ms.serviceMonitors))
	}
	ms.configMap(t, "throttlekit-policy")
}

// TestServicesReachContainerPorts: each Service selects a Deployment's pods
// and every targetPort is a port a container of those pods declares.
func TestServicesReachContainerPorts(t *testing.T) {
	ms := loadManifests(t)
	for _, svc := range ms.services {
		pods := ms.podsSelectedBy(t, &metav1.LabelSelector{MatchLabels: svc.Spec.Selector})
		if len(pods) != 1 {
			t.Errorf("Service %s selects the pods of %d Deployments, want 1", svc.Name, len(pods))
			continue
		}
		for _, p := range svc.Spec.Ports {
			if _, ok := containerPort(&pods[0].Spec.Template.Spec, p.TargetPort.String()); !ok {
				t.Errorf("Service %s port %s: targetPort %s is no container port of Deployment %s", svc.Name, p.Name, p.TargetPort.String(), pods[0].Name)
			}
		}
	}
}

// containerPort resolves a port (a name or a number) against every
// container of a pod; it returns the container port number.
func containerPort(pod *corev1.PodSpec, port string) (int32, bool) {
	for _, c := range slices.Concat(pod.InitContainers, pod.Containers) {
		for _, p := range c.Ports {
			if p.Name == port || fmt.Sprint(p.ContainerPort) == port {
				return p.ContainerPort, true
			}
		}
	}
	return 0, false
}

// TestDisruptionBudgetAndServiceMonitor: the PodDisruptionBudget covers a
// Deployment of more than one replica (else it would block every drain);
// the ServiceMonitor selects a Service and scrapes its named port at
// /metrics.
func TestDisruptionBudgetAndServiceMonitor(t *testing.T) {
	ms := loadManifests(t)
	for _, p := range ms.pdbs {
		pods := ms.podsSelectedBy(t, p.Spec.Selector)
		if len(pods) != 1 {
			t.Errorf("PodDisruptionBudget %s covers %d Deployments, want 1", p.Name, len(pods))
			continue
		}
		if r := pods[0].Spec.Replicas; r == nil || *r < 2 {
			t.Errorf("PodDisruptionBudget %s covers Deployment %s of %v replicas: with fewer than 2 it blocks drains", p.Name, pods[0].Name, r)
		}
	}
	for _, sm := range ms.serviceMonitors {
		sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
		if err != nil || sel.Empty() {
			t.Fatalf("ServiceMonitor %s: selector %v (%v)", sm.Name, sm.Spec.Selector, err)
		}
		var svc *corev1.Service
		for _, s := range ms.services {
			if sel.Matches(labels.Set(s.Labels)) {
				svc = s
			}
		}
		if svc == nil {
			t.Fatalf("ServiceMonitor %s selects no Service", sm.Name)
		}
		if len(sm.Spec.Endpoints) == 0 {
			t.Fatalf("ServiceMonitor %s has no endpoints", sm.Name)
		}
		for _, ep := range sm.Spec.Endpoints {
			if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep.Port }) {
				t.Errorf("ServiceMonitor %s scrapes port %q, which Service %s does not name", sm.Name, ep.Port, svc.Name)
			}
			if ep.Path != "/metrics" {
				t.Errorf("ServiceMonitor %s scrapes %q, want /metrics", sm.Name, ep.Path)
			}
		}
	}
}

// throttlekitContainers returns the containers (init containers included:
// a native sidecar is one) that run the throttlekit image.
func throttlekitContainers(d *appsv1.Deployment) []*corev1.Container {
	var out []*corev1.Container
	spec := &d.Spec.Template.Spec
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range cs {
			if strings.HasPrefix(cs[i].Image, "throttlekit:") || strings.Contains(cs[i].Image, "/throttlekit:") {
				out = append(out, &cs[i])
			}
		}
	}
	return out
}
