package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"

	"example.com/podtoip-controller/e2e/framework"
)

// TestEnrichContexts runs `kubectl ptp enrich --contexts` and `who-had
// --contexts` as a user with several clusters does. Two contexts name the same API server, so the
// same pod holds the address in both "clusters" at once: a conflict
// naming both, as pods of two clusters whose ranges overlap would be. A
// context whose API server cannot be reached makes every answer at most
// uncertain and the exit code 3, naming it; one context alone answers
// certain, with its cluster column.
func TestEnrichContexts(t *testing.T) {
	ns := suite.NewNamespace(t)
	p := suite.StartController(t, "--namespace", ns)
	framework.WaitReady(t, p)
	suite.RunningPod(t, ns, "a", []string{"10.244.197.1"})
	suite.WaitHistory(t, "10.244.197.1", "a's hold", func(h *framework.History) bool { _, ok := openHold(h, "a"); return ok })
	waitCoverage(t, ns)
	at := time.Now().Add(-500 * time.Millisecond)
	waitCoverageReaches(t, ns, at.Add(time.Second))

	// east and west: the same API server; gone: nothing listens.
	cfg, err := clientcmd.LoadFromFile(suite.CP.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cur := cfg.Contexts[cfg.CurrentContext]
	for _, name := range []string{"east", "west", "gone"} {
		c := *cur
		if name == "gone" {
			gone := *cfg.Clusters[cur.Cluster]
			gone.Server = "https://127.0.0.1:1"
			cfg.Clusters["gone"], c.Cluster = &gone, "gone"
		}
		cfg.Contexts[name] = &c
	}
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		t.Fatal(err)
	}
	flows := filepath.Join(dir, "flows.jsonl")
	record := fmt.Sprintf(`{"ts":%q,"te":%q,"src":"10.244.197.1","dst":"10.244.197.99"}`+"\n",
		at.UTC().Format(time.RFC3339Nano), at.Add(time.Second).UTC().Format(time.RFC3339Nano))
	if err := os.WriteFile(flows, []byte(record), 0o600); err != nil {
		t.Fatal(err)
	}
	enrich := func(contexts string) (map[string]map[string]any, string, int) {
		t.Helper()
		out, errOut, code := suite.KubectlPTP(t, "enrich", "--kubeconfig", kubeconfig, "--contexts", contexts, "-n", ns, "--skew", "0",
			"--format", "jsonl", "--time-field", "ts", "--end-field", "te", "--address-fields", "src,dst", "-o", "jsonl", flows)
		var rec struct {
			PodToIp map[string]map[string]any `json:"podtoip"`
		}
		if err := json.Unmarshal([]byte(out), &rec); err != nil {
			t.Fatalf("enrich --contexts %s: exit %d, output %q (%v), stderr %s", contexts, code, out, err, errOut)
		}
		return rec.PodToIp, errOut, code
	}

	got, errOut, code := enrich("east")
	if code != 0 || got["src"]["match"] != "certain" || got["src"]["pod"] != "a" || got["src"]["cluster"] != "east" || got["dst"]["match"] != "none" {
		t.Errorf("one context: exit %d, %v, stderr %s; want a certain in east, none for the other address", code, got, errOut)
	}
	got, errOut, code = enrich("east,west")
	holders, _ := got["src"]["holders"].([]any)
	if code != 0 || got["src"]["match"] != "conflict" || len(holders) != 2 || got["dst"]["match"] != "none" ||
		!strings.Contains(fmt.Sprint(holders), "cluster:east") || !strings.Contains(fmt.Sprint(holders), "cluster:west") {
		t.Errorf("the same pod in two clusters: exit %d, %v, stderr %s; want a conflict naming a in east and in west", code, got, errOut)
	}
	got, errOut, code = enrich("east,gone")
	if code != 3 || !strings.Contains(errOut, "gone") || got["src"]["match"] != "uncertain" || got["dst"]["match"] != "not-covered" {
		t.Errorf("a context that cannot be reached: exit %d, %v, stderr %s; want exit 3 naming it, a uncertain, the other address not covered", code, got, errOut)
	}

	// who-had --contexts: the holders of each cluster, with theirs.
	whoHad := func(addr, contexts string, extra ...string) (string, string, int) {
		t.Helper()
		return suite.KubectlPTP(t, append([]string{"who-had", addr, "--at", at.UTC().Format(time.RFC3339Nano), "--kubeconfig", kubeconfig,
			"--contexts", contexts, "-n", ns}, extra...)...)
	}
	out, errOut, code := whoHad("10.244.197.1", "east,west")
	if code != 0 || !regexp.MustCompile(`(?m)^east +`+ns+` +a `).MatchString(out) || !regexp.MustCompile(`(?m)^west +`+ns+` +a `).MatchString(out) ||
		!strings.Contains(errOut, "a conflict") {
		t.Errorf("who-had --contexts east,west: exit %d\n%s\nstderr %s; want a in both, and a conflict noted", code, out, errOut)
	}
	out, errOut, code = whoHad("10.244.197.99", "east,west", "-o", "json")
	var res struct {
		Kind     string `json:"kind"`
		Clusters []struct {
			Cluster string `json:"cluster"`
			WhoHad  *struct {
				Covered bool `json:"covered"`
			} `json:"whoHad"`
		} `json:"clusters"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != 1 || res.Kind != "WhoHadClusters" || len(res.Clusters) != 2 ||
		res.Clusters[1].Cluster != "west" || res.Clusters[1].WhoHad == nil || !res.Clusters[1].WhoHad.Covered {
		t.Errorf("who-had --contexts of an address nobody held: exit %d (%v)\n%s\nstderr %s; want exit 1 and both clusters covered", code, err, out, errOut)
	}
	out, errOut, code = whoHad("10.244.197.1", "east,gone")
	if code != 3 || !strings.Contains(errOut, "gone") || !regexp.MustCompile(`(?m)^east +`+ns+` +a `).MatchString(out) {
		t.Errorf("who-had --contexts east,gone: exit %d\n%s\nstderr %s; want east's answer, and exit 3 naming gone", code, out, errOut)
	}
}

// waitCoverageReaches waits until the coverage of namespace ns reaches
// past t0.
func waitCoverageReaches(t *testing.T, ns string, t0 time.Time) {
	t.Helper()
	var out string
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		out, _ = suite.CP.Kubectl(ctx, "get", "iphc", "namespace."+ns, "-o", "jsonpath={.intervals[-1:].to}")
		until, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(out))
		return err == nil && until.After(t0), nil
	})
	if err != nil {
		t.Fatalf("the coverage of %s does not reach %v after a minute (last %q): %v", ns, t0, out, err)
	}
}
