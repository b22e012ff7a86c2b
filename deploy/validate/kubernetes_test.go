// Package validate checks deploy/kubernetes against the Kubernetes API
// types: every document must decode strictly (no unknown or mistyped
// field) into the type its apiVersion and kind name. It is its own module
// so that the Kubernetes libraries stay out of ingestd's.
package validate

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

func TestKubernetesManifests(t *testing.T) {
	files, err := filepath.Glob("../kubernetes/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests found: %v", err)
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range bytes.Split(raw, []byte("\n---\n")) {
			var head struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
			}
			if err := yaml.Unmarshal(doc, &head); err != nil {
				t.Fatalf("%s document %d: %v", f, i, err)
			}
			var obj any
			switch head.APIVersion + "/" + head.Kind {
			case "v1/Service":
				obj = &corev1.Service{}
			case "apps/v1/StatefulSet":
				obj = &appsv1.StatefulSet{}
			case "v1/PersistentVolumeClaim":
				obj = &corev1.PersistentVolumeClaim{}
			case "v1/ConfigMap":
				obj = &corev1.ConfigMap{}
			default:
				t.Fatalf("%s document %d: no validator for %s %s", f, i, head.APIVersion, head.Kind)
			}
			if err := yaml.UnmarshalStrict(doc, obj); err != nil {
				t.Errorf("%s document %d (%s): %v", f, i, head.Kind, err)
			}
			if sts, ok := obj.(*appsv1.StatefulSet); ok {
				checkStatefulSet(t, f, sts)
			}
		}
	}
}

// checkStatefulSet checks what the schema cannot: the selector matches the
// pod labels and every volume mount has a claim or volume.
func checkStatefulSet(t *testing.T, f string, s *appsv1.StatefulSet) {
	for k, v := range s.Spec.Selector.MatchLabels {
		if s.Spec.Template.Labels[k] != v {
			t.Errorf("%s: selector %s=%s does not match the pod labels", f, k, v)
		}
	}
	volumes := map[string]bool{}
	for _, c := range s.Spec.VolumeClaimTemplates {
		volumes[c.Name] = true
	}
	for _, v := range s.Spec.Template.Spec.Volumes {
		volumes[v.Name] = true
	}
	for _, c := range s.Spec.Template.Spec.Containers {
		for _, m := range c.VolumeMounts {
			if !volumes[m.Name] {
				t.Errorf("%s: container %s mounts unknown volume %s", f, c.Name, m.Name)
			}
		}
		if c.ReadinessProbe == nil || c.LivenessProbe == nil {
			t.Errorf("%s: container %s needs readiness and liveness probes", f, c.Name)
		}
	}
}
