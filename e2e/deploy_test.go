package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
		type check struct {
			verb, group, resource, sub, ns, name string
			allowed                              bool
		}
		var checks []check
		for _, v := range []string{"get", "list", "watch"} {
			checks = append(checks, check{v, "", "pods", "", "", "", true}, check{v, "", "pods", "", "default", "", true})
		}
		for _, v := range []string{"get", "list", "watch", "create", "update", "delete"} {
			checks = append(checks, check{v, "example.com", "podtoips", "", "", "", true}, check{v, "example.com", "podtoips", "", "any-ns", "", true})
		}
		checks = append(checks,
			check{"create", "", "events", "", "default", "", true},
			check{"patch", "", "events", "", "default", "", true},
			check{"create", "coordination.k8s.io", "leases", "", deployNS, "", true},
			check{"get", "coordination.k8s.io", "leases", "", deployNS, "podtoip-controller", true},
			check{"update", "coordination.k8s.io", "leases", "", deployNS, "podtoip-controller", true},
		)
		for _, v := range []string{"create", "update", "patch", "delete", "deletecollection"} {
			checks = append(checks, check{v, "", "pods", "", "default", "", false})
		}
		checks = append(checks,
			check{"update", "", "pods", "status", "default", "", false},
			check{"patch", "example.com", "podtoips", "", "default", "", false},
			check{"deletecollection", "example.com", "podtoips", "", "default", "", false},
			check{"get", "", "events", "", "default", "", false},
			check{"list", "", "events", "", "default", "", false},
			check{"update", "", "events", "", "default", "", false},
			check{"delete", "", "events", "", "default", "", false},
			check{"get", "", "secrets", "", deployNS, "", false},
			check{"list", "", "secrets", "", "", "", false},
			check{"get", "", "configmaps", "", deployNS, "", false},
			check{"get", "", "nodes", "", "", "", false},
			check{"get", "coordination.k8s.io", "leases", "", deployNS, "other-lease", false},
			check{"update", "coordination.k8s.io", "leases", "", deployNS, "other-lease", false},
			check{"list", "coordination.k8s.io", "leases", "", deployNS, "", false},
			check{"delete", "coordination.k8s.io", "leases", "", deployNS, "podtoip-controller", false},
			check{"create", "coordination.k8s.io", "leases", "", "default", "", false},
			check{"get", "coordination.k8s.io", "leases", "", "default", "podtoip-controller", false},
			check{"update", "apiextensions.k8s.io", "customresourcedefinitions", "", "", "", false},
			check{"create", "", "serviceaccounts", "token", deployNS, saName, false},
		)
		for _, c := range checks {
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: saUser, Groups: saGroups,
				ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: c.verb, Group: c.group, Resource: c.resource, Subresource: c.sub, Namespace: c.ns, Name: c.name},
			}}
			res, err := cp.Kube.AuthorizationV1().SubjectAccessReviews().Create(t.Context(), sar, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if res.Status.Allowed != c.allowed {
				t.Errorf("%s %s.%s/%s ns=%q name=%q: allowed=%v, want %v", c.verb, c.resource, c.group, c.sub, c.ns, c.name, res.Status.Allowed, c.allowed)
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
		env := []string{"KUBERNETES_SERVICE_HOST=" + host, "KUBERNETES_SERVICE_PORT=" + port, "KUBECONFIG=/nonexistent/on-purpose"}
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
		if !strings.Contains(out, `server="https://`+host+":"+port+`"`) || !strings.Contains(out, `lease="`+deployNS+`/podtoip-controller"`) {
			t.Errorf("did not use the in-cluster server and namespace:\n%s", out)
		}
		runningPod(t, ns, "ic-0", []string{"10.244.41.1"})
		waitMirrorIPs(t, ns, "ic-0", "10.244.41.1")
		if code, err := p.Stop(30e9); err != nil || code != 0 {
			t.Fatalf("stop: exit %d, %v\n%s", code, err, p.Output())
		}
	})
}
