package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"example.com/podtoip-controller/e2e/controlplane"
)

const (
	deployNS = "podtoip-system"
	saName   = "podtoip-controller"
	saUser   = "system:serviceaccount:" + deployNS + ":" + saName
)

var saGroups = []string{"system:serviceaccounts", "system:serviceaccounts:" + deployNS, "system:authenticated"}

// TestDeployManifests applies artifacts/ with kustomize as users do, then
// checks that the pod template passes the "restricted" Pod Security
// Standard, that the RBAC is exactly what the controller needs, and that the
// controller works both as the ServiceAccount and with in-cluster config.
func TestDeployManifests(t *testing.T) {
	artifactsDir := filepath.Join(cp.Root, "artifacts")
	if out, err := cp.Kubectl(t.Context(), "apply", "-k", artifactsDir); err != nil {
		t.Fatalf("kubectl apply -k artifacts/: %v\n%s", err, out)
	}
	if out, err := cp.Kubectl(t.Context(), "apply", "--dry-run=server", "-k", artifactsDir); err != nil {
		t.Fatalf("kubectl apply --dry-run=server -k artifacts/: %v\n%s", err, out)
	}

	t.Run("pod template passes the restricted Pod Security Standard", func(t *testing.T) {
		ns, err := cp.Kube.CoreV1().Namespaces().Get(t.Context(), deployNS, metav1.GetOptions{})
		if err != nil || ns.Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
			t.Fatalf("namespace %s is not enforcing restricted: %v %v", deployNS, ns.Labels, err)
		}
		dep, err := cp.Kube.AppsV1().Deployments(deployNS).Get(t.Context(), "podtoip-controller", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if *dep.Spec.Replicas != 2 || !strings.Contains(strings.Join(dep.Spec.Template.Spec.Containers[0].Args, " "), "--leader-elect") {
			t.Errorf("deployment: replicas %d, args %v", *dep.Spec.Replicas, dep.Spec.Template.Spec.Containers[0].Args)
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "psa-check-", Labels: dep.Spec.Template.Labels}, Spec: dep.Spec.Template.Spec}
		dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
		if _, err := cp.Kube.CoreV1().Pods(deployNS).Create(t.Context(), pod, dry); err != nil {
			t.Errorf("the Deployment's pod is rejected in a restricted namespace: %v", err)
		}
		// The check has teeth: a pod that may escalate is rejected there.
		bad := pod.DeepCopy()
		bad.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation = nil
		if _, err := cp.Kube.CoreV1().Pods(deployNS).Create(t.Context(), bad, dry); err == nil || !strings.Contains(err.Error(), "restricted") {
			t.Errorf("a non-compliant pod was not rejected by Pod Security admission: %v", err)
		}
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
			{[]string{"get", "list", "watch"}, "pods", "", nil},
			// No patch: it updates whole objects.
			{[]string{"get", "list", "watch", "create", "update", "delete"}, "podtoips.example.com", "", nil},
			{[]string{"create", "patch"}, "events", "", nil},
			// Leader election in its own namespace. Create cannot be limited
			// to a name; reads and writes touch only its own Lease.
			{[]string{"create"}, "leases.coordination.k8s.io", deployNS, nil},
			{[]string{"get", "update"}, "leases.coordination.k8s.io", deployNS, []string{"podtoip-controller"}},
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
			"pods", "pods/status", "pods/log", "pods/exec", "pods/eviction",
			"podtoips.example.com", "podtoips.example.com/status",
			"events", "events.events.k8s.io", "leases.coordination.k8s.io",
			"secrets", "configmaps", "nodes", "serviceaccounts/token",
			"customresourcedefinitions.apiextensions.k8s.io",
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
			}
			for _, v := range verbs {
				for _, ns := range []string{"", deployNS, "default"} {
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
		for _, ns := range []string{deployNS, "default"} {
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
	tr, err := cp.Kube.CoreV1().ServiceAccounts(deployNS).CreateToken(t.Context(), saName,
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
		kc := clientcmdapi.NewConfig()
		kc.Clusters["c"] = &clientcmdapi.Cluster{Server: cp.Host(), CertificateAuthorityData: caData}
		kc.AuthInfos["sa"] = &clientcmdapi.AuthInfo{Token: token}
		kc.Contexts["sa"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "sa"}
		kc.CurrentContext = "sa"
		path := filepath.Join(t.TempDir(), "sa.kubeconfig")
		if err := clientcmd.WriteToFile(*kc, path); err != nil {
			t.Fatal(err)
		}
		ns := newNamespace(t)
		p := startControllerAs(t, path, "--leader-elect", "--leader-elect-resource-namespace", deployNS, "--startup-timeout=20s")
		if err := p.WaitForOutput(ctxFor(t, 30e9), "Became the leader"); err != nil {
			t.Fatalf("%v\n%s", err, p.Output())
		}
		runningPod(t, ns, "sa-0", []string{"10.244.40.1"})
		runningPod(t, ns, "sa-1", []string{"10.244.40.2", "fd00::40:2"})
		waitMirrorIPs(t, ns, "sa-0", "10.244.40.1")
		waitMirrorIPs(t, ns, "sa-1", "10.244.40.2", "fd00::40:2")
		deletePod(t, ns, "sa-0", false)
		waitNoMirror(t, ns, "sa-0")
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
		for name, content := range map[string][]byte{"token": []byte(token), "ca.crt": caData, "namespace": []byte(deployNS)} {
			if err := os.WriteFile(filepath.Join(sa, name), content, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		host, port, _ := strings.Cut(strings.TrimPrefix(cp.Host(), "https://"), ":")
		script := fmt.Sprintf(`set -e
mount -t tmpfs tmpfs /var/run
mkdir -p /var/run/secrets/kubernetes.io/serviceaccount
mount --bind %q /var/run/secrets/kubernetes.io/serviceaccount
exec %q "$@"`, sa, controllerBin)
		// No --kubeconfig and no KUBECONFIG: exactly what a pod sees.
		env := []string{"KUBERNETES_SERVICE_HOST=" + host, "KUBERNETES_SERVICE_PORT=" + port, "KUBECONFIG="}
		ns := newNamespace(t)
		p, err := controlplane.StartProcess("unshare", env, filepath.Join(artifacts, "TestDeployManifests_in-cluster.log"),
			"--mount", "--propagation", "private", "sh", "-c", script, "podtoip-controller",
			"--leader-elect", "-v=2", "--metrics-bind-address=0", "--health-probe-bind-address=127.0.0.1:0", "--startup-timeout=20s")
		if err != nil {
			t.Fatal(err)
		}
		defer p.Stop(30e9)
		if err := p.WaitForOutput(ctxFor(t, 30e9), "Became the leader"); err != nil {
			t.Fatalf("%v\n%s", err, p.Output())
		}
		out := p.Output()
		if !strings.Contains(out, `config="in-cluster ServiceAccount"`) || !strings.Contains(out, `server="https://`+host+":"+port+`"`) || !strings.Contains(out, `lease="`+deployNS+`/podtoip-controller"`) {
			t.Errorf("did not use the in-cluster server and namespace:\n%s", out)
		}
		runningPod(t, ns, "ic-0", []string{"10.244.41.1"})
		waitMirrorIPs(t, ns, "ic-0", "10.244.41.1")
		if code, err := p.Stop(30e9); err != nil || code != 0 {
			t.Fatalf("stop: exit %d, %v\n%s", code, err, p.Output())
		}
	})
}
