package e2e

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"example.com/podtoip-controller/e2e/controlplane"
	"example.com/podtoip-controller/e2e/framework"
)

// The export component's identity (artifacts/export/rbac.yaml) and the
// cluster name the test's overlay gives it.
const (
	exportSA      = "podtoip-export"
	exportUser    = "system:serviceaccount:" + framework.DeployNamespace + ":" + exportSA
	exportCluster = "e2e-cluster"
)

var exportGroups = []string{"system:serviceaccounts", "system:serviceaccounts:" + framework.DeployNamespace, "system:authenticated"}

// exportGrants are the only access the export's ServiceAccount has beyond
// what every ServiceAccount has: how far the history vouches, and the
// IPHistories a page at a time.
var exportGrants = map[string][]string{
	"iphistorycoverages.example.com": {"get"},
	"iphistories.example.com":        {"list"},
}

// TestExportCronJobLeastPrivilege installs the export component
// (artifacts/export, through an overlay as docs/export.md shows) on a
// control plane of its own, next to a controller of all namespaces, and
// runs the CronJob's command as the CronJob's ServiceAccount: once through
// impersonation, once exactly as its pod would, with no kubeconfig, the
// ServiceAccount's token where a pod has it and the in-cluster API
// address. Both succeed and write their files, and the second, an hour's
// run after the first, writes only what ended in between. The
// ServiceAccount may do nothing else: no write of the history, no pods,
// no secrets, and without either of its two rules the export fails. The
// CronJob's pod passes the "restricted" Pod Security Standard.
//
// The control plane runs no kubelet, so the CronJob itself never runs a
// pod here: its command is run as the pod would run it.
func TestExportCronJobLeastPrivilege(t *testing.T) {
	own := suite.StartBareControlPlane(t, "export-cronjob-controlplane.log")
	if err := own.InstallCRD(t.Context()); err != nil {
		t.Fatalf("installing the CRDs: %v", err)
	}
	env := suite.On(own)

	objs := renderExportOverlay(t)
	var apply []unstructured.Unstructured
	var cronJob *batchv1.CronJob
	for _, o := range objs {
		switch {
		case o.GetKind() == "Namespace",
			o.GetLabels()["app.kubernetes.io/component"] == "export",
			o.GetKind() == "ConfigMap" && strings.HasPrefix(o.GetName(), exportSA+"-"):
			apply = append(apply, o)
		}
		if o.GetKind() == "CronJob" {
			cronJob = &batchv1.CronJob{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, cronJob); err != nil {
				t.Fatal(err)
			}
		}
	}
	if cronJob == nil {
		t.Fatal("the overlay renders no CronJob")
	}
	var kinds []string
	for _, o := range apply {
		kinds = append(kinds, o.GetKind())
	}
	slices.Sort(kinds)
	if want := []string{"ClusterRole", "ClusterRoleBinding", "ConfigMap", "CronJob", "Namespace", "NetworkPolicy", "PersistentVolumeClaim", "ServiceAccount"}; !slices.Equal(kinds, want) {
		t.Fatalf("the overlay renders %v of the export, want %v", kinds, want)
	}
	manifests := filepath.Join(t.TempDir(), "export.yaml")
	var b strings.Builder
	for _, o := range apply {
		y, err := yaml.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString("---\n")
		b.Write(y)
	}
	if err := os.WriteFile(manifests, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := own.Kubectl(t.Context(), "apply", "--server-side", "-f", manifests); err != nil {
		t.Fatalf("applying the export component: %v\n%s", err, out)
	}

	t.Run("the CronJob is as documented", func(t *testing.T) {
		s := cronJob.Spec
		job := s.JobTemplate.Spec
		pod := job.Template.Spec
		if s.ConcurrencyPolicy != batchv1.ForbidConcurrent || s.StartingDeadlineSeconds == nil || job.BackoffLimit == nil ||
			s.SuccessfulJobsHistoryLimit == nil || s.FailedJobsHistoryLimit == nil || pod.ServiceAccountName != exportSA || len(pod.Containers) != 1 {
			t.Fatalf("the CronJob lacks concurrencyPolicy Forbid, a starting deadline, a backoff limit or history limits, or does not run one container as %s: %+v", exportSA, s)
		}
		c := pod.Containers[0]
		if c.Image != "podtoip-controller:dev" || !slices.Equal(c.Command, []string{"/kubectl-ptp"}) {
			t.Errorf("the export runs %v of %s, want /kubectl-ptp of the controller's image podtoip-controller:dev", c.Command, c.Image)
		}
		if got := strings.Join(c.Args, " "); got != "export -o parquet --dir /export --state /export/state.json --cluster-name $(CLUSTER_NAME)" {
			t.Errorf("the export's args are %q", got)
		}
		if c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
			t.Errorf("the export's container has no memory request or limit: %+v", c.Resources)
		}
		// The Job's pod in the namespace that enforces "restricted".
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "psa-check-", Labels: job.Template.Labels}, Spec: pod}
		dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
		if _, err := own.Kube.CoreV1().Pods(framework.DeployNamespace).Create(t.Context(), p, dry); err != nil {
			t.Errorf("the export's pod is rejected in a restricted namespace: %v", err)
		}
		// Not one of the controller's pods: its Service, PodDisruptionBudget
		// and NetworkPolicy select those by this label.
		if job.Template.Labels["app.kubernetes.io/name"] == "podtoip-controller" {
			t.Errorf("the export's pods carry the controller's name label: %v", job.Template.Labels)
		}
	})

	// A history to export: a hold that ended, and one that lasts.
	p := env.StartController(t)
	framework.WaitReady(t, p)
	ns := env.NewNamespace(t)
	env.RunningPod(t, ns, "gone", []string{"10.244.190.1"})
	env.RunningPod(t, ns, "stays", []string{"10.244.190.2"})
	env.WaitHistory(t, "10.244.190.2", "stays' hold", func(h *framework.History) bool { _, ok := openHold(h, "stays"); return ok })
	env.DeletePod(t, ns, "gone", true)
	gone := env.WaitHistory(t, "10.244.190.1", "gone's hold closed", func(h *framework.History) bool { _, ok := closedHold(h, "gone"); return ok })
	hold, _ := closedHold(gone, "gone")
	waitCoveredPast(t, own, hold.To.Time)

	cm := exportConfigMap(t, objs)
	dir := t.TempDir()
	args := exportArgs(t, cronJob, cm, dir)

	t.Run("the export runs as its ServiceAccount", func(t *testing.T) {
		out, errOut, code := env.KubectlPTP(t, append(slices.Clone(args), asExport()...)...)
		if code != 0 || strings.Contains(errOut, "forbidden") {
			t.Fatalf("kubectl ptp %s as %s: exit %d\n%s%s", strings.Join(args, " "), exportUser, code, out, errOut)
		}
		want := []string{"coverage-" + exportCluster + "-first.parquet", "gaps-" + exportCluster + "-first.parquet", "holds-" + exportCluster + "-first.parquet", "state.json"}
		if got := dirFiles(t, dir); !slices.Equal(got, want) {
			t.Fatalf("the export wrote %v, want %v", got, want)
		}
		for _, f := range want {
			if st, err := os.Stat(filepath.Join(dir, f)); err == nil {
				t.Logf("%s: %d bytes", f, st.Size())
			}
		}
		// The ended hold is in the files, the lasting one not yet: enrich
		// reads them back as it would the cluster.
		if got := enrichAt(t, env, dir, "first", "10.244.190.1", hold.From.Add(hold.To.Sub(hold.From.Time)/2)); !strings.Contains(got, `"gone"`) {
			t.Errorf("enrich from the export does not name gone inside its hold:\n%s", got)
		}
	})

	t.Run("the export runs in a pod with in-cluster configuration", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Fatal("this test mounts a ServiceAccount volume in a private mount namespace and must run as root")
		}
		if _, err := exec.LookPath("unshare"); err != nil {
			t.Fatal("unshare (util-linux) is required: ", err)
		}
		// An hour later: another hold ended since the first run.
		env.DeletePod(t, ns, "stays", true)
		stays := env.WaitHistory(t, "10.244.190.2", "stays' hold closed", func(h *framework.History) bool { _, ok := closedHold(h, "stays"); return ok })
		h, _ := closedHold(stays, "stays")
		waitCoveredPast(t, own, h.To.Time)
		before := dirFiles(t, dir)

		code, out := runInPod(t, own, suite.PluginBin, args)
		if code != 0 || strings.Contains(out, "forbidden") {
			t.Fatalf("the CronJob's command in a pod: exit %d\n%s", code, out)
		}
		var written []string
		for _, f := range dirFiles(t, dir) {
			if !slices.Contains(before, f) {
				written = append(written, f)
			}
		}
		if len(written) != 3 || !strings.HasPrefix(written[2], "holds-"+exportCluster+"-after-") {
			t.Fatalf("the second run wrote %v, want the three tables of the time after the first run", written)
		}
		suffix := strings.TrimSuffix(strings.TrimPrefix(written[2], "holds-"+exportCluster+"-"), ".parquet")
		if got := enrichAt(t, env, dir, suffix, "10.244.190.2", h.From.Add(h.To.Sub(h.From.Time)/2)); !strings.Contains(got, `"stays"`) {
			t.Errorf("enrich from the second run's files does not name stays inside its hold:\n%s", got)
		}
	})

	t.Run("the ServiceAccount may do nothing else", func(t *testing.T) {
		// kubectl auth can-i, as an operator would ask it.
		for _, c := range []struct {
			verb, resource string
			allowed        bool
		}{
			{"list", "iphistories.example.com", true},
			{"get", "iphistorycoverages.example.com", true},
			{"get", "iphistories.example.com", false},
			{"watch", "iphistories.example.com", false},
			{"create", "iphistories.example.com", false},
			{"patch", "iphistories.example.com", false},
			{"update", "iphistories.example.com", false},
			{"delete", "iphistories.example.com", false},
			{"update", "iphistorycoverages.example.com", false},
			{"list", "podtoips.example.com", false},
			{"get", "pods", false},
			{"list", "pods", false},
			{"get", "secrets", false},
			{"list", "secrets", false},
			{"create", "serviceaccounts/token", false},
			{"create", "pods", false},
		} {
			args := append([]string{"auth", "can-i", c.verb, c.resource, "--all-namespaces"}, asExport()...)
			out, err := own.Kubectl(t.Context(), args...)
			// The answer is the last line (a warning may come first).
			lines := strings.Split(strings.TrimSpace(out), "\n")
			got := strings.TrimSpace(lines[len(lines)-1])
			if want := map[bool]string{true: "yes", false: "no"}[c.allowed]; got != want || (err == nil) != c.allowed {
				t.Errorf("kubectl auth can-i %s %s as %s: %q (%v), want %q", c.verb, c.resource, exportUser, out, err, want)
			}
		}

		// The API server's own list of the ServiceAccount's rules: past what
		// every ServiceAccount has, exactly the two grants.
		for _, where := range []string{framework.DeployNamespace, "default"} {
			everyone := ruleSet(t, own, "system:serviceaccount:default:e2e-rbac-baseline",
				[]string{"system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"}, where)
			got := ruleSet(t, own, exportUser, exportGroups, where)
			for r := range got {
				if !everyone[r] && !slices.Contains(exportGrants[r.resource], r.verb) {
					t.Errorf("the export's ServiceAccount may %s %s in %s (name %q), which it does not need", r.verb, r.resource, where, r.name)
				}
			}
			for resource, verbs := range exportGrants {
				for _, v := range verbs {
					if !got[ruleKey{v, resource, ""}] {
						t.Errorf("the export's ServiceAccount may not %s %s in %s", v, resource, where)
					}
				}
			}
		}
	})

	t.Run("each rule is needed", func(t *testing.T) {
		role, err := own.Kube.RbacV1().ClusterRoles().Get(t.Context(), exportSA, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(role.Rules) != 2 {
			t.Fatalf("ClusterRole %s has %d rules, want 2: %+v", exportSA, len(role.Rules), role.Rules)
		}
		shipped := role.DeepCopy()
		t.Cleanup(func() {
			r, err := own.Kube.RbacV1().ClusterRoles().Get(context.Background(), exportSA, metav1.GetOptions{})
			if err == nil {
				r.Rules = shipped.Rules
				_, err = own.Kube.RbacV1().ClusterRoles().Update(context.Background(), r, metav1.UpdateOptions{})
			}
			if err != nil {
				t.Errorf("restoring ClusterRole %s: %v", exportSA, err)
			}
		})
		for i, rule := range shipped.Rules {
			r, err := own.Kube.RbacV1().ClusterRoles().Get(t.Context(), exportSA, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			r.Rules = slices.Delete(slices.Clone(shipped.Rules), i, i+1)
			if _, err := own.Kube.RbacV1().ClusterRoles().Update(t.Context(), r, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			// A first run, with a state of its own: it must fail, once the
			// API server's authorizer has the role without the rule.
			fresh := t.TempDir()
			args := exportArgs(t, cronJob, cm, fresh)
			var out, errOut string
			var code int
			if err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
				out, errOut, code = env.KubectlPTP(t, append(slices.Clone(args), asExport()...)...)
				return code != 0, nil
			}); err != nil {
				t.Errorf("without the rule %v, the export still succeeds: exit %d\n%s%s", rule, code, out, errOut)
				continue
			}
			if files := dirFiles(t, fresh); len(files) != 0 {
				t.Errorf("without the rule %v, the failed export left %v", rule, files)
			}
			t.Logf("without %v %v: exit %d: %s", rule.Verbs, rule.Resources, code, strings.TrimSpace(errOut))
		}
	})
}

