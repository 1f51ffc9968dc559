package access

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"example.com/podtoip-controller/internal/kubeclient"
)

const (
	// preflightPoll is how often startup checks are repeated while failing.
	preflightPoll = 2 * time.Second
	// StartupRequestTimeout bounds each startup request, so a blackholed
	// server is reported instead of waited on.
	StartupRequestTimeout = 10 * time.Second
)

// requiredAccess lists what the controller cannot work without, in
// namespace ("" for all). Events are not listed: without them the
// controller still works and only logs.
func requiredAccess(crd CRD, namespace string) []authorizationv1.ResourceAttributes {
	group := crd.GroupVersion.Group
	return []authorizationv1.ResourceAttributes{
		{Verb: "list", Resource: "pods", Namespace: namespace},
		{Verb: "watch", Resource: "pods", Namespace: namespace},
		{Verb: "list", Group: group, Resource: crd.Resource, Namespace: namespace},
		{Verb: "watch", Group: group, Resource: crd.Resource, Namespace: namespace},
		{Verb: "create", Group: group, Resource: crd.Resource, Namespace: namespace},
		{Verb: "update", Group: group, Resource: crd.Resource, Namespace: namespace},
		{Verb: "patch", Group: group, Resource: crd.Resource, Namespace: namespace},
		{Verb: "delete", Group: group, Resource: crd.Resource, Namespace: namespace},
	}
}

// Preconditions are what the controller needs before it starts, and how
// long to wait for them.
type Preconditions struct {
	CRD    CRD
	Config *kubeclient.Config
	// Namespace is the one the controller mirrors pods in; "" for all.
	Namespace string
	// ExtraAccess is needed on top of the controller's own permissions,
	// such as the Lease of leader election.
	ExtraAccess []authorizationv1.ResourceAttributes
	// ExtraCRDs must be served too, in the same group version as CRD.
	ExtraCRDs []CRD
	Timeout   time.Duration
	// Report receives the outcome of every round (nil once they pass).
	Report func(error)
}

// WaitForPreconditions checks that the API server answers, serves the
// CRD's API and lets us do our job. Each problem is reported as soon as it
// is seen, then the checks repeat until they pass or p.Timeout expires, so
// the controller can be started before (or while) the CRD and RBAC are
// applied.
func WaitForPreconditions(ctx context.Context, p Preconditions) error {
	logger := klog.FromContext(ctx)
	timeout := p.Timeout
	pcfg := rest.CopyConfig(p.Config.Config)
	pcfg.Timeout = StartupRequestTimeout
	kube, err := kubernetes.NewForConfig(pcfg)
	if err != nil {
		return fmt.Errorf("building client for startup checks: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	reported := ""
	for {
		err := p.check(ctx, kube)
		p.Report(err)
		if err == nil {
			if reported != "" {
				logger.Info("Startup checks passed")
			}
			return nil
		}
		if msg := err.Error(); msg != reported {
			logger.Error(err, "Startup check failed; retrying", "retryFor", timeout)
			reported = msg
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("startup checks still failing after %v (--startup-timeout): %w", timeout, err)
		case <-time.After(preflightPoll):
		}
	}
}

// check runs each startup check once and explains the first that fails in
// terms of what the user should do.
func (p *Preconditions) check(ctx context.Context, kube kubernetes.Interface) error {
	if err := kube.Discovery().RESTClient().Get().AbsPath("/version").Do(ctx).Error(); err != nil {
		return describeConnError(err, p.Config)
	}
	gv := p.CRD.GroupVersion
	resources, err := kube.Discovery().ServerResourcesForGroupVersion(gv.String())
	switch {
	case apierrors.IsNotFound(err):
		return p.CRD.missing()
	case err != nil:
		return fmt.Errorf("discovering %s: %w", gv, describeConnError(err, p.Config))
	}
	for _, crd := range append([]CRD{p.CRD}, p.ExtraCRDs...) {
		if !slices.ContainsFunc(resources.APIResources, func(r metav1.APIResource) bool { return r.Name == crd.Resource }) {
			return crd.missing()
		}
	}
	return p.checkAccess(ctx, kube)
}

// checkAccess asks the API server (SelfSubjectAccessReview) whether we may do
// everything in requiredAccess and p.ExtraAccess, and names what is missing.
func (p *Preconditions) checkAccess(ctx context.Context, kube kubernetes.Interface) error {
	logger := klog.FromContext(ctx)
	var denied []string
	for _, ra := range append(requiredAccess(p.CRD, p.Namespace), p.ExtraAccess...) {
		review, err := kube.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &ra},
		}, metav1.CreateOptions{})
		switch {
		case apierrors.IsForbidden(err) || apierrors.IsNotFound(err) || apierrors.IsMethodNotSupported(err):
			// Not being allowed to ask (or a server without the API) is
			// no proof of not being allowed to act; let the real requests
			// tell, and say so.
			logger.Info("Cannot check permissions with a SelfSubjectAccessReview; skipping the check, the real requests will tell", "err", err)
			return nil
		case err != nil:
			// A timeout or a server error says nothing about permissions;
			// the check is repeated until it can be made.
			return fmt.Errorf("cannot check permissions (SelfSubjectAccessReview for %s): %w", describeAccess(ra), err)
		}
		if !review.Status.Allowed {
			denied = append(denied, describeAccess(ra))
		}
	}
	if len(denied) == 0 {
		return nil
	}
	who := "this controller's user"
	if self, err := kube.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{}); err == nil {
		who = fmt.Sprintf("user %q", self.Status.UserInfo.Username)
	}
	return fmt.Errorf("forbidden: %s cannot %s; grant these permissions (see the ClusterRole in %s)",
		who, strings.Join(denied, ", cannot "), p.CRD.RBAC)
}

// describeAccess renders one permission the way kubectl auth can-i reads.
func describeAccess(ra authorizationv1.ResourceAttributes) string {
	res := ra.Resource
	if ra.Group != "" {
		res += "." + ra.Group
	}
	where := "in all namespaces"
	if ra.Namespace != "" {
		where = "in namespace " + ra.Namespace
	}
	if ra.Name != "" {
		res += " " + ra.Name
	}
	return fmt.Sprintf("%s %s %s", ra.Verb, res, where)
}

// describeConnError turns a failed request into advice on what to check,
// about the configuration actually in use.
func describeConnError(err error, cc *kubeclient.Config) error {
	host := cc.Host
	var (
		unknownCA   x509.UnknownAuthorityError
		hostnameErr x509.HostnameError
		invalidCert x509.CertificateInvalidError
		verifyErr   *tls.CertificateVerificationError
	)
	switch {
	case errors.As(err, &unknownCA), errors.As(err, &hostnameErr), errors.As(err, &invalidCert), errors.As(err, &verifyErr):
		return fmt.Errorf("cannot verify the TLS certificate of the API server at %s: %w; check the server address and the CA trusted by the configuration in use, %s (certificate-authority or certificate-authority-data in a kubeconfig, ca.crt of a ServiceAccount)", host, err, cc.Source)
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("the API server at %s rejected our credentials (401 Unauthorized): %w; %s", host, err, cc.Credentials)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("the API server at %s denied access: %w", host, err)
	default:
		return fmt.Errorf("cannot reach the API server at %s (from %s): %w; check that it is running and that --kubeconfig, $KUBECONFIG or --master point to it", host, cc.Source, err)
	}
}
