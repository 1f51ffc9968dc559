package kubeclient

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/homedir"
)

// serviceAccountDir is where a pod's ServiceAccount token and CA are mounted.
const serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// Config is the client configuration and where it came from: the startup
// log names the source, and error messages give advice about the
// credentials actually in use.
type Config struct {
	*rest.Config
	// Source names where the configuration was found, for the startup log.
	Source string
	// Credentials says what to check when the API server rejects them.
	Credentials string
}

// configEnv is what loadConfig reads from the process environment; tests
// substitute it.
type configEnv struct {
	getenv    func(string) string
	inCluster func() (*rest.Config, error)
}

var processEnv = configEnv{getenv: os.Getenv, inCluster: rest.InClusterConfig}

// LoadConfig finds the client configuration in the order kubectl users
// expect: an explicit --kubeconfig, then $KUBECONFIG, then the pod's
// ServiceAccount when running in a pod, then ~/.kube/config. --master
// overrides the server of whichever is used. A pod that sets $KUBECONFIG
// (a CI runner, a multi-cluster tool) talks to the cluster it names, not to
// the one it runs in.
func LoadConfig(kubeconfig, master string) (*Config, error) {
	return loadConfig(kubeconfig, master, processEnv)
}

// loadConfig is LoadConfig reading env instead of the process's.
func loadConfig(kubeconfig, master string, env configEnv) (*Config, error) {
	overrides := &clientcmd.ConfigOverrides{}
	overrides.ClusterInfo.Server = master
	if kubeconfig != "" {
		if _, err := os.Stat(kubeconfig); err != nil {
			return nil, fmt.Errorf("reading --kubeconfig %q: %w; pass the path of an existing kubeconfig file", kubeconfig, err)
		}
		rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: kubeconfig}
		return fromKubeconfig(rules, overrides, "--kubeconfig "+kubeconfig,
			fmt.Sprintf("check that it is a valid kubeconfig (kubectl --kubeconfig %s config view)", kubeconfig))
	}
	if paths := env.getenv(clientcmd.RecommendedConfigPathEnvVar); paths != "" {
		rules := &clientcmd.ClientConfigLoadingRules{Precedence: filepath.SplitList(paths)}
		return fromKubeconfig(rules, overrides, "$KUBECONFIG "+paths,
			"check the files named by $KUBECONFIG (kubectl config view), or unset it")
	}
	if env.getenv("KUBERNETES_SERVICE_HOST") != "" {
		cfg, err := env.inCluster()
		switch {
		case err == nil && master != "":
			cfg.Host = master
			return &Config{Config: cfg, Source: "in-cluster ServiceAccount, server from --master " + master,
				Credentials: "check the ServiceAccount token mounted at " + serviceAccountDir + " and that --master names a server that accepts it"}, nil
		case err == nil:
			return &Config{Config: cfg, Source: "in-cluster ServiceAccount",
				Credentials: "check the ServiceAccount token mounted at " + serviceAccountDir}, nil
		case master == "":
			return nil, fmt.Errorf("running in a pod (KUBERNETES_SERVICE_HOST is set) but its ServiceAccount credentials cannot be loaded: %w; "+
				"mount a ServiceAccount token (automountServiceAccountToken: true), or pass --kubeconfig or set $KUBECONFIG", err)
		}
		// --master in a pod without a token: the server is given, no
		// credentials are; ~/.kube/config may still hold some.
	}
	homeFile := filepath.Join(homedir.HomeDir(), clientcmd.RecommendedHomeDir, clientcmd.RecommendedFileName)
	rules := &clientcmd.ClientConfigLoadingRules{Precedence: []string{homeFile}}
	cc, err := fromKubeconfig(rules, overrides, "~/.kube/config ("+homeFile+")",
		fmt.Sprintf("check %s (kubectl config view)", homeFile))
	switch {
	case !errors.Is(err, errNoKubeconfig):
		return cc, err
	case master == "":
		return nil, errors.New("no Kubernetes configuration found: pass --kubeconfig, set $KUBECONFIG, create ~/.kube/config, or run inside a pod")
	}
	return &Config{Config: &rest.Config{Host: master}, Source: "--master " + master + " without credentials",
		Credentials: "no credentials were given (--master without --kubeconfig, $KUBECONFIG or a ServiceAccount token), so requests are anonymous; pass --kubeconfig with a user's credentials"}, nil
}

// errNoKubeconfig is wrapped by fromKubeconfig when the files hold nothing.
var errNoKubeconfig = errors.New("no configuration has been provided (missing or empty files)")

// fromKubeconfig builds the configuration from kubeconfig files.
func fromKubeconfig(rules *clientcmd.ClientConfigLoadingRules, overrides *clientcmd.ConfigOverrides, source, fix string) (*Config, error) {
	raw, err := rules.Load()
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w; %s", source, err, fix)
	}
	if clientcmdapi.IsConfigEmpty(raw) {
		return nil, fmt.Errorf("loading %s: %w; %s", source, errNoKubeconfig, fix)
	}
	cfg, err := clientcmd.NewNonInteractiveClientConfig(*raw, "", overrides, rules).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w; %s", source, err, fix)
	}
	return &Config{Config: cfg, Source: source,
		Credentials: "check the user's token or client certificate in " + source}, nil
}
