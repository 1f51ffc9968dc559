package access

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// CRD names the custom resource the controller writes, and what to tell an
// operator about it: the startup checks look for its API and permissions,
// and the monitor notices when it is no longer served.
type CRD struct {
	// Kind names the API in messages ("the PodToIp API").
	Kind         string
	GroupVersion schema.GroupVersion
	// Resource is the plural name, as in URLs and RBAC.
	Resource string
	// Name is the CustomResourceDefinition's name.
	Name string
	// InstallHint is the command that installs the CRD.
	InstallHint string
	// RBAC names the manifest that grants the controller's permissions.
	RBAC string
}

// missing is the error for an API server that does not serve the CRD,
// naming it and how to install it.
func (c CRD) missing() error {
	return fmt.Errorf("the %s API is not served: CustomResourceDefinition %s is not installed; install it with '%s'", c.Kind, c.Name, c.InstallHint)
}
