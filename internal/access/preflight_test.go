package access

import (
	"errors"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
)

// accessReviews answers SelfSubjectAccessReviews with answer.
func accessReviews(answer func(*authorizationv1.SelfSubjectAccessReview) (*authorizationv1.SelfSubjectAccessReview, error)) *fake.Clientset {
	kube := fake.NewClientset()
	kube.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		review := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview)
		out, err := answer(review)
		return true, out, err
	})
	return kube
}

// TestCheckAccessReportsWhatItCannotCheck checks that a failing permission
// check is never taken for "everything granted": a timeout or a server
// error is reported (and the startup checks retry it), while a server that
// does not let us ask at all is skipped, since the real requests will tell.
func TestCheckAccessReportsWhatItCannotCheck(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ssar := schema.GroupResource{Group: "authorization.k8s.io", Resource: "selfsubjectaccessreviews"}
	for name, tc := range map[string]struct {
		err  error
		want string // "" for success
	}{
		"timeout":          {apierrors.NewTimeoutError("request timed out", 1), "cannot check permissions"},
		"server error":     {apierrors.NewInternalError(errors.New("etcd is down")), "cannot check permissions"},
		"unavailable":      {apierrors.NewServiceUnavailable("try again"), "cannot check permissions"},
		"forbidden to ask": {apierrors.NewForbidden(ssar, "", errors.New("no")), ""},
		"API not served":   {apierrors.NewNotFound(ssar, ""), ""},
	} {
		t.Run(name, func(t *testing.T) {
			kube := accessReviews(func(*authorizationv1.SelfSubjectAccessReview) (*authorizationv1.SelfSubjectAccessReview, error) {
				return nil, tc.err
			})
			err := (&Preconditions{CRD: testCRD}).checkAccess(ctx, kube)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("checkAccess = %v, want the check skipped", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("checkAccess = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestCheckAccessNamesWhatIsMissing checks the answer when the reviews
// work: every denied permission is named, in the order checked.
func TestCheckAccessNamesWhatIsMissing(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	kube := accessReviews(func(r *authorizationv1.SelfSubjectAccessReview) (*authorizationv1.SelfSubjectAccessReview, error) {
		ra := r.Spec.ResourceAttributes
		r.Status.Allowed = !(ra.Resource == "pods" && ra.Verb == "watch") && !(ra.Resource == testCRD.Resource && ra.Verb == "delete")
		return r, nil
	})
	err := (&Preconditions{CRD: testCRD, Namespace: "team-a"}).checkAccess(ctx, kube)
	if err == nil {
		t.Fatal("checkAccess passed with permissions denied")
	}
	for _, want := range []string{"cannot watch pods in namespace team-a", "cannot delete podtoips.example.com in namespace team-a", "artifacts/rbac.yaml"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("checkAccess = %q, want it to contain %q", err, want)
		}
	}

	all := accessReviews(func(r *authorizationv1.SelfSubjectAccessReview) (*authorizationv1.SelfSubjectAccessReview, error) {
		r.Status.Allowed = true
		return r, nil
	})
	if err := (&Preconditions{CRD: testCRD}).checkAccess(ctx, all); err != nil {
		t.Errorf("checkAccess = %v with everything allowed", err)
	}
}
