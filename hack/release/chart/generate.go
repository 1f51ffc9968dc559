package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"text/template"

	"sigs.k8s.io/yaml"

	"example.com/podtoip-controller/hack/release/internal/kustomize"
)

// The chart is generated, never edited: `make chart` renders artifacts/
// (and the monitoring and export components) with kustomize and turns each
// object into a template. What the values change is marked in the objects
// with tokens before they are written as YAML, and the tokens are then
// replaced by template code:
//
//   - a scalar token, '@@NAME@@', by the expression scalars[NAME];
//   - a line token, a list item '@@line:NAME@@' or a key zzzline-NAME (YAML's
//     writer sorts it after every plain key, so it never starts a list
//     item), by lines[NAME] at that line's indentation;
//   - a conditional key, zzzif-NAME-KEY (YAML's writer sorts it after every
//     plain key, so it never starts a list item), by KEY and its block,
//     kept only when conditions[NAME] holds.
//
// The manifests' namespace, podtoip-system, becomes the release's
// namespace (helm install -n), or namespaceOverride, wherever it appears,
// which includes the admission policies' exemption of the controller's
// ServiceAccount (what artifacts/controller-identity does for a kustomize
// overlay). That exemption is a CEL string literal: the namespace is
// written there only through the helper podtoip-controller.namespace,
// which refuses anything but a DNS-1123 label (values.schema.json says so
// too, but helm install --skip-schema-validation skips it).

const (
	chartName = "podtoip-controller"
	// deployNamespace is the namespace of artifacts/.
	deployNamespace = "podtoip-system"
	namespaceExpr   = `{{ include "podtoip-controller.namespace" . }}`
	labelsTemplate  = chartName + ".labels"
	homepage        = "https://github.com/podtoip/podtoip-controller"

	// keepAnnotation keeps the CRDs when the release is uninstalled: deleting
	// a CRD deletes every object of it, and the IPHistory objects are the
	// only record of who had an address.
	keepAnnotation = "helm.sh/resource-policy"
)

var scalars = map[string]string{
	"replicas": "{{ .Values.replicas }}",
	"image":    `{{ printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion | toString) | quote }}`,
	"scheme":   `{{ ternary "https" "http" .Values.metrics.secure }}`,
	// The export CronJob's (artifacts/export). Its cluster name comes from
	// a ConfigMap an overlay makes; the chart writes the value into the
	// CronJob instead, and refuses to render without one, as the pods
	// would refuse to start without the ConfigMap.
	"exportschedule": "{{ .Values.export.schedule | quote }}",
	"exportformat":   "{{ .Values.export.format | quote }}",
	"exportcluster":  `{{ required "export.clusterName is required with export.enabled: the cluster column of the export, and part of its files' names (the state file is tied to it)" .Values.export.clusterName | quote }}`,
	"exportsize":     "{{ .Values.export.storage.size | quote }}",
}

// certManagerArgs are the flags the cert-manager component adds to the
// controller (the serving certificate's files); chartFiles sets them from
// that component.
var certManagerArgs []string

var lines = map[string]func(indent string) string{
	"labels": func(indent string) string {
		return fmt.Sprintf("%s{{- include %q . | nindent %d }}", indent, labelsTemplate, len(indent))
	},
	"resources": func(indent string) string {
		return fmt.Sprintf("%sresources:\n%s  {{- toYaml .Values.resources | nindent %d }}", indent, indent, len(indent)+2)
	},
	"exportresources": func(indent string) string {
		return fmt.Sprintf("%sresources:\n%s  {{- toYaml .Values.export.resources | nindent %d }}", indent, indent, len(indent)+2)
	},
	// The claim's class only when set: without one, the cluster's default
	// class provisions it, as with the component.
	"storageclass": func(indent string) string {
		return strings.Join([]string{
			"{{- with .Values.export.storage.storageClassName }}",
			indent + "storageClassName: {{ . | quote }}",
			"{{- end }}",
		}, "\n")
	},
	// The flags the values set, after the manifests' own; each only when
	// set, so that the defaults render artifacts/ exactly.
	"args": func(indent string) string {
		return strings.Join([]string{
			"{{- if not .Values.metrics.secure }}",
			indent + "- --metrics-secure=false",
			"{{- end }}",
			`{{- if ne (toString .Values.workers) "" }}`,
			indent + "- --workers={{ .Values.workers }}",
			"{{- end }}",
			`{{- if ne (toString .Values.historyRetention) "" }}`,
			indent + "- --history-retention={{ .Values.historyRetention }}",
			"{{- end }}",
			"{{- if .Values.metrics.certManager.enabled }}",
			indent + "- " + strings.Join(certManagerArgs, "\n"+indent+"- "),
			"{{- end }}",
		}, "\n")
	},
}

