package e2e

import (
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"example.com/podtoip-controller/e2e/controlplane"
	"example.com/podtoip-controller/e2e/framework"
)

const (
	saName = "podtoip-controller"
	saUser = "system:serviceaccount:" + framework.DeployNamespace + ":" + saName
)

// policyNames are the shipped admission policies and their bindings.
var policyNames = []string{"podtoip-controller", "podtoip-controller-history"}

var saGroups = []string{"system:serviceaccounts", "system:serviceaccounts:" + framework.DeployNamespace, "system:authenticated"}

// TestDeployManifests installs the shipped manifests as users do, from
// each source in turn: the Helm chart (charts/podtoip-controller, rendered
// with its default values), a release's install.yaml (as `make dist`
// writes it) and the kustomization (kubectl apply -k artifacts/). For each, it checks that the pod template passes the
// "restricted" Pod Security Standard, that the RBAC is exactly what the
// controller needs, and that the controller works both as the
// ServiceAccount and with in-cluster config.
func TestDeployManifests(t *testing.T) {
	// The chart first: the kustomization is applied last, over it, so the
	// tests after this one find what `kubectl apply -k artifacts/` installs.
	sources := []struct {
		name      string
		manifests []string // what kubectl apply is given
	}{
		{"helm chart", []string{"-f", renderChart(t)}},
		{"install.yaml", []string{"-f", renderRelease(t, "./dist", "-install-yaml", "-root", cp.Root, "-version", "v0.0.0-test", "-image", "podtoip-controller:v0.0.0-test")}},
		{"kustomize", []string{"-k", filepath.Join(cp.Root, "artifacts")}},
	}
	for _, s := range sources {
		t.Run(s.name, func(t *testing.T) { testDeploy(t, s.manifests) })
	}
}

// renderChart renders the Helm chart with its default values, as `helm
// template -n podtoip-system` does, with Helm's own packages
// (hack/release), and returns the file it wrote them to. The Namespace is
// rendered too (createNamespace), as kubectl apply -f needs it, where helm
// install would make it.
func renderChart(t *testing.T) string {
	return renderRelease(t, "./chart", "render", "-chart", filepath.Join(cp.Root, "charts", "podtoip-controller"),
		"-namespace", framework.DeployNamespace, "-set", "createNamespace=true")
}

