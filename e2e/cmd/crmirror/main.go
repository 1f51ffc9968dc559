// Command crmirror is a plain controller-runtime controller doing
// podtoip-controller's core job, written as its scaffolding suggests: a
// manager, one reconciler of Pods that owns PodToIps, full objects in the
// manager's cache, reads from it and typed Create/Update/Delete calls. It is
// the baseline that the project's benchmark measures it against (`make
// bench-crmirror`, beside `make bench
// BENCH_FLAGS=-controller-args=--history-retention=0`): same objects written, same API server, so the difference in CPU and memory
// of the controller, kube-apiserver and etcd is what the project's own
// machinery costs or saves.
//
// For every pod that has an IP, has not finished and is not gone (a
// terminating pod keeps its mirror, marked terminating, as
// podtoip-controller's does), it
// writes a PodToIp (example.com/v1) of the same namespace and name with the
// fields and label podtoip-controller writes (podName, podUID, podAddress,
// podIPs, podIPv4, podIPv6, nodeName, hostNetwork, conflict=false, the
// managed-by label and the pod as controlling owner), brings it back when
// it differs, and deletes it when the pod loses its IP or is gone. It never
// touches a PodToIp without the managed-by label.
//
// It leaves out, on purpose: address conflict detection (conflict is always
// false, conflictsWith never set), the IPHistory of addresses, events,
// startup checks of the CRD and permissions, a --namespace restriction,
// metrics over HTTPS and of its own, and any tuning of the cache (it holds
// whole Pods and PodToIps, as controller-runtime does by default). Client
// QPS, burst and the number of workers default to podtoip-controller's
// (1000, 2000 and 32); response compression is left at client-go's default
// (on), where podtoip-controller turns it off.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"runtime/debug"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

const (
	// managedByLabel and managedBy are podtoip-controller's: the mirrors
	// this baseline writes are the ones the project writes.
	managedByLabel = "app.kubernetes.io/managed-by"
	managedBy      = "podtoip-controller"
	fieldOwner     = "crmirror"
)

// groupVersion is the PodToIp API's.
var groupVersion = schema.GroupVersion{Group: "example.com", Version: "v1"}

// PodToIp is the custom object of artifacts/crd.yaml, as far as this
// controller writes it. Its own copy: the baseline must be a plain
// controller-runtime mirror, independent of the controller it is measured
// against.
type PodToIp struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	fields            `json:",inline"`
}

// fields are the part of a PodToIp this controller owns besides its
// metadata.
type fields struct {
	PodName     string    `json:"podName"`
	PodUID      types.UID `json:"podUID"`
	PodAddress  string    `json:"podAddress"`
	PodIPs      []string  `json:"podIPs,omitempty"`
	PodIPv4     string    `json:"podIPv4,omitempty"`
	PodIPv6     string    `json:"podIPv6,omitempty"`
	NodeName    string    `json:"nodeName,omitempty"`
	HostNetwork bool      `json:"hostNetwork"`
	// Conflict is always false here (no conflict detection); it is
	// written, as podtoip-controller does, so that the objects are the
	// same and a selector on conflict=false finds them.
	Conflict bool `json:"conflict"`
	// Terminating is set while the pod is being deleted, as
	// podtoip-controller sets it: a terminating pod keeps its address.
	Terminating bool `json:"terminating,omitempty"`
}

// PodToIpList is a list of PodToIp, for the cache's list calls.
type PodToIpList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []PodToIp `json:"items"`
}

func (m *PodToIp) DeepCopyInto(out *PodToIp) {
	*out = *m
	out.ObjectMeta = *m.ObjectMeta.DeepCopy()
	out.PodIPs = slices.Clone(m.PodIPs)
}

func (m *PodToIp) DeepCopyObject() runtime.Object {
	out := new(PodToIp)
	m.DeepCopyInto(out)
	return out
}

