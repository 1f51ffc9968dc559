package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
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
	// preflightRequestTimeout bounds each startup request, so a blackholed
	// server is reported instead of waited on.
	preflightRequestTimeout = 10 * time.Second
)

// requiredAccess lists what the controller cannot work without. Events are
// not listed: without them the controller still works and only logs.
var requiredAccess = []authorizationv1.ResourceAttributes{
	{Verb: "list", Resource: "pods"},
	{Verb: "watch", Resource: "pods"},
	{Verb: "list", Group: GroupVersion.Group, Resource: Resource},
	{Verb: "watch", Group: GroupVersion.Group, Resource: Resource},
	{Verb: "create", Group: GroupVersion.Group, Resource: Resource},
	{Verb: "update", Group: GroupVersion.Group, Resource: Resource},
	{Verb: "delete", Group: GroupVersion.Group, Resource: Resource},
}

// waitForPreconditions checks that the API server answers, serves the
// PodToIp API and lets us do our job. Each problem is reported as soon as it
// is seen, then the checks repeat until they pass or timeout expires, so the
// controller can be started before (or while) the CRD and RBAC are applied.
// report receives the outcome of every round (nil once they pass).
func waitForPreconditions(ctx context.Context, cc *kubeclient.Config, namespace string, extraAccess []authorizationv1.ResourceAttributes, timeout time.Duration, report func(error)) error {
	logger := klog.FromContext(ctx)
	pcfg := rest.CopyConfig(cc.Config)
	pcfg.Timeout = preflightRequestTimeout
	kube, err := kubernetes.NewForConfig(pcfg)
	if err != nil {
		return fmt.Errorf("building client for startup checks: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	reported := ""
	for {
		err := checkPreconditions(ctx, kube, cc, namespace, extraAccess)
		report(err)
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

// checkPreconditions runs each startup check once and explains the first
// that fails in terms of what the user should do.
func checkPreconditions(ctx context.Context, kube kubernetes.Interface, cc *kubeclient.Config, namespace string, extraAccess []authorizationv1.ResourceAttributes) error {
	if err := kube.Discovery().RESTClient().Get().AbsPath("/version").Do(ctx).Error(); err != nil {
		return describeConnError(err, cc)
	}
	resources, err := kube.Discovery().ServerResourcesForGroupVersion(GroupVersion.String())
	switch {
	case apierrors.IsNotFound(err):
		return errCRDMissing
	case err != nil:
		return fmt.Errorf("discovering %s: %w", GroupVersion, describeConnError(err, cc))
	}
	found := false
	for _, r := range resources.APIResources {
		found = found || r.Name == Resource
	}
	if !found {
		return errCRDMissing
	}
	return checkAccess(ctx, kube, namespace, extraAccess)
}

// errCRDMissing names the CRD and how to install it.
var errCRDMissing = fmt.Errorf("the PodToIp API is not served: CustomResourceDefinition %s is not installed; install it with 'kubectl apply -f artifacts/crd.yaml'", CRDName)

// checkAccess asks the API server (SelfSubjectAccessReview) whether we may do
// everything in requiredAccess, and names what is missing.
func checkAccess(ctx context.Context, kube kubernetes.Interface, namespace string, extraAccess []authorizationv1.ResourceAttributes) error {
	logger := klog.FromContext(ctx)
	var denied []string
	access := make([]authorizationv1.ResourceAttributes, 0, len(requiredAccess)+len(extraAccess))
	for _, ra := range requiredAccess {
		ra.Namespace = namespace
		access = append(access, ra)
	}
	for _, ra := range append(access, extraAccess...) {
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
	return fmt.Errorf("forbidden: %s cannot %s; grant these permissions (see the ClusterRole in artifacts/rbac.yaml)",
		who, strings.Join(denied, ", cannot "))
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