// renderRelease runs the program pkg of hack/release with args, and
// returns the file it wrote what the program printed to.
func renderRelease(t *testing.T, pkg string, args ...string) string {
	out := goCmd(t, filepath.Join(cp.Root, "hack", "release"), append([]string{"run", pkg}, args...)...)
	path := filepath.Join(t.TempDir(), "manifests.yaml")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// testDeploy applies the manifests kubectl apply is given, then checks
// them and the controller running with them.
func testDeploy(t *testing.T, manifests []string) {
	if out, err := cp.Kubectl(t.Context(), append([]string{"apply"}, manifests...)...); err != nil {
		t.Fatalf("kubectl apply %s: %v\n%s", strings.Join(manifests, " "), err, out)
	}
	// The admission policy applies to every identity; the other tests run
	// their controllers as admin. Here the controller runs as the shipped
	// ServiceAccount, with the policy on.
	removePolicyAtEnd(t, cp)
	if out, err := cp.Kubectl(t.Context(), append([]string{"apply", "--dry-run=server"}, manifests...)...); err != nil {
		t.Fatalf("kubectl apply --dry-run=server %s: %v\n%s", strings.Join(manifests, " "), err, out)
	}

	t.Run("pod template passes the restricted Pod Security Standard", func(t *testing.T) {
		ns, err := cp.Kube.CoreV1().Namespaces().Get(t.Context(), framework.DeployNamespace, metav1.GetOptions{})
		if err != nil || ns.Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
			t.Fatalf("namespace %s is not enforcing restricted: %v %v", framework.DeployNamespace, ns.Labels, err)
		}
		dep, err := cp.Kube.AppsV1().Deployments(framework.DeployNamespace).Get(t.Context(), "podtoip-controller", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if *dep.Spec.Replicas != 2 || !strings.Contains(strings.Join(dep.Spec.Template.Spec.Containers[0].Args, " "), "--leader-elect") {
			t.Errorf("deployment: replicas %d, args %v", *dep.Spec.Replicas, dep.Spec.Template.Spec.Containers[0].Args)
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "psa-check-", Labels: dep.Spec.Template.Labels}, Spec: dep.Spec.Template.Spec}
		dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
		if _, err := cp.Kube.CoreV1().Pods(framework.DeployNamespace).Create(t.Context(), pod, dry); err != nil {
			t.Errorf("the Deployment's pod is rejected in a restricted namespace: %v", err)
		}
		// The check has teeth: a pod that may escalate is rejected there.
		bad := pod.DeepCopy()
		bad.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation = nil
		if _, err := cp.Kube.CoreV1().Pods(framework.DeployNamespace).Create(t.Context(), bad, dry); err == nil || !strings.Contains(err.Error(), "restricted") {
			t.Errorf("a non-compliant pod was not rejected by Pod Security admission: %v", err)
		}
	})

	t.Run("availability, resources, metrics Service and NetworkPolicy are as the README says", func(t *testing.T) {
		checkDeploymentAsDocumented(t)
	})

	t.Run("RBAC grants exactly what is needed", func(t *testing.T) {
		// What the controller needs (see artifacts/rbac.yaml); every check
		// below is allowed exactly when one of these grants covers it. An
		// empty ns means any namespace or cluster-wide; nil names, any name.
		type grant struct {
			verbs    []string
			resource string // as kubectl spells it: resource[.group][/subresource]
			ns       string
			names    []string
		}
		allowed := []grant{
			// No get: the controller reads pods and mirrors only through
			// its informers (list and watch), and the history's view of the
			// pods' resourceVersion is a list of one.
			{[]string{"list", "watch"}, "pods", "", nil},
			// No patch: it updates whole objects. No get, as for pods.
			{[]string{"list", "watch", "create", "update", "patch", "delete"}, "podtoips.example.com", "", nil},
			// No watch: only the controller writes them; patch for one hold at a time.
			{[]string{"get", "list", "create", "update", "patch", "delete"}, "iphistories.example.com", "", nil},
			// How far the history is proven: its one object, read and written.
			{[]string{"get", "create", "update"}, "iphistorycoverages.example.com", "", nil},
			{[]string{"create", "patch"}, "events", "", nil},
			// The address conflict checks read Node addresses and the
			// IPAddresses of Service ClusterIPs, through informers: no get,
			// and nothing of Services themselves.
			{[]string{"list", "watch"}, "nodes", "", nil},
			{[]string{"list", "watch"}, "ipaddresses.networking.k8s.io", "", nil},
			// Leader election in its own namespace. Create cannot be limited
			// to a name; reads and writes touch only its own Lease.
			{[]string{"create"}, "leases.coordination.k8s.io", framework.DeployNamespace, nil},
			{[]string{"get", "update"}, "leases.coordination.k8s.io", framework.DeployNamespace, []string{"podtoip-controller"}},
			// The metrics endpoint has the API server review each scrape's
			// token and permission.
			{[]string{"create"}, "tokenreviews.authentication.k8s.io", "", nil},
			{[]string{"create"}, "subjectaccessreviews.authorization.k8s.io", "", nil},
			// Whether its admission policies are in force: a watch of the
			// policies and bindings by their label, whatever an overlay
			// names them, which resourceNames cannot limit.
			{[]string{"list", "watch"}, "validatingadmissionpolicies.admissionregistration.k8s.io", "", nil},
			{[]string{"list", "watch"}, "validatingadmissionpolicybindings.admissionregistration.k8s.io", "", nil},
		}
		want := func(verb, resource, ns, name string) bool {
			for _, g := range allowed {
				if slices.Contains(g.verbs, verb) && g.resource == resource &&
					(g.ns == "" || g.ns == ns) && (g.names == nil || slices.Contains(g.names, name)) {
					return true
				}
			}
			return false
		}

		// Every verb on every resource the controller touches or could be
		// tempted to, at cluster scope, in its own namespace and in another,
		// so a broader grant anywhere in the matrix fails the test.
		verbs := []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}
		resources := []string{
			// pods/exec, pods/attach and pods/ephemeralcontainers in its
			// namespace would run code as whoever a pod there runs as.
			"pods", "pods/status", "pods/log", "pods/exec", "pods/attach", "pods/ephemeralcontainers", "pods/eviction",
			"podtoips.example.com", "podtoips.example.com/status", "iphistories.example.com", "iphistorycoverages.example.com",
			"events", "events.events.k8s.io", "leases.coordination.k8s.io",
			"secrets", "configmaps", "nodes", "serviceaccounts/token",
			"customresourcedefinitions.apiextensions.k8s.io",
			"ipaddresses.networking.k8s.io", "servicecidrs.networking.k8s.io", "services",
			"tokenreviews.authentication.k8s.io", "subjectaccessreviews.authorization.k8s.io",
			"localsubjectaccessreviews.authorization.k8s.io", "validatingadmissionpolicies.admissionregistration.k8s.io",
			"validatingadmissionpolicybindings.admissionregistration.k8s.io",
		}
		type check struct{ verb, resource, ns, name string }
		var checks []check
		for _, r := range resources {
			// Named checks catch grants limited by resourceNames, which an
			// unnamed request never matches.
			names := []string{""}
			switch r {
			case "leases.coordination.k8s.io":
				names = []string{"podtoip-controller", "other-lease", ""}
			case "serviceaccounts/token":
				names = []string{saName, ""} // minting its own tokens
			case "validatingadmissionpolicies.admissionregistration.k8s.io", "validatingadmissionpolicybindings.admissionregistration.k8s.io":
				names = append(slices.Clone(policyNames), "other-policy", "")
			}
			for _, v := range verbs {
				for _, ns := range []string{"", framework.DeployNamespace, "default"} {
					for _, name := range names {
						checks = append(checks, check{v, r, ns, name})
					}
				}
			}
		}
		allowedCount := 0
		for _, c := range checks {
			resource, sub, _ := strings.Cut(c.resource, "/")
			resource, group, _ := strings.Cut(resource, ".")
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: saUser, Groups: saGroups,
				ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: c.verb, Group: group, Resource: resource, Subresource: sub, Namespace: c.ns, Name: c.name},
			}}
			res, err := cp.Kube.AuthorizationV1().SubjectAccessReviews().Create(t.Context(), sar, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			w := want(c.verb, c.resource, c.ns, c.name)
			if res.Status.Allowed != w {
				t.Errorf("%s %s ns=%q name=%q: allowed=%v, want %v", c.verb, c.resource, c.ns, c.name, res.Status.Allowed, w)
			}
			if w {
				allowedCount++
			}
		}
		t.Logf("%d access checks, %d of them allowed", len(checks), allowedCount)

		// The matrix covers the resources named above. The API server's list
		// of the ServiceAccount's rules covers all others, and any name: past
		// what the default policy gives every ServiceAccount (discovery,
		// issuer keys, trust bundles), each rule must be in the table.
		rules := func(user string, groups []string, ns string) map[check]bool {
			cfg := rest.CopyConfig(cp.Config)
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
				t.Fatalf("rules of %s in %s are incomplete: %s", user, ns, res.Status.EvaluationError)
			}
			set := map[check]bool{}
			for _, r := range res.Status.ResourceRules {
				names := r.ResourceNames
				if len(names) == 0 {
					names = []string{""}
				}
				for _, v := range r.Verbs {
					for _, g := range r.APIGroups {
						for _, rs := range r.Resources {
							if resource, sub, ok := strings.Cut(rs, "/"); g != "" {
								rs = resource + "." + g
								if ok {
									rs += "/" + sub
								}
							}
							for _, n := range names {
								set[check{v, rs, ns, n}] = true
							}
						}
					}
				}
			}
			for _, r := range res.Status.NonResourceRules {
				for _, v := range r.Verbs {
					for _, u := range r.NonResourceURLs {
						set[check{v, "URL " + u, ns, ""}] = true
					}
				}
			}
			return set
		}
		for _, ns := range []string{framework.DeployNamespace, "default"} {
			everyone := rules("system:serviceaccount:default:e2e-rbac-baseline",
				[]string{"system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"}, ns)
			for c := range rules(saUser, saGroups, ns) {
				if !everyone[c] && !want(c.verb, c.resource, c.ns, c.name) {
					t.Errorf("the ServiceAccount may %s %s in %s (name %q), which it does not need", c.verb, c.resource, c.ns, c.name)
				}
			}
		}
	})

	// A token for the ServiceAccount, from the TokenRequest API.
	tr, err := cp.Kube.CoreV1().ServiceAccounts(framework.DeployNamespace).CreateToken(t.Context(), saName,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	token := tr.Status.Token
	admin, err := clientcmd.LoadFromFile(cp.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	var caData []byte
	for _, c := range admin.Clusters {
		caData = c.CertificateAuthorityData
	}

	t.Run("the ServiceAccount's permissions are sufficient", func(t *testing.T) {
		path := suite.TokenKubeconfig(t, token)
		ns := suite.NewNamespace(t)
		p := suite.StartControllerAs(t, path, "--leader-elect", "--leader-elect-resource-namespace", framework.DeployNamespace, "--startup-timeout=20s")
		if err := p.WaitForOutput(framework.CtxFor(t, 30e9), "Became the leader"); err != nil {
			t.Fatalf("%v\n%s", err, p.Output())
		}
		// The README's liveness endpoints: /healthz, which the Deployment's
		// probe uses, and /livez, the same check under the name newer
		// Kubernetes components use; both healthy on a working leader.
		framework.WaitProbe(t, p, "/healthz", http.StatusOK, "ok")
		framework.WaitProbe(t, p, "/livez", http.StatusOK, "ok")
		suite.RunningPod(t, ns, "sa-0", []string{"10.244.40.1"})
		suite.RunningPod(t, ns, "sa-1", []string{"10.244.40.2", "fd00::40:2"})
		suite.WaitMirrorIPs(t, ns, "sa-0", "10.244.40.1")
		suite.WaitMirrorIPs(t, ns, "sa-1", "10.244.40.2", "fd00::40:2")
		suite.DeletePod(t, ns, "sa-0", false)
		suite.WaitNoMirror(t, ns, "sa-0")
		if code, err := p.Stop(30e9); err != nil || code != 0 {
			t.Fatalf("stop: exit %d, %v", code, err)
		}
		if strings.Contains(p.Output(), "forbidden") {
			t.Errorf("the ServiceAccount hit a forbidden error:\n%s", p.Output())
		}
	})

	t.Run("in-cluster configuration", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Fatal("this test mounts a ServiceAccount volume in a private mount namespace and must run as root")
		}
		if _, err := exec.LookPath("unshare"); err != nil {
			t.Fatal("unshare (util-linux) is required: ", err)
		}
		sa := t.TempDir()
		for name, content := range map[string][]byte{"token": []byte(token), "ca.crt": caData, "namespace": []byte(framework.DeployNamespace)} {
			if err := os.WriteFile(filepath.Join(sa, name), content, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		host, port, _ := strings.Cut(strings.TrimPrefix(cp.Host(), "https://"), ":")
		script := fmt.Sprintf(`set -e
mount -t tmpfs tmpfs /var/run
mkdir -p /var/run/secrets/kubernetes.io/serviceaccount
mount --bind %q /var/run/secrets/kubernetes.io/serviceaccount
exec %q "$@"`, sa, suite.ControllerBin)
		// No --kubeconfig and no KUBECONFIG: exactly what a pod sees.
		env := []string{"KUBERNETES_SERVICE_HOST=" + host, "KUBERNETES_SERVICE_PORT=" + port, "KUBECONFIG="}
		ns := suite.NewNamespace(t)
		p, err := controlplane.StartProcess("unshare", env, filepath.Join(suite.Artifacts, strings.NewReplacer("/", "_", " ", "-").Replace(t.Name())+".log"),
			"--mount", "--propagation", "private", "sh", "-c", script, "podtoip-controller",
			"--leader-elect", "-v=2", "--metrics-bind-address=0", "--health-probe-bind-address=127.0.0.1:0", "--startup-timeout=20s")
		if err != nil {
			t.Fatal(err)
		}
		defer p.Stop(30e9)
		if err := p.WaitForOutput(framework.CtxFor(t, 30e9), "Became the leader"); err != nil {
			t.Fatalf("%v\n%s", err, p.Output())
		}
		out := p.Output()
		if !strings.Contains(out, `config="in-cluster ServiceAccount"`) || !strings.Contains(out, `server="https://`+host+":"+port+`"`) || !strings.Contains(out, `lease="`+framework.DeployNamespace+`/podtoip-controller"`) {
			t.Errorf("did not use the in-cluster server and namespace:\n%s", out)
		}
		suite.RunningPod(t, ns, "ic-0", []string{"10.244.41.1"})
		suite.WaitMirrorIPs(t, ns, "ic-0", "10.244.41.1")
		if code, err := p.Stop(30e9); err != nil || code != 0 {
			t.Fatalf("stop: exit %d, %v\n%s", code, err, p.Output())
		}
	})
}

// checkDeploymentAsDocumented reads back what `kubectl apply -k artifacts/`
// created and compares it with what README.md ("Deploy to a cluster") says
// about it, so that neither can drift from the other unnoticed.
func checkDeploymentAsDocumented(t *testing.T) {
	ctx := t.Context()
	readme, err := os.ReadFile(filepath.Join(cp.Root, "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	// One line: the README wraps its sentences anywhere.
	doc := strings.Join(strings.Fields(string(readme)), " ")

	dep, err := cp.Kube.AppsV1().Deployments(framework.DeployNamespace).Get(ctx, "podtoip-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pods := labels.Set(dep.Spec.Template.Labels)
	spec := dep.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("want one container, got %d", len(spec.Containers))
	}
	c := spec.Containers[0]
	// selects reports whether sel picks exactly the Deployment's pods: it
	// matches their labels and is the Deployment's own selector.
	selects := func(sel *metav1.LabelSelector) bool {
		s, err := metav1.LabelSelectorAsSelector(sel)
		return err == nil && !s.Empty() && s.Matches(pods) && apiequality.Semantic.DeepEqual(sel, dep.Spec.Selector)
	}
	// containerPort resolves a Service or NetworkPolicy port (a number or
	// a container port's name) to the container's port number.
	containerPort := func(p intstr.IntOrString) (int32, string) {
		for _, port := range c.Ports {
			if (p.Type == intstr.String && port.Name == p.StrVal) || (p.Type == intstr.Int && port.ContainerPort == p.IntVal) {
				return port.ContainerPort, port.Name
			}
		}
		return 0, ""
	}
	metricsPort, _ := containerPort(intstr.FromString("metrics"))
	probesPort, _ := containerPort(intstr.FromString("probes"))
	args := strings.Join(c.Args, " ")
	if metricsPort == 0 || !strings.Contains(args, fmt.Sprintf("--metrics-bind-address=:%d", metricsPort)) ||
		probesPort == 0 || !strings.Contains(args, fmt.Sprintf("--health-probe-bind-address=:%d", probesPort)) {
		t.Errorf("the container's ports %v are not where its arguments %q serve metrics and probes", c.Ports, args)
	}

	t.Run("replicas spread across nodes, but schedule on one", func(t *testing.T) {
		var found bool
		for _, tsc := range spec.TopologySpreadConstraints {
			if tsc.TopologyKey != "kubernetes.io/hostname" {
				continue
			}
			found = true
			if tsc.MaxSkew != 1 || tsc.WhenUnsatisfiable != corev1.ScheduleAnyway || !selects(tsc.LabelSelector) {
				t.Errorf("spread over nodes: maxSkew %d, whenUnsatisfiable %s, selector %v; want 1, ScheduleAnyway (one node must still do), the Deployment's pods",
					tsc.MaxSkew, tsc.WhenUnsatisfiable, tsc.LabelSelector)
			}
		}
		if !found {
			t.Errorf("no topology spread constraint over kubernetes.io/hostname: %v", spec.TopologySpreadConstraints)
		}
	})

	t.Run("a drain evicts one replica at a time", func(t *testing.T) {
		pdb, err := cp.Kube.PolicyV1().PodDisruptionBudgets(framework.DeployNamespace).Get(ctx, "podtoip-controller", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !selects(pdb.Spec.Selector) {
			t.Errorf("the PodDisruptionBudget selects %v, not the Deployment's pods %v", pdb.Spec.Selector, dep.Spec.Selector)
		}
		// With the Deployment's replicas all healthy, the disruption
		// controller allows replicas minus the healthy pods it requires.
		replicas := int(*dep.Spec.Replicas)
		mustHave := 0
		switch {
		case pdb.Spec.MinAvailable != nil && pdb.Spec.MaxUnavailable == nil:
			mustHave, err = intstr.GetScaledValueFromIntOrPercent(pdb.Spec.MinAvailable, replicas, true)
		case pdb.Spec.MaxUnavailable != nil && pdb.Spec.MinAvailable == nil:
			var maxUnavailable int
			maxUnavailable, err = intstr.GetScaledValueFromIntOrPercent(pdb.Spec.MaxUnavailable, replicas, true)
			mustHave = replicas - maxUnavailable
		default:
			t.Fatalf("want exactly one of minAvailable and maxUnavailable: %+v", pdb.Spec)
		}
		if err != nil {
			t.Fatal(err)
		}
		if allowed := replicas - mustHave; allowed != 1 {
			t.Errorf("the PodDisruptionBudget allows %d of %d replicas to be evicted at once, want 1", allowed, replicas)
		}
		// The choice the manifest explains: still one at a time if the
		// Deployment is scaled, and no blocked drains at one replica.
		if mu := pdb.Spec.MaxUnavailable; mu == nil || *mu != intstr.FromInt32(1) {
			t.Errorf("maxUnavailable = %v, want 1", mu)
		}
		if p := pdb.Spec.UnhealthyPodEvictionPolicy; p == nil || *p != policyv1.AlwaysAllow {
			t.Errorf("unhealthyPodEvictionPolicy = %v, want AlwaysAllow: a crash-looping replica must not block a drain", p)
		}
	})

	t.Run("a Service for the metrics port", func(t *testing.T) {
		svc, err := cp.Kube.CoreV1().Services(framework.DeployNamespace).Get(ctx, "podtoip-controller-metrics", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if svc.Labels["app.kubernetes.io/name"] != "podtoip-controller" || svc.Labels["app.kubernetes.io/component"] != "metrics" {
			t.Errorf("the Service's labels %v lack what a ServiceMonitor selects it by", svc.Labels)
		}
		sel := labels.SelectorFromSet(svc.Spec.Selector)
		if sel.Empty() || !sel.Matches(pods) || !apiequality.Semantic.DeepEqual(svc.Spec.Selector, dep.Spec.Selector.MatchLabels) {
			t.Errorf("the Service selects %v, not the Deployment's pods %v", svc.Spec.Selector, dep.Spec.Selector)
		}
		if len(svc.Spec.Ports) != 1 {
			t.Fatalf("want one port, got %v", svc.Spec.Ports)
		}
		p := svc.Spec.Ports[0]
		if n, name := containerPort(p.TargetPort); p.Name != "metrics" || p.Protocol != corev1.ProtocolTCP || name != "metrics" || n != metricsPort {
			t.Errorf("the Service's port %q targets %s (container port %d %q), want one named metrics targeting the metrics port %d",
				p.Name, p.TargetPort.String(), n, name, metricsPort)
		}
	})

	t.Run("the NetworkPolicy admits the metrics port alone", func(t *testing.T) {
		np, err := cp.Kube.NetworkingV1().NetworkPolicies(framework.DeployNamespace).Get(ctx, "podtoip-controller", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !selects(&np.Spec.PodSelector) {
			t.Errorf("the NetworkPolicy selects %v, not the Deployment's pods", np.Spec.PodSelector)
		}
		// Ingress only: the controller's own calls to the API server are
		// not restricted.
		if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
			t.Errorf("policy types %v, want [Ingress]", np.Spec.PolicyTypes)
		}
		m := regexp.MustCompile(`NetworkPolicy\*\*: only the metrics port \((\d+)\) accepts connections`).FindStringSubmatch(doc)
		if m == nil {
			t.Fatal("the README no longer says which port the NetworkPolicy admits")
		}
		var admitted []string
		for _, rule := range np.Spec.Ingress {
			// From the namespaces labelled for monitoring, as documented.
			if len(rule.From) != 1 || rule.From[0].NamespaceSelector == nil || rule.From[0].PodSelector != nil || rule.From[0].IPBlock != nil ||
				!maps.Equal(rule.From[0].NamespaceSelector.MatchLabels, map[string]string{"metrics": "enabled"}) || len(rule.From[0].NamespaceSelector.MatchExpressions) != 0 ||
				!strings.Contains(doc, "only from namespaces labelled `metrics=enabled`") {
				t.Errorf("ingress from %v; the docs admit namespaces labelled metrics=enabled", rule.From)
			}
			if len(rule.Ports) == 0 {
				admitted = append(admitted, "every port")
			}
			for _, p := range rule.Ports {
				n, _ := containerPort(*p.Port)
				admitted = append(admitted, fmt.Sprintf("%d/%s", n, *p.Protocol))
			}
		}
		if want := []string{m[1] + "/TCP"}; !slices.Equal(admitted, want) || fmt.Sprint(metricsPort) != m[1] {
			t.Errorf("the NetworkPolicy admits %v, the README says only the metrics port %s/TCP (the container's metrics port is %d)", admitted, m[1], metricsPort)
		}
	})

	t.Run("resources", func(t *testing.T) {
		m := regexp.MustCompile(`Requests (\S+) CPU and (\d+) MiB, limit (\d+) MiB`).FindStringSubmatch(doc)
		if m == nil {
			t.Fatal("the README no longer states the Deployment's requests and limit")
		}
		want := corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(m[1]), corev1.ResourceMemory: resource.MustParse(m[2] + "Mi")},
			// Memory only: a CPU limit would throttle bursts (a relist after
			// a restart) for no gain.
			Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(m[3] + "Mi")},
		}
		if !apiequality.Semantic.DeepEqual(c.Resources, want) {
			t.Errorf("resources: requests %v limits %v; the README says requests %s CPU and %s MiB, limit %s MiB (memory only)",
				c.Resources.Requests, c.Resources.Limits, m[1], m[2], m[3])
		}
	})

	t.Run("security and probes", func(t *testing.T) {
		if !strings.Contains(doc, "Runs as non-root with a read-only root filesystem, no privilege escalation, all capabilities dropped and the `RuntimeDefault` seccomp profile") {
			t.Fatal("the README no longer says how the controller runs; update this test with it")
		}
		sc, psc := c.SecurityContext, spec.SecurityContext
		if sc == nil || psc == nil {
			t.Fatalf("no security context: container %v, pod %v", sc, psc)
		}
		is := func(b *bool) bool { return b != nil && *b }
		str := func(b *bool) string {
			if b == nil {
				return "unset"
			}
			return fmt.Sprint(*b)
		}
		if !is(sc.ReadOnlyRootFilesystem) {
			t.Errorf("readOnlyRootFilesystem = %s, want true", str(sc.ReadOnlyRootFilesystem))
		}
		if !is(psc.RunAsNonRoot) && !is(sc.RunAsNonRoot) {
			t.Errorf("runAsNonRoot not set")
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("allowPrivilegeEscalation = %s, want false", str(sc.AllowPrivilegeEscalation))
		}
		if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 {
			t.Errorf("capabilities = %+v, want all dropped and none added", sc.Capabilities)
		}
		if psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("seccomp profile = %+v, want RuntimeDefault", psc.SeccompProfile)
		}
		// README, "Probes and metrics": liveness on /healthz, readiness on
		// /readyz, both on the probes port.
		for _, p := range []struct {
			name  string
			probe *corev1.Probe
			path  string
		}{{"liveness", c.LivenessProbe, "/healthz"}, {"readiness", c.ReadinessProbe, "/readyz"}} {
			if p.probe == nil || p.probe.HTTPGet == nil {
				t.Errorf("no HTTP %s probe", p.name)
				continue
			}
			if n, _ := containerPort(p.probe.HTTPGet.Port); p.probe.HTTPGet.Path != p.path || n != probesPort {
				t.Errorf("%s probe GET %s on port %s, want %s on the probes port %d", p.name, p.probe.HTTPGet.Path, p.probe.HTTPGet.Port.String(), p.path, probesPort)
			}
		}
	})
}
