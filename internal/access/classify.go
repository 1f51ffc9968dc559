package access

import (
	"bytes"
	"io"
	"net/http"
	"regexp"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
)

// statusPeekLimit bounds how much of a 403 body is read to classify it.
// API server Status bodies are a few hundred bytes; the authorizer's
// message comes first in them.
const statusPeekLimit = 16 << 10

// Why the API server refused a call with 403 other than for lack of
// permissions; the values are the reason label of
// podtoip_controller_api_rejections_total.
const (
	rejectNamespaceTerminating = "namespace_terminating"
	rejectQuota                = "quota"
	rejectAdmissionWebhook     = "admission_webhook"
	rejectAdmissionPolicy      = "admission_policy"
	rejectOther                = "other"
)

// statusScheme knows the meta types only: enough to read a Status in JSON
// or protobuf, without touching client-go's global scheme.
var (
	statusScheme = runtime.NewScheme()
	statusCodecs = serializer.NewCodecFactory(statusScheme)
)

func init() {
	metav1.AddToGroupVersion(statusScheme, schema.GroupVersion{Version: "v1"})
}

// peekBody returns up to statusPeekLimit bytes of resp's body and puts them
// back, so the caller reads the whole body as if untouched.
func peekBody(resp *http.Response) []byte {
	if resp.Body == nil || resp.Body == http.NoBody {
		return nil
	}
	head, err := io.ReadAll(io.LimitReader(resp.Body, statusPeekLimit))
	resp.Body = &peekedBody{Reader: io.MultiReader(bytes.NewReader(head), resp.Body), Closer: resp.Body}
	if err != nil {
		return nil // the caller will see the error when it reads on
	}
	return head
}

type peekedBody struct {
	io.Reader
	io.Closer
}

// authorizerDenial matches the message of a 403 from the API server's
// authorizer (k8s.io/apiserver's responsewriters.Forbidden):
// `<resource> ["<name>"] is forbidden: User "<user>" cannot <verb> resource
// "<resource>" in API group "<group>" (in the namespace "<ns>"|at the
// cluster scope)`, or `... cannot <verb> path "<path>"`, optionally followed
// by the authorizer's reason.
var authorizerDenial = regexp.MustCompile(`^(?:\S+(?: "(?:[^"\\]|\\.)*")? is )?forbidden: User "(?:[^"\\]|\\.)*" cannot \S+ (?:resource "[^"]*" in API group "[^"]*" (?:in the namespace "[^"]*"|at the cluster scope)|path "[^"]*")`)

// authorizerDenialRaw is the same pattern, looser, on an undecodable body:
// in JSON the quotes are escaped, in protobuf they are not.
var authorizerDenialRaw = regexp.MustCompile(`forbidden: User \\?".*?\\?" cannot \S+ (?:resource|path) \\?"`)

// classifyForbidden tells a 403 body apart: reason "" for an authorization
// refusal (missing permissions), else the kind of rejection; and the
// server's message. The body is a metav1.Status in JSON or protobuf,
// whichever the request accepted (pods are read as protobuf, podtoips as
// JSON).
func classifyForbidden(body []byte) (reason, message string) {
	var status metav1.Status
	_, _, err := statusCodecs.UniversalDeserializer().Decode(body, nil, &status)
	if err != nil || status.Kind != "Status" {
		// Not a Status we can read (truncated, or not from an API server):
		// fall back to the raw text.
		message = strings.ToValidUTF8(string(body), "")
		switch {
		case authorizerDenialRaw.Match(body):
			return "", message
		case bytes.Contains(body, []byte(corev1.NamespaceTerminatingCause)):
			return rejectNamespaceTerminating, message
		}
		return rejectionOf(message), message
	}
	message = status.Message
	if authorizerDenial.MatchString(message) {
		return "", message
	}
	if status.Details != nil {
		for _, c := range status.Details.Causes {
			if c.Type == corev1.NamespaceTerminatingCause {
				return rejectNamespaceTerminating, message
			}
		}
	}
	return rejectionOf(message), message
}

// rejectionOf classifies a non-authorization 403 by its message, as
// written by the admission plugins: NamespaceLifecycle, ResourceQuota
// ("exceeded quota: …", or "status unknown for quota: …" before the quota
// controller has computed its usage) and the webhook dispatchers
// ("admission webhook "<name>" denied the request…").
func rejectionOf(msg string) string {
	switch {
	case strings.Contains(msg, "because it is being terminated"):
		return rejectNamespaceTerminating
	case strings.Contains(msg, "exceeded quota:"), strings.Contains(msg, "status unknown for quota:"):
		return rejectQuota
	case strings.Contains(msg, "admission webhook ") && strings.Contains(msg, "denied the request"):
		return rejectAdmissionWebhook
	case admissionPolicy.MatchString(msg):
		return rejectAdmissionPolicy
	}
	return rejectOther
}

// admissionPolicy matches the message of a ValidatingAdmissionPolicy's
// denial ("ValidatingAdmissionPolicy '<name>' with binding '<binding>'
// denied request: …") and captures the policy's name.
var admissionPolicy = regexp.MustCompile(`ValidatingAdmissionPolicy '([^']*)' with binding '[^']*' denied request`)

// parsePath extracts the resource and the object's name (empty for the
// collection) from an API path such as /api/v1/namespaces/ns/pods/name or
// /apis/example.com/v1/podtoips.
func parsePath(path string) (resource, name string) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return "", ""
	}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	switch len(parts) {
	case 0:
		return "", ""
	case 1:
		return parts[0], ""
	}
	return parts[0], parts[1]
}

// verbOf names the API verb of a request the way RBAC does.
func verbOf(req *http.Request) string {
	switch req.Method {
	case http.MethodGet:
		if w := req.URL.Query().Get("watch"); w == "true" || w == "1" {
			return "watch"
		}
		return "get/list"
	case http.MethodPost:
		return "create"
	case http.MethodPut:
		return "update"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		return "delete"
	}
	return strings.ToLower(req.Method)
}