func (l *PodToIpList) DeepCopyObject() runtime.Object {
	out := &PodToIpList{TypeMeta: l.TypeMeta, ListMeta: *l.ListMeta.DeepCopy()}
	if l.Items != nil {
		out.Items = make([]PodToIp, len(l.Items))
		for i := range l.Items {
			l.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
	return out
}

// reconciler keeps the PodToIp of one pod in line with the pod.
type reconciler struct {
	client.Client
}

func (r *reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	var pod corev1.Pod
	havePod := true
	if err := r.Get(ctx, req.NamespacedName, &pod); apierrors.IsNotFound(err) {
		havePod = false
	} else if err != nil {
		return ctrl.Result{}, err
	}
	var want *fields
	if havePod {
		f, err := desired(&pod)
		if err != nil {
			// An address that is not an IP: no mirror, and no retry
			// until the pod changes.
			log.Info("Pod has an address that is not an IP; no PodToIp", "error", err.Error())
		}
		want = f
	}

	var mirror PodToIp
	if err := r.Get(ctx, req.NamespacedName, &mirror); apierrors.IsNotFound(err) {
		if want == nil {
			return ctrl.Result{}, nil
		}
		mirror = PodToIp{ObjectMeta: metav1.ObjectMeta{
			Name:            pod.Name,
			Namespace:       pod.Namespace,
			Labels:          map[string]string{managedByLabel: managedBy},
			OwnerReferences: ownerRefs(&pod),
		}}
		mirror.fields = *want
		log.V(1).Info("Creating PodToIp")
		return ctrl.Result{}, r.Create(ctx, &mirror, client.FieldOwner(fieldOwner))
	} else if err != nil {
		return ctrl.Result{}, err
	}
	if mirror.Labels[managedByLabel] != managedBy {
		return ctrl.Result{}, nil // someone else's
	}
	if want == nil {
		log.V(1).Info("Deleting PodToIp")
		return ctrl.Result{}, client.IgnoreNotFound(r.Delete(ctx, &mirror, client.Preconditions{UID: &mirror.UID}))
	}
	owners := ownerRefs(&pod)
	if equality.Semantic.DeepEqual(mirror.fields, *want) && equality.Semantic.DeepEqual(mirror.OwnerReferences, owners) {
		return ctrl.Result{}, nil
	}
	// The cache returned a copy to change: other labels, annotations and
	// finalizers are kept, and the update is refused (409, retried) if the
	// cache was behind.
	mirror.OwnerReferences = owners
	mirror.fields = *want
	log.V(1).Info("Updating PodToIp")
	return ctrl.Result{}, r.Update(ctx, &mirror, client.FieldOwner(fieldOwner))
}

// desired returns the mirrored fields of pod, or nil if it should have no
// PodToIp: no IP, finished, or its deletion final (deletionTimestamp with
// a grace period of 0), as podtoip-controller decides.
// Addresses are written in canonical form, which the CRD requires.
func desired(pod *corev1.Pod) (*fields, error) {
	final := pod.DeletionTimestamp != nil && pod.DeletionGracePeriodSeconds != nil && *pod.DeletionGracePeriodSeconds == 0
	if pod.Status.PodIP == "" || final ||
		pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return nil, nil
	}
	raw := []string{pod.Status.PodIP}
	if len(pod.Status.PodIPs) > 0 {
		raw = raw[:0]
		for _, ip := range pod.Status.PodIPs {
			raw = append(raw, ip.IP)
		}
	}
	primary, err := canonical(pod.Status.PodIP)
	if err != nil {
		return nil, err
	}
	f := &fields{
		PodName:     pod.Name,
		PodUID:      pod.UID,
		PodAddress:  primary.String(),
		PodIPs:      make([]string, len(raw)),
		NodeName:    pod.Spec.NodeName,
		HostNetwork: pod.Spec.HostNetwork,
		Terminating: pod.DeletionTimestamp != nil,
	}
	for i, s := range raw {
		a, err := canonical(s)
		if err != nil {
			return nil, err
		}
		f.PodIPs[i] = a.String()
		switch {
		case a.Is4() && f.PodIPv4 == "":
			f.PodIPv4 = f.PodIPs[i]
		case a.Is6() && f.PodIPv6 == "":
			f.PodIPv6 = f.PodIPs[i]
		}
	}
	return f, nil
}

// canonical parses an address; its String is the form the CRD requires
// (IPv4 dotted decimal, IPv6 as RFC 5952, IPv4-mapped IPv6 as IPv4).
func canonical(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("%q is not an IP address", s)
	}
	return a.Unmap(), nil
}