// renderExportOverlay renders, with kubectl's kustomize, the overlay of
// docs/export.md: artifacts/ with the export component, and the ConfigMap
// that names the cluster. The overlay sits beside a copy of artifacts/, as
// a user's would beside theirs.
func renderExportOverlay(t *testing.T) []unstructured.Unstructured {
	t.Helper()
	root := t.TempDir()
	src := filepath.Join(cp.Root, "artifacts")
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		to := filepath.Join(root, "artifacts", rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(to, b, 0o644)
	})
	if err != nil {
		t.Fatalf("copying artifacts/: %v", err)
	}
	overlay := `resources:
  - ../artifacts
components:
  - ../artifacts/export
configMapGenerator:
  - name: podtoip-export
    namespace: podtoip-system
    literals:
      - clusterName=` + exportCluster + "\n"
	if err := os.MkdirAll(filepath.Join(root, "overlay"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "overlay", "kustomization.yaml"), []byte(overlay), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(framework.CtxFor(t, time.Minute), "kubectl", "kustomize", filepath.Join(root, "overlay")).Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			t.Fatalf("kubectl kustomize of the export overlay: %v\n%s", err, exit.Stderr)
		}
		t.Fatalf("kubectl kustomize of the export overlay: %v", err)
	}
	return framework.Objects(t, string(out))
}

