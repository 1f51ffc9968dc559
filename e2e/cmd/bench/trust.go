package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

// controllerUser is the identity the shipped admission policy lets write
// PodToIps and IPHistories: the controller runs as it, and so do the raw
// loops, so that both pay for the policy as the shipped manifests make a
// cluster do. The bench gives it system:masters instead of the shipped
// RBAC, which the e2e suite proves.
const controllerUser = "system:serviceaccount:podtoip-system:podtoip-controller"

// plainGroup serves copies of the shipped CRDs without their CEL rules and
// outside the admission policy: the raw loop's writes there are the plain
// writes the shipped ones are compared with.
const plainGroup = "plain.example.com"

// installTrust applies the shipped admission policy, waits until the API
// server enforces it, installs the plain CRDs, and sets up the controller's
// identity for the controller and the raw loops.
func (b *bench) installTrust(ctx context.Context) error {
	if _, err := b.cp.Kubectl(ctx, "apply", "-f", filepath.Join(b.cp.Root, "artifacts", "policy.yaml")); err != nil {
		return err
	}
	kubeconfig, cfg, err := b.cp.AddUser(controllerUser, "system:masters")
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = -1, 0
	if b.writer, err = rest.HTTPClientFor(cfg); err != nil {
		return err
	}
	b.kubeconfig = kubeconfig
	if err := b.waitPolicyEnforced(ctx); err != nil {
		return err
	}
	return b.installPlainCRDs(ctx)
}

// waitPolicyEnforced waits until the admin's create of a mirror-shaped
// PodToIp is refused: the policy takes effect a moment after it is applied,
// and a loop measured before that would not pay for it.
func (b *bench) waitPolicyEnforced(ctx context.Context) error {
	url := strings.TrimRight(b.cp.Host(), "/") + "/apis/example.com/v1/namespaces/" + benchNamespace + "/podtoips?dryRun=All"
	probe := benchPod{name: "policy-probe", node: "node-000", uid: "00000000-0000-4000-8000-000000000000", ips: []string{"10.0.0.1"}}
	var last error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		last = doWith(ctx, b.http, http.MethodPost, url, probe.mirrorJSON("example.com/v1"), http.StatusForbidden)
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("the admission policy (artifacts/policy.yaml) is not enforced after a minute: %w", last)
	}
	return nil
}

// installPlainCRDs installs artifacts/crd.yaml again in plainGroup without
// any x-kubernetes-validations.
func (b *bench) installPlainCRDs(ctx context.Context) error {
	raw, err := os.ReadFile(filepath.Join(b.cp.Root, "artifacts", "crd.yaml"))
	if err != nil {
		return err
	}
	var docs []string
	var names []string
	for _, doc := range strings.Split(string(raw), "\n---") {
		var crd map[string]any
		if err := yaml.Unmarshal([]byte(doc), &crd); err != nil {
			return fmt.Errorf("artifacts/crd.yaml: %w", err)
		}
		if crd == nil {
			continue
		}
		spec := crd["spec"].(map[string]any)
		spec["group"] = plainGroup
		plural := spec["names"].(map[string]any)["plural"].(string)
		crd["metadata"] = map[string]any{"name": plural + "." + plainGroup}
		names = append(names, "crd/"+plural+"."+plainGroup)
		dropValidations(crd)
		out, err := yaml.Marshal(crd)
		if err != nil {
			return err
		}
		docs = append(docs, string(out))
	}
	path := filepath.Join(b.logDir, "plain-crds.yaml")
	if err := os.WriteFile(path, []byte(strings.Join(docs, "---\n")), 0o644); err != nil {
		return err
	}
	if _, err := b.cp.Kubectl(ctx, "apply", "-f", path); err != nil {
		return err
	}
	_, err = b.cp.Kubectl(ctx, append([]string{"wait", "--for=condition=Established", "--timeout=60s"}, names...)...)
	return err
}

// dropValidations removes every x-kubernetes-validations from a decoded
// YAML tree.
func dropValidations(v any) {
	switch v := v.(type) {
	case map[string]any:
		delete(v, "x-kubernetes-validations")
		for _, x := range v {
			dropValidations(x)
		}
	case []any:
		for _, x := range v {
			dropValidations(x)
		}
	}
}