var conditions = map[string]string{
	"secure": ".Values.metrics.secure",
	// The certificate's Secret mounted, with cert-manager.
	"certmanager": ".Values.metrics.certManager.enabled",
	// The ServiceMonitor verifies the certificate cert-manager issued, or
	// skips verification of the self-signed one.
	"verifiedtls": "and .Values.metrics.secure .Values.metrics.certManager.enabled",
	"insecuretls": "and .Values.metrics.secure (not .Values.metrics.certManager.enabled)",
}

// objectConditions keep an object only when its condition holds.
var objectConditions = map[string]string{
	"Namespace":                        ".Values.createNamespace",
	"ValidatingAdmissionPolicy":        ".Values.policy.enabled",
	"ValidatingAdmissionPolicyBinding": ".Values.policy.enabled",
	"ServiceMonitor":                   ".Values.metrics.serviceMonitor.enabled",
	"PrometheusRule":                   ".Values.metrics.prometheusRule.enabled",
	"Issuer":                           ".Values.metrics.certManager.enabled",
	"Certificate":                      ".Values.metrics.certManager.enabled",
}

// monitoringKinds are the objects taken from the monitoring component,
// certManagerKinds those from its cert-manager component.
var (
	monitoringKinds  = []string{"ServiceMonitor", "PrometheusRule"}
	certManagerKinds = []string{"Issuer", "Certificate"}
)

// The export component's objects (artifacts/export) carry the label
// componentLabel=exportComponent; the chart keeps each only when
// exportCondition holds.
const (
	componentLabel  = "app.kubernetes.io/component"
	exportComponent = "export"
	exportCondition = ".Values.export.enabled"
	// exportClusterEnv is the export container's variable that names the
	// cluster, from the ConfigMap an overlay makes.
	exportClusterEnv = "CLUSTER_NAME"
)

// header starts every generated file; templateHeader every template, as a
// template comment, which renders to nothing.
const (
	header         = "# Generated by `make chart` from artifacts/; do not edit.\n"
	templateHeader = "{{- /* Generated by `make chart` from artifacts/; do not edit. */ -}}\n"
)

// chartFiles returns the chart made from artifactsDir: file name (relative
// to the chart's directory) to contents.
func chartFiles(artifactsDir string) (map[string][]byte, error) {
	base, err := kustomize.Objects(artifactsDir, kustomize.Overlay{})
	if err != nil {
		return nil, err
	}
	withMonitoring, err := kustomize.Objects(artifactsDir, kustomize.Overlay{Components: []string{"monitoring"}})
	if err != nil {
		return nil, err
	}
	withCertManager, err := kustomize.Objects(artifactsDir, kustomize.Overlay{Components: []string{"monitoring", "monitoring/cert-manager"}})
	if err != nil {
		return nil, err
	}
	withExport, err := kustomize.Objects(artifactsDir, kustomize.Overlay{Components: []string{"export"}})
	if err != nil {
		return nil, err
	}
	objs := slices.Clone(base)
	var cronJob, claim map[string]any
	for _, o := range withExport {
		if !isExport(o) {
			continue
		}
		objs = append(objs, o)
		switch kind(o) {
		case "CronJob":
			cronJob = o
		case "PersistentVolumeClaim":
			claim = o
		}
	}
	if cronJob == nil || claim == nil {
		return nil, fmt.Errorf("the export component of %s renders no CronJob or PersistentVolumeClaim labelled %s=%s", artifactsDir, componentLabel, exportComponent)
	}
	for _, o := range withMonitoring {
		if slices.Contains(monitoringKinds, kind(o)) {
			objs = append(objs, o)
		}
	}
	var certDeployment, certMonitor map[string]any
	for _, o := range withCertManager {
		switch {
		case slices.Contains(certManagerKinds, kind(o)):
			objs = append(objs, o)
		case kind(o) == "Deployment":
			certDeployment = o
		case kind(o) == "ServiceMonitor":
			certMonitor = o
		}
	}
	if certDeployment == nil || certMonitor == nil {
		return nil, fmt.Errorf("the cert-manager component of %s renders no Deployment or ServiceMonitor", artifactsDir)
	}

	files := map[string][]byte{}
	var deployment map[string]any
	for _, o := range objs {
		switch kind(o) {
		case "Deployment":
			deployment = o
			if o, err = withCertManagerDeployment(o, certDeployment); err != nil {
				return nil, err
			}
		case "ServiceMonitor":
			if o, err = withCertManagerMonitor(o, certMonitor); err != nil {
				return nil, err
			}
		}
		name, body, err := objectTemplate(o)
		if err != nil {
			return nil, err
		}
		if _, dup := files[name]; dup {
			return nil, fmt.Errorf("two objects would be written to %s", name)
		}
		files[name] = body
	}
	if deployment == nil {
		return nil, fmt.Errorf("%s renders no Deployment", artifactsDir)
	}
	values, err := valuesFile(deployment, cronJob, claim)
	if err != nil {
		return nil, err
	}
	files["values.yaml"] = values
	files["values.schema.json"] = []byte(valuesSchema)
	_, tag, _ := strings.Cut(image(deployment), ":")
	files["Chart.yaml"] = []byte(header + fmt.Sprintf(chartYAML, homepage, tag))
	files["templates/_helpers.tpl"] = []byte(helpers)
	files["templates/NOTES.txt"] = []byte(notes)
	return files, nil
}