// exportConfigMap returns the data of the ConfigMap the CronJob's
// container reads its variables from.
func exportConfigMap(t *testing.T, objs []unstructured.Unstructured) map[string]string {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == "ConfigMap" && strings.HasPrefix(o.GetName(), exportSA+"-") {
			data, _, _ := unstructured.NestedStringMap(o.Object, "data")
			return data
		}
	}
	t.Fatal("the overlay renders no ConfigMap podtoip-export")
	return nil
}

// exportArgs returns the CronJob's container args as its pod runs them:
// $(VAR) replaced by the variable's value from the ConfigMap, as the
// kubelet does, and the volume's mount point /export by dir.
func exportArgs(t *testing.T, cj *batchv1.CronJob, cm map[string]string, dir string) []string {
	t.Helper()
	c := cj.Spec.JobTemplate.Spec.Template.Spec.Containers[0]
	vars := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil:
			v, ok := cm[e.ValueFrom.ConfigMapKeyRef.Key]
			if !ok {
				t.Fatalf("the ConfigMap has no key %s for $%s", e.ValueFrom.ConfigMapKeyRef.Key, e.Name)
			}
			vars[e.Name] = v
		default:
			vars[e.Name] = e.Value
		}
	}
	if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath != "/export" {
		t.Fatalf("the export's container mounts %+v, want its volume at /export", c.VolumeMounts)
	}
	var args []string
	for _, a := range c.Args {
		for k, v := range vars {
			a = strings.ReplaceAll(a, "$("+k+")", v)
		}
		if a == "/export" || strings.HasPrefix(a, "/export/") {
			a = dir + strings.TrimPrefix(a, "/export")
		}
		args = append(args, a)
	}
	return args
}