// ownerRefs makes the pod the mirror's controller, so that the garbage
// collector removes the mirror with its pod and Owns maps a PodToIp event
// to its pod.
func ownerRefs(pod *corev1.Pod) []metav1.OwnerReference {
	return []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID, Controller: ptr.To(true)}}
}

// options are the command-line flags.
type options struct {
	metricsAddr, probeAddr, profilingAddr string
	leaderElect                           bool
	leaderNamespace                       string
	workers                               int
	qps                                   float64
	burst                                 int
	compression                           bool
}

func main() {
	var o options
	var showVersion bool
	// --kubeconfig is controller-runtime's own flag (pkg/client/config).
	flag.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080", "Address to serve controller-runtime's Prometheus metrics on at /metrics, plain HTTP; 0 disables.")
	flag.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "Address to serve /healthz and /readyz on; 0 disables.")
	flag.StringVar(&o.profilingAddr, "profiling-bind-address", "0", "Address to serve Go runtime profiles on at /debug/pprof/; 0 disables.")
	flag.BoolVar(&o.leaderElect, "leader-elect", false, "Run only while holding a Lease, so that several replicas can run with one active.")
	flag.StringVar(&o.leaderNamespace, "leader-elect-resource-namespace", "", "Namespace of the Lease (default: the pod's in a cluster, else \"default\").")
	flag.IntVar(&o.workers, "workers", 32, "Number of pods reconciled concurrently (podtoip-controller's default).")
	flag.Float64Var(&o.qps, "kube-api-qps", 1000, "Client-side limit on requests per second to the API server (podtoip-controller's default); -1 disables it.")
	flag.IntVar(&o.burst, "kube-api-burst", 2000, "Client-side burst above --kube-api-qps (podtoip-controller's default).")
	flag.BoolVar(&o.compression, "api-compression", true, "Accept gzip-compressed responses (client-go's default; podtoip-controller's is false).")
	flag.BoolVar(&showVersion, "version", false, "Print the version and exit.")
	logOpts := zap.Options{}
	logOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	if showVersion {
		fmt.Println("crmirror", version())
		return
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&logOpts)))
	if err := run(o); err != nil {
		ctrl.Log.WithName("crmirror").Error(err, "Exiting")
		os.Exit(1)
	}
}

func run(o options) error {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	scheme.AddKnownTypes(groupVersion, &PodToIp{}, &PodToIpList{})
	metav1.AddToGroupVersion(scheme, groupVersion)

	cfg, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = float32(o.qps), o.burst
	cfg.DisableCompression = !o.compression
	cfg.UserAgent = "crmirror"
	if o.leaderElect && o.leaderNamespace == "" {
		if _, err := os.Stat("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err != nil {
			o.leaderNamespace = "default" // not in a pod
		}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: o.metricsAddr},
		HealthProbeBindAddress:  o.probeAddr,
		PprofBindAddress:        o.profilingAddr,
		LeaderElection:          o.leaderElect,
		LeaderElectionID:        "crmirror",
		LeaderElectionNamespace: o.leaderNamespace,
	})
	if err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return err
	}
	err = ctrl.NewControllerManagedBy(mgr).
		For(&corev1.Pod{}).
		Owns(&PodToIp{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: o.workers}).
		Complete(&reconciler{Client: mgr.GetClient()})
	if err != nil {
		return err
	}
	ctrl.Log.WithName("crmirror").Info("Starting", "version", version(), "server", cfg.Host, "workers", o.workers, "leaderElect", o.leaderElect)
	return mgr.Start(ctrl.SetupSignalHandler())
}

// version is controller-runtime's version from the build information.
func version() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	for _, d := range info.Deps {
		if d.Path == "sigs.k8s.io/controller-runtime" {
			return "controller-runtime " + d.Version
		}
	}
	return "unknown"
}