// container is the Deployment's one container; pod its pod spec.
func container(deployment map[string]any) map[string]any {
	return pod(deployment)["containers"].([]any)[0].(map[string]any)
}

func pod(deployment map[string]any) map[string]any {
	return deployment["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
}

// withCertManagerDeployment returns the base Deployment with what the
// cert-manager component adds to it (the Secret's volume and mount, the
// flags naming its files), each behind the certmanager condition; it
// fails on any other difference, which the chart would not carry.
func withCertManagerDeployment(base, cert map[string]any) (map[string]any, error) {
	base, cert = deepCopy(base), deepCopy(cert)
	bc, cc := container(base), container(cert)
	baseArgs, certArgs := bc["args"].([]any), cc["args"].([]any)
	if len(certArgs) < len(baseArgs) || !slices.Equal(certArgs[:len(baseArgs)], baseArgs) {
		return nil, fmt.Errorf("the cert-manager component changes the controller's flags %v; the chart only adds flags after them", baseArgs)
	}
	certManagerArgs = nil
	for _, a := range certArgs[len(baseArgs):] {
		certManagerArgs = append(certManagerArgs, a.(string))
	}
	adds := []struct {
		in  map[string]any
		key string
		to  map[string]any
		v   any
	}{{in: cc, key: "volumeMounts", to: bc}, {in: pod(cert), key: "volumes", to: pod(base)}}
	for i, m := range adds {
		if _, ok := m.to[m.key]; ok {
			return nil, fmt.Errorf("the Deployment has %s already; the chart adds the cert-manager component's only to none", m.key)
		}
		adds[i].v = m.in[m.key]
		delete(m.in, m.key)
	}
	cc["args"] = baseArgs
	if !reflect.DeepEqual(base, cert) {
		return nil, fmt.Errorf("the cert-manager component changes the Deployment beyond its volume, mount and flags; teach hack/release/chart to carry it")
	}
	for _, m := range adds {
		m.to["zzzif-certmanager-"+m.key] = m.v
	}
	return base, nil
}

// withCertManagerMonitor returns the base ServiceMonitor with the
// cert-manager component's tlsConfig as an alternative to its own: the
// base's (insecureSkipVerify) without cert-manager, the component's (the
// CA and the Service's name) with it.
func withCertManagerMonitor(base, cert map[string]any) (map[string]any, error) {
	base = deepCopy(base)
	be := base["spec"].(map[string]any)["endpoints"].([]any)
	ce := cert["spec"].(map[string]any)["endpoints"].([]any)
	if len(be) != len(ce) {
		return nil, fmt.Errorf("the cert-manager component changes the ServiceMonitor's endpoints")
	}
	for i := range be {
		e, c := be[i].(map[string]any), ce[i].(map[string]any)
		if v, ok := c["tlsConfig"].(map[string]any); !ok || v["insecureSkipVerify"] != nil {
			return nil, fmt.Errorf("the cert-manager component's ServiceMonitor endpoint %d does not verify TLS: %v", i, c["tlsConfig"])
		}
		e["zzzif-verifiedtls-tlsConfig"] = c["tlsConfig"]
		e["zzzif-insecuretls-tlsConfig"] = e["tlsConfig"]
		delete(e, "tlsConfig")
	}
	return base, nil
}

// image is the image of the Deployment's container.
func image(deployment map[string]any) string {
	c := deployment["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
	s, _ := c["image"].(string)
	return s
}

func kind(o map[string]any) string { s, _ := o["kind"].(string); return s }

// isExport reports whether o is one of the export component's objects.
func isExport(o map[string]any) bool {
	meta, _ := o["metadata"].(map[string]any)
	labels, _ := meta["labels"].(map[string]any)
	return labels[componentLabel] == exportComponent
}

// exportContainer is the export CronJob's one container; exportPod its pod
// spec.
func exportContainer(cronJob map[string]any) (map[string]any, error) {
	containers, _ := exportPod(cronJob)["containers"].([]any)
	if len(containers) != 1 {
		return nil, fmt.Errorf("the export CronJob has %d containers, the chart expects 1", len(containers))
	}
	return containers[0].(map[string]any), nil
}

func exportPod(cronJob map[string]any) map[string]any {
	job := cronJob["spec"].(map[string]any)["jobTemplate"].(map[string]any)["spec"].(map[string]any)
	return job["template"].(map[string]any)["spec"].(map[string]any)
}

// exportFormat returns the index of the value of -o in args.
func exportFormat(args []any) (int, error) {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "-o" {
			return i + 1, nil
		}
	}
	return 0, fmt.Errorf("the export CronJob's args %v have no -o FORMAT", args)
}

// exportStorage is the export claim's requested size, as a map to set it in.
func exportStorage(claim map[string]any) map[string]any {
	r, _ := claim["spec"].(map[string]any)["resources"].(map[string]any)
	req, _ := r["requests"].(map[string]any)
	return req
}

func name(o map[string]any) string {
	m, _ := o["metadata"].(map[string]any)
	s, _ := m["name"].(string)
	return s
}

// objectTemplate turns one object into a template, and names its file.
func objectTemplate(o map[string]any) (string, []byte, error) {
	o = deepCopy(o)
	meta := o["metadata"].(map[string]any)
	labels, _ := meta["labels"].(map[string]any)
	if labels == nil {
		labels = map[string]any{}
		meta["labels"] = labels
	}
	labels["zzzline-labels"] = ""
	switch kind(o) {
	case "CustomResourceDefinition":
		ann, _ := meta["annotations"].(map[string]any)
		if ann == nil {
			ann = map[string]any{}
			meta["annotations"] = ann
		}
		ann[keepAnnotation] = "keep"
	case "Deployment":
		spec := o["spec"].(map[string]any)
		spec["replicas"] = "@@replicas@@"
		pod := spec["template"].(map[string]any)["spec"].(map[string]any)
		containers := pod["containers"].([]any)
		if len(containers) != 1 {
			return "", nil, fmt.Errorf("the Deployment has %d containers, the chart expects 1", len(containers))
		}
		c := containers[0].(map[string]any)
		c["image"] = "@@image@@"
		c["args"] = append(c["args"].([]any), "@@line:args@@")
		if _, ok := c["resources"]; !ok {
			return "", nil, fmt.Errorf("the Deployment's container has no resources for the chart's default")
		}
		delete(c, "resources")
		c["zzzline-resources"] = ""
	case "CronJob":
		if err := templateCronJob(o); err != nil {
			return "", nil, err
		}
	case "PersistentVolumeClaim":
		req := exportStorage(o)
		if req == nil || req["storage"] == nil {
			return "", nil, fmt.Errorf("the export's PersistentVolumeClaim requests no storage for the chart's default")
		}
		if _, ok := o["spec"].(map[string]any)["storageClassName"]; ok {
			return "", nil, fmt.Errorf("the export's PersistentVolumeClaim names a storage class; the chart sets it from export.storage.storageClassName only")
		}
		req["storage"] = "@@exportsize@@"
		o["spec"].(map[string]any)["zzzline-storageclass"] = ""
	case "ServiceMonitor":
		for _, e := range o["spec"].(map[string]any)["endpoints"].([]any) {
			e := e.(map[string]any)
			if e["scheme"] != "https" {
				return "", nil, fmt.Errorf("a ServiceMonitor endpoint has scheme %v; the chart expects https", e["scheme"])
			}
			e["scheme"] = "@@scheme@@"
			// Plain HTTP has no token to send (and no certificate to
			// check: withCertManagerMonitor made tlsConfig conditional).
			for _, k := range []string{"bearerTokenFile"} {
				if v, ok := e[k]; ok {
					e["zzzif-secure-"+k] = v
					delete(e, k)
				}
			}
		}
	}
	b, err := yaml.Marshal(o)
	if err != nil {
		return "", nil, err
	}
	text, err := templatize(string(b))
	if err != nil {
		return "", nil, fmt.Errorf("%s %s: %w", kind(o), name(o), err)
	}
	if cond, ok := objectConditions[kind(o)]; ok {
		text = "{{- if " + cond + " }}\n" + text + "{{- end }}\n"
	}
	if isExport(o) {
		text = "{{- if " + exportCondition + " }}\n" + text + "{{- end }}\n"
	}
	file := fmt.Sprintf("templates/%s-%s.yaml", strings.ToLower(kind(o)), name(o))
	return file, []byte(templateHeader + text), nil
}

// templateCronJob marks what the export.* values set in the export
// CronJob: the schedule, the image (the controller's), the format, the
// cluster's name and the resources.
func templateCronJob(o map[string]any) error {
	o["spec"].(map[string]any)["schedule"] = "@@exportschedule@@"
	c, err := exportContainer(o)
	if err != nil {
		return err
	}
	c["image"] = "@@image@@"
	args, _ := c["args"].([]any)
	i, err := exportFormat(args)
	if err != nil {
		return err
	}
	args[i] = "@@exportformat@@"
	set := false
	for _, e := range c["env"].([]any) {
		e := e.(map[string]any)
		if e["name"] == exportClusterEnv {
			delete(e, "valueFrom")
			e["value"] = "@@exportcluster@@"
			set = true
		}
	}
	if !set {
		return fmt.Errorf("the export CronJob's container has no variable %s for the cluster's name", exportClusterEnv)
	}
	if _, ok := c["resources"]; !ok {
		return fmt.Errorf("the export CronJob's container has no resources for the chart's default")
	}
	delete(c, "resources")
	c["zzzline-exportresources"] = ""
	return nil
}

var (
	scalarToken = regexp.MustCompile(`'@@([a-z]+)@@'`)
	lineToken   = regexp.MustCompile(`^(\s*)(?:- '@@line:([a-z]+)@@'|zzzline-([a-z]+): "")$`)
	condKey     = regexp.MustCompile(`^(\s*)zzzif-([a-z]+)-([A-Za-z]+):(.*)$`)
	anyToken    = regexp.MustCompile(`@@|zzzif-|zzzline-`)
)

// templatize turns the YAML of an object with tokens into a template.
func templatize(y string) (string, error) {
	// What the manifests say in braces (the alert rules' {{ $value }}) is
	// theirs, not the chart's: printed as it is.
	y = strings.NewReplacer("{{", `{{ "{{" }}`, "}}", `{{ "}}" }}`).Replace(y)
	y = strings.ReplaceAll(y, deployNamespace, namespaceExpr)
	var out []string
	in := strings.Split(strings.TrimSuffix(y, "\n"), "\n")
	for i := 0; i < len(in); i++ {
		line := in[i]
		if m := lineToken.FindStringSubmatch(line); m != nil {
			f, ok := lines[m[2]+m[3]]
			if !ok {
				return "", fmt.Errorf("no line template %q", m[2]+m[3])
			}
			out = append(out, f(m[1]))
			continue
		}
		if m := condKey.FindStringSubmatch(line); m != nil {
			cond, ok := conditions[m[2]]
			if !ok {
				return "", fmt.Errorf("no condition %q", m[2])
			}
			out = append(out, "{{- if "+cond+" }}", m[1]+m[3]+":"+m[4])
			// The key's block: deeper lines, and the items of a list,
			// which YAML's writer puts at the key's own indentation.
			for i+1 < len(in) && (indentOf(in[i+1]) > len(m[1]) || indentOf(in[i+1]) == len(m[1]) && strings.HasPrefix(in[i+1][len(m[1]):], "- ")) {
				i++
				out = append(out, in[i])
			}
			out = append(out, "{{- end }}")
			continue
		}
		var err error
		line = scalarToken.ReplaceAllStringFunc(line, func(tok string) string {
			expr, ok := scalars[scalarToken.FindStringSubmatch(tok)[1]]
			if !ok {
				err = fmt.Errorf("no scalar template for %s", tok)
			}
			return expr
		})
		if err != nil {
			return "", err
		}
		if anyToken.MatchString(line) {
			return "", fmt.Errorf("a token is left in %q", line)
		}
		out = append(out, line)
	}
	return strings.Join(out, "\n") + "\n", nil
}

func indentOf(s string) int { return len(s) - len(strings.TrimLeft(s, " ")) }

func deepCopy(o map[string]any) map[string]any {
	b, err := yaml.Marshal(o)
	if err != nil {
		panic(err)
	}
	var c map[string]any
	if err := yaml.Unmarshal(b, &c); err != nil {
		panic(err)
	}
	return c
}

// valuesFile writes values.yaml, whose defaults are what artifacts/ says,
// and artifacts/export for the export's.
func valuesFile(deployment, cronJob, claim map[string]any) ([]byte, error) {
	spec := deployment["spec"].(map[string]any)
	c := spec["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
	repo, _, ok := strings.Cut(image(deployment), ":")
	if !ok {
		return nil, fmt.Errorf("the Deployment's image %q has no tag", image(deployment))
	}
	resources, err := yaml.Marshal(c["resources"])
	if err != nil {
		return nil, err
	}
	ec, err := exportContainer(cronJob)
	if err != nil {
		return nil, err
	}
	exportResources, err := yaml.Marshal(ec["resources"])
	if err != nil {
		return nil, err
	}
	args, _ := ec["args"].([]any)
	i, err := exportFormat(args)
	if err != nil {
		return nil, err
	}
	// Quoted as JSON, which YAML reads: "@hourly" starts with a
	// character YAML reserves.
	quote := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	var b bytes.Buffer
	err = template.Must(template.New("values").Parse(valuesYAML)).Execute(&b, map[string]any{
		"Replicas":        spec["replicas"],
		"Image":           repo,
		"Resources":       indent(string(resources), "  "),
		"ExportSchedule":  quote(cronJob["spec"].(map[string]any)["schedule"]),
		"ExportFormat":    args[i],
		"ExportSize":      quote(exportStorage(claim)["storage"]),
		"ExportResources": indent(string(exportResources), "    "),
	})
	return append([]byte(header), b.Bytes()...), err
}

func indent(s, by string) string {
	return by + strings.ReplaceAll(strings.TrimSuffix(s, "\n"), "\n", "\n"+by)
}

// writeChart writes files into dir, replacing what a previous generation
// left there.
func writeChart(dir string, files map[string][]byte) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	for name, b := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

const chartYAML = `apiVersion: v2
name: podtoip-controller
description: >-
  Keeps one PodToIp object for every pod with an IP address, so that "who
  has this IP?" is one kubectl command, and the history of every address,
  for "who had it?". Made from the kustomization in artifacts/.
type: application
home: %s
# The chart's own version; a release packs it with the release's version.
version: 0.0.0-dev
# The image tag when image.tag is empty.
appVersion: %s
# The CRDs' selectableFields are GA in Kubernetes 1.32.
kubeVersion: ">=1.32.0-0"
`

const helpers = templateHeader + `{{/* The controller's namespace: the release's, or namespaceOverride.
It is written into the admission policies' CEL expressions as a string
literal, so anything but a DNS-1123 label is refused here, whatever
values.schema.json (which --skip-schema-validation skips) let through.
It also refuses the cert-manager option without HTTPS, which it would
serve nothing to. */}}
{{- define "podtoip-controller.namespace" -}}
{{- $ns := .Values.namespaceOverride | default .Release.Namespace | toString -}}
{{- if or (gt (len $ns) 63) (not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" $ns)) -}}
{{- fail (printf "the controller's namespace %q (namespaceOverride, or the release's namespace) is not a DNS-1123 label: at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit" $ns) -}}
{{- end -}}
{{- if and .Values.metrics.certManager.enabled (not .Values.metrics.secure) -}}
{{- fail "metrics.certManager.enabled needs metrics.secure: the certificate is for the HTTPS metrics endpoint" -}}
{{- end -}}
{{- $ns -}}
{{- end }}

{{/* The labels Helm's tooling expects on every object, beside the
manifests' own (which the chart keeps: selectors do not change). */}}
{{- define "podtoip-controller.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
`

const valuesYAML = `
# The controller, its ServiceAccount and everything namespaced go to the
# release's namespace (helm install -n NAMESPACE), which the admission
# policies then exempt the ServiceAccount in. namespaceOverride: another
# namespace instead (a DNS-1123 label). Give the controller a namespace of
# its own: whoever can create pods, tokens or secrets, or exec, there can
# act as it and write the answers.
namespaceOverride: ""
# Create the controller's namespace, labelled to enforce the "restricted"
# Pod Security Standard. For namespaceOverride, or for helm template |
# kubectl apply -f -: helm install needs the release's own namespace to
# exist first (helm install --create-namespace), and cannot then take it
# over; label that one yourself (NOTES.txt says how).
createNamespace: false

image:
  repository: {{ .Image }}
  # Empty: the chart's appVersion.
  tag: ""

# Two replicas, one active: the standby keeps warm caches and takes the
# Lease over when the leader goes away.
replicas: {{ .Replicas }}

# Sized from make bench for up to 150,000 pods (docs/operations.md, "Sizing").
resources:
{{ .Resources }}

# --workers: pods reconciled concurrently. Empty: the controller's default (32).
workers: ""
# --history-retention: how long an address's IPHistory keeps a hold after it
# ended; 0 turns the history off. Empty: the controller's default (24h).
historyRetention: ""

metrics:
  # HTTPS, only for callers the API server authorizes (ClusterRole
  # podtoip-controller-metrics-reader). false: plain HTTP (--metrics-secure=false).
  secure: true
  # A certificate for the metrics endpoint from cert-manager (its CRDs
  # must be installed), from a CA of the controller's own, instead of a
  # self-signed one; the ServiceMonitor then verifies it (the CA and the
  # Service's name) instead of skipping verification. Needs secure.
  certManager:
    enabled: false
  # A ServiceMonitor for the Prometheus Operator (its CRDs must be installed).
  serviceMonitor:
    enabled: false
  # The alert rules of artifacts/monitoring, as a PrometheusRule, among
  # them PodToIpAdmissionPolicyNotBound: without them, or another alert on
  # podtoip_admission_policy_bound, nothing says when the policies stop
  # protecting the answers.
  prometheusRule:
    enabled: false

policy:
  # The ValidatingAdmissionPolicies that let only the controller write
  # PodToIps and the history (docs/operations.md, "The admission policy").
  # Off, anyone RBAC lets write them can forge the answers.
  enabled: true

# kubectl ptp export run in the cluster as a CronJob, as the component
# artifacts/export does (docs/export.md): the history as files on a
# PersistentVolumeClaim, each hold in exactly one run's files, for you to
# ship to object storage. It runs the image's /kubectl-ptp as a
# ServiceAccount of its own that may only read the history.
export:
  enabled: false
  # The cluster column of the files, and part of their names; required
  # when enabled. The state file is tied to it: keep it once set.
  clusterName: ""
  # When it runs (a CronJob schedule). Runs must be less than
  # historyRetention apart.
  schedule: {{ .ExportSchedule }}
  # parquet, csv or jsonl.
  format: {{ .ExportFormat }}
  storage:
    # The claim's size: for the files written between two shipments
    # (docs/export.md, "Storage").
    size: {{ .ExportSize }}
    # Empty: the cluster's default storage class.
    storageClassName: ""
  resources:
{{ .ExportResources }}
`

// valuesSchema is values.schema.json: helm install, upgrade, lint and
// template refuse values of the wrong type, unknown values (a typo, or
// the namespace value of older charts, would otherwise be ignored), and a
// namespaceOverride that is not a DNS-1123 label.
const valuesSchema = `{
  "$schema": "http://json-schema.org/draft-07/schema#",
  "title": "podtoip-controller values",
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "namespaceOverride": {
      "description": "The controller's namespace instead of the release's: a DNS-1123 label, or empty.",
      "type": "string",
      "maxLength": 63,
      "pattern": "^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$"
    },
    "createNamespace": {"type": "boolean"},
    "image": {
      "type": "object",
      "additionalProperties": false,
      "properties": {
        "repository": {"type": "string", "minLength": 1},
        "tag": {"type": "string"}
      }
    },
    "replicas": {"type": "integer", "minimum": 0},
    "resources": {
      "type": "object",
      "additionalProperties": false,
      "properties": {
        "requests": {"type": "object", "additionalProperties": {"type": ["string", "number"]}},
        "limits": {"type": "object", "additionalProperties": {"type": ["string", "number"]}}
      }
    },
    "workers": {
      "description": "--workers; empty for the controller's default.",
      "anyOf": [{"type": "integer", "minimum": 1}, {"type": "string", "pattern": "^([1-9][0-9]*)?$"}]
    },
    "historyRetention": {
      "description": "--history-retention, a Go duration (24h, 90m); 0 turns the history off; empty for the controller's default.",
      "anyOf": [{"type": "integer", "enum": [0]}, {"type": "string", "pattern": "^(0|([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+)?$"}]
    },
    "metrics": {
      "type": "object",
      "additionalProperties": false,
      "properties": {
        "secure": {"type": "boolean"},
        "certManager": {"type": "object", "additionalProperties": false, "properties": {"enabled": {"type": "boolean"}}},
        "serviceMonitor": {"type": "object", "additionalProperties": false, "properties": {"enabled": {"type": "boolean"}}},
        "prometheusRule": {"type": "object", "additionalProperties": false, "properties": {"enabled": {"type": "boolean"}}}
      }
    },
    "policy": {"type": "object", "additionalProperties": false, "properties": {"enabled": {"type": "boolean"}}},
    "export": {
      "type": "object",
      "additionalProperties": false,
      "properties": {
        "enabled": {"type": "boolean"},
        "clusterName": {"description": "The export's cluster column and part of its files' names; required with enabled.", "type": "string"},
        "schedule": {"description": "A CronJob schedule: five fields, or a macro such as @hourly.", "type": "string", "minLength": 1},
        "format": {"enum": ["parquet", "csv", "jsonl"]},
        "storage": {
          "type": "object",
          "additionalProperties": false,
          "properties": {
            "size": {"description": "A quantity: 1Gi, 500Mi.", "type": "string", "pattern": "^[0-9]+(\\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$"},
            "storageClassName": {"type": "string"}
          }
        },
        "resources": {
          "type": "object",
          "additionalProperties": false,
          "properties": {
            "requests": {"type": "object", "additionalProperties": {"type": ["string", "number"]}},
            "limits": {"type": "object", "additionalProperties": {"type": ["string", "number"]}}
          }
        }
      }
    }
  }
}
`

// notes is NOTES.txt, what helm install prints: how to check the install,
// and a warning for each setting that leaves the answers unprotected or
// unwatched.
const notes = templateHeader + `{{- $ns := include "podtoip-controller.namespace" . -}}
podtoip-controller runs in namespace {{ $ns }}, as the ServiceAccount
{{ $ns }}/podtoip-controller. Check the install, as a cluster admin:

  kubectl -n {{ $ns }} rollout status deploy/podtoip-controller
  kubectl ptp check --controller-namespace {{ $ns }}
{{- if not .Values.policy.enabled }}

WARNING: policy.enabled is false: the admission policies are not installed.
Anyone RBAC lets write PodToIps or IPHistories (a namespace admin, a tenant
with "*" on its namespace) can make "who has this IP?" and "who had it?"
name the wrong pod. Set policy.enabled=true unless another policy guards them.
{{- end }}
{{- if not .Values.metrics.prometheusRule.enabled }}

WARNING: metrics.prometheusRule.enabled is false: no alert fires when the
admission policies stop being in force (PodToIpAdmissionPolicyNotBound),
nor on conflicts or foreign objects. Set it (with the Prometheus
Operator), or alert on podtoip_admission_policy_bound == 0 yourself.
{{- end }}
{{- if and .Values.metrics.serviceMonitor.enabled .Values.metrics.secure (not .Values.metrics.certManager.enabled) }}

NOTE: the ServiceMonitor skips TLS verification of the controller's
self-signed certificate; metrics.certManager.enabled=true makes it verify
a certificate from cert-manager.
{{- end }}
{{- if .Values.export.enabled }}

The history is exported by the CronJob podtoip-export ({{ .Values.export.schedule }})
into the PersistentVolumeClaim podtoip-export; ship the files to object
storage as docs/export.md shows. A first run now:

  kubectl -n {{ $ns }} create job --from=cronjob/podtoip-export podtoip-export-first
{{- end }}
{{- if not .Values.createNamespace }}

Label the namespace to enforce the "restricted" Pod Security Standard the
controller is built for:

  kubectl label namespace {{ $ns }} pod-security.kubernetes.io/enforce=restricted
{{- end }}
{{- $others := list }}
{{- range (lookup "v1" "ServiceAccount" $ns "").items }}
{{- if not (has .metadata.name (list "default" "podtoip-controller")) }}
{{- $others = append $others (printf "ServiceAccount %s" .metadata.name) }}
{{- end }}
{{- end }}
{{- range (lookup "v1" "Pod" $ns "").items }}
{{- if ne (.spec.serviceAccountName | default "default") "podtoip-controller" }}
{{- $others = append $others (printf "pod %s" .metadata.name) }}
{{- end }}
{{- end }}
{{- if or $others (has $ns (list "default" "kube-system" "kube-public")) }}

WARNING: namespace {{ $ns }} is shared{{ if $others }}: it holds {{ join ", " $others }}{{ end }}.
The admission policies exempt the controller's ServiceAccount there, and
anyone who can create pods, tokens or secrets, or exec, in {{ $ns }} can act
as it and write the answers. Install the controller in a namespace of its
own (helm install -n, or namespaceOverride).
{{- else }}

Keep {{ $ns }} to the controller alone: anyone who can create pods, tokens or
secrets, or exec, there can act as its ServiceAccount and write the answers.
{{- end }}
`
