// Package access watches what the API server lets the controller do. At
// startup, WaitForPreconditions checks that the server answers, serves the
// custom resource's API and grants the permissions, and explains each
// failure in terms of what to do. While running, a Monitor in the HTTP
// transport notices refused permissions, an unreachable server and a
// deleted CRD, for readiness, and counts and logs the other 403s
// (terminating namespaces, quotas, admission webhooks) without failing it.
package access