// asExport are kubectl's flags to act as the export's ServiceAccount, with
// the groups its token has.
func asExport() []string {
	out := []string{"--as", exportUser}
	for _, g := range exportGroups {
		out = append(out, "--as-group", g)
	}
	return out
}

// dirFiles lists the names in dir, sorted. A temporary file (a dot first)
// fails the test: a run that ended leaves none.
func dirFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("the export left the temporary file %s", e.Name())
		}
		out = append(out, e.Name())
	}
	slices.Sort(out)
	return out
}

// enrichAt runs kubectl ptp enrich on one record of addr at at, from the
// three files of the run named suffix in dir, and returns its output.
func enrichAt(t *testing.T, env *framework.Env, dir, suffix, addr string, at time.Time) string {
	t.Helper()
	records := filepath.Join(t.TempDir(), "flows.jsonl")
	if err := os.WriteFile(records, fmt.Appendf(nil, `{"ts":%q,"src":%q}`+"\n", at.UTC().Format(time.RFC3339Nano), addr), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"enrich", "--format", "jsonl", "--time-field", "ts", "--address-fields", "src", "--skew", "0"}
	for _, table := range []string{"coverage", "gaps", "holds"} {
		args = append(args, "--history-file", filepath.Join(dir, table+"-"+exportCluster+"-"+suffix+".parquet"))
	}
	out, errOut, code := env.KubectlPTP(t, append(args, records)...)
	if code != 0 {
		t.Fatalf("kubectl ptp %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// waitCoveredPast waits until the coverage of all namespaces vouches past
// end: an incremental export writes a hold once the coverage has passed
// its end.
func waitCoveredPast(t *testing.T, cp *controlplane.ControlPlane, end time.Time) {
	t.Helper()
	var last string
	if err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		out, err := cp.Kubectl(ctx, "get", "iphc", "all", "-o", "jsonpath={.intervals[-1:].to}")
		last = out
		if err != nil {
			return false, nil
		}
		to, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(out))
		return err == nil && to.After(end), nil
	}); err != nil {
		t.Fatalf("the coverage of all namespaces does not pass %s after a minute (last: %q): %v", end.UTC().Format(time.RFC3339Nano), last, err)
	}
}

