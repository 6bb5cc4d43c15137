package deploy

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzDecodeManifest: splitting and strictly decoding any input returns an
// error or objects, never a panic. Seeded with the shipped manifests.
func FuzzDecodeManifest(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join(kubernetesDir, "*.yaml"))
	for _, file := range files {
		if raw, err := os.ReadFile(file); err == nil {
			f.Add(raw)
		}
	}
	f.Add([]byte("apiVersion: apps/v1\nkind: Deployment\nspec: {replicas: x}\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		docs, err := splitYAML(raw)
		if err != nil {
			return
		}
		ms := &manifests{}
		for _, doc := range docs {
			_ = ms.decodeManifest(doc)
		}
	})
}
