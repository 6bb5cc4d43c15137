package deploy

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestVersionIsOneFigureEverywhere: VERSION is a semantic version, the
// changelog's newest entry is it, and every manifest runs the image tagged
// with it (issue 32, item 8).
func TestVersionIsOneFigureEverywhere(t *testing.T) {
	raw, err := os.ReadFile("../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	v := strings.TrimSpace(string(raw))
	if !regexp.MustCompile(`^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$`).MatchString(v) {
		t.Fatalf("VERSION %q is not a semantic version", v)
	}
	changelog, err := os.ReadFile("../CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	if m := regexp.MustCompile(`(?m)^## (\S+)`).FindSubmatch(changelog); m == nil || string(m[1]) != v {
		t.Fatalf("CHANGELOG.md's newest entry is %q, want VERSION's %s", m, v)
	}
	image := regexp.MustCompile(`image: throttlekit:(\S+)`)
	for _, f := range []string{"kubernetes/deployment.yaml", "kubernetes/envoy-gateway.yaml", "kubernetes/sidecar.yaml", "../docker-compose.yaml"} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		tags := image.FindAllSubmatch(data, -1)
		if len(tags) == 0 {
			t.Fatalf("%s runs no throttlekit image", f)
		}
		for _, m := range tags {
			if string(m[1]) != v {
				t.Errorf("%s runs throttlekit:%s, want VERSION's %s", f, m[1], v)
			}
		}
	}
	if _, err := os.Stat("../LICENSE"); err != nil {
		t.Fatalf("no LICENSE: %v", err)
	}
}