// runInPod runs the plugin with args as the CronJob's pod would: in a
// private mount namespace where the export ServiceAccount's token, the
// cluster's CA and the namespace are where the kubelet mounts them, with
// the API server's address in KUBERNETES_SERVICE_HOST and _PORT, and no
// kubeconfig. It returns the exit code and the combined output.
func runInPod(t *testing.T, own *controlplane.ControlPlane, plugin string, args []string) (int, string) {
	t.Helper()
	tr, err := own.Kube.CoreV1().ServiceAccounts(framework.DeployNamespace).CreateToken(t.Context(), exportSA,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	admin, err := clientcmd.LoadFromFile(own.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	var caData []byte
	for _, c := range admin.Clusters {
		caData = c.CertificateAuthorityData
	}
	sa := t.TempDir()
	for name, content := range map[string][]byte{"token": []byte(tr.Status.Token), "ca.crt": caData, "namespace": []byte(framework.DeployNamespace)} {
		if err := os.WriteFile(filepath.Join(sa, name), content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	host, port, _ := strings.Cut(strings.TrimPrefix(own.Host(), "https://"), ":")
	script := fmt.Sprintf(`set -e
mount -t tmpfs tmpfs /var/run
mkdir -p /var/run/secrets/kubernetes.io/serviceaccount
mount --bind %q /var/run/secrets/kubernetes.io/serviceaccount
exec %q "$@"`, sa, plugin)
	cmd := exec.CommandContext(framework.CtxFor(t, time.Minute), "unshare", append([]string{"--mount", "--propagation", "private", "sh", "-c", script, "kubectl-ptp"}, args...)...)
	// The image's environment, and what the kubelet adds: no KUBECONFIG,
	// no HOME with a kubeconfig in it.
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + t.TempDir(),
		"KUBERNETES_SERVICE_HOST=" + host, "KUBERNETES_SERVICE_PORT=" + port}
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &exit):
		return exit.ExitCode(), string(out)
	}
	t.Fatalf("running the plugin in a private mount namespace: %v\n%s", err, out)
	return 0, ""
}

// ruleKey is one verb on one resource (resource.group, as kubectl spells
// it), in a namespace, for one name ("" for any).
type ruleKey struct{ verb, resource, name string }

// ruleSet returns the rules the API server lists for user in ns
// (SelfSubjectRulesReview, asked as the user).
func ruleSet(t *testing.T, own *controlplane.ControlPlane, user string, groups []string, ns string) map[ruleKey]bool {
	t.Helper()
	cfg := rest.CopyConfig(own.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	review := &authorizationv1.SelfSubjectRulesReview{Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: ns}}
	res, err := kube.AuthorizationV1().SelfSubjectRulesReviews().Create(t.Context(), review, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status.Incomplete {
		t.Fatalf("the rules of %s in %s are incomplete: %s", user, ns, res.Status.EvaluationError)
	}
	set := map[ruleKey]bool{}
	for _, r := range res.Status.ResourceRules {
		names := r.ResourceNames
		if len(names) == 0 {
			names = []string{""}
		}
		for _, v := range r.Verbs {
			for _, g := range r.APIGroups {
				for _, rs := range r.Resources {
					if g != "" {
						resource, sub, ok := strings.Cut(rs, "/")
						rs = resource + "." + g
						if ok {
							rs += "/" + sub
						}
					}
					for _, n := range names {
						set[ruleKey{v, rs, n}] = true
					}
				}
			}
		}
	}
	for _, r := range res.Status.NonResourceRules {
		for _, v := range r.Verbs {
			for _, u := range r.NonResourceURLs {
				set[ruleKey{v, "URL " + u, ""}] = true
			}
		}
	}
	return set
}
