// Package kubeclient sets up the process's connection to the API server:
// where the configuration comes from (LoadConfig), how every client of the
// process talks (Options: user agent, one shared rate limiter, compression,
// protobuf), how quickly a silently dead HTTP/2 connection is dropped
// (DefaultHTTP2HealthCheck), and how informers ride out an unreachable API
// server (RetryWhileUnreachable); the Writer that sends the controller's
// writes of its own resources as JSON; and how the workers of its queues
// retry a key whose API calls failed (Retry).
package kubeclient
