package access

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"example.com/podtoip-controller/artifacts"
)

// Shipped is one admission policy of artifacts/policy.yaml and its
// binding, as this version ships them.
type Shipped struct {
	Policy  *admissionv1.ValidatingAdmissionPolicy
	Binding *admissionv1.ValidatingAdmissionPolicyBinding
}

// ShippedPolicies returns the policies built into the binary, by name. The
// file is part of the build, so an error is a broken build; the tests
// read it.
func ShippedPolicies() (map[string]Shipped, error) {
	out := map[string]Shipped{}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(artifacts.Policy)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading the shipped artifacts/policy.yaml: %w", err)
		}
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return nil, fmt.Errorf("reading the shipped artifacts/policy.yaml: %w", err)
		}
		switch meta.Kind {
		case "ValidatingAdmissionPolicy":
			p := &admissionv1.ValidatingAdmissionPolicy{}
			if err := yaml.UnmarshalStrict(doc, p); err != nil {
				return nil, fmt.Errorf("reading the shipped artifacts/policy.yaml: %w", err)
			}
			s := out[p.Name]
			s.Policy = p
			out[p.Name] = s
		case "ValidatingAdmissionPolicyBinding":
			b := &admissionv1.ValidatingAdmissionPolicyBinding{}
			if err := yaml.UnmarshalStrict(doc, b); err != nil {
				return nil, fmt.Errorf("reading the shipped artifacts/policy.yaml: %w", err)
			}
			s := out[b.Name]
			s.Binding = b
			out[b.Name] = s
		}
	}
	for _, name := range policyNames {
		if s := out[name]; s.Policy == nil || s.Binding == nil {
			return nil, fmt.Errorf("the shipped artifacts/policy.yaml lacks the policy or the binding %s", name)
		}
	}
	return out, nil
}

// exemptionCondition names the matchCondition that exempts the
// controller's ServiceAccount; an overlay in another namespace changes
// the username in it, and nothing else.
const exemptionCondition = "not-the-controller"

// exemptionExpr is that condition's expression: the ServiceAccount's
// username as string literals joined by +, so that kustomize can set the
// namespace and name (artifacts/controller-identity).
var exemptionExpr = regexp.MustCompile(`^request\.userInfo\.username != ((?:"[^"\\]*"(?: \+ )?)+)$`)

// exemptedUser returns the username the expression of the exemption
// compares with, if it has the shipped form.
func exemptedUser(expr string) (string, bool) {
	m := exemptionExpr.FindStringSubmatch(oneLine(expr))
	if m == nil || strings.HasSuffix(m[1], " + ") {
		return "", false
	}
	var user strings.Builder
	for _, lit := range strings.Split(m[1], " + ") {
		user.WriteString(strings.Trim(lit, `"`))
	}
	return user.String(), true
}

// oneLine collapses runs of white space, as a YAML folded scalar wraps
// them, so that two renderings of one expression compare equal.
func oneLine(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(strings.Join(strings.Fields(s), " "), "( ", "("), " )", ")")
}

// PolicyWeakenings compares a live policy with the shipped one and
// returns each difference that lets through what the shipped one
// refuses, naming the field: a failurePolicy of Ignore, narrowed
// matchConstraints, a matchCondition added or changed (the exemption may
// name another ServiceAccount, as an overlay in another namespace does,
// but only exempt when exempt is not ""), a validation or variable
// removed or changed. What only adds protection (another validation) is
// no weakening. Both kube-apiserver's defaults and a YAML rendering's
// line breaks are allowed for.
func PolicyWeakenings(shipped, live *admissionv1.ValidatingAdmissionPolicy, exempt string) []string {
	var out []string
	if fp := live.Spec.FailurePolicy; fp != nil && *fp == admissionv1.Ignore {
		out = append(out, "spec.failurePolicy is Ignore: a write the policy cannot evaluate is let through")
	}
	if live.Spec.ParamKind != nil && shipped.Spec.ParamKind == nil {
		out = append(out, "spec.paramKind is set: the policy then refuses nothing without a parameter the shipped binding does not give")
	}
	out = append(out, matchWeakenings("spec.matchConstraints", shipped.Spec.MatchConstraints, live.Spec.MatchConstraints, true)...)

	liveConds := map[string]string{}
	for _, c := range live.Spec.MatchConditions {
		liveConds[c.Name] = c.Expression
	}
	for _, c := range shipped.Spec.MatchConditions {
		expr, ok := liveConds[c.Name]
		delete(liveConds, c.Name)
		switch {
		case !ok:
			// Without the exemption the policy refuses the controller
			// too: no weakening, the controller says so when refused.
		case c.Name == exemptionCondition:
			user, ok := exemptedUser(expr)
			switch {
			case !ok || !strings.HasPrefix(user, "system:serviceaccount:") || strings.Count(user, ":") != 3:
				out = append(out, fmt.Sprintf("spec.matchConditions[%s] is %q, not the exemption of one ServiceAccount", c.Name, oneLine(expr)))
			case exempt != "" && user != exempt:
				out = append(out, fmt.Sprintf("spec.matchConditions[%s] exempts %s, not the controller's ServiceAccount %s", c.Name, user, exempt))
			}
		case oneLine(expr) != oneLine(c.Expression):
			out = append(out, fmt.Sprintf("spec.matchConditions[%s] is changed: it may leave requests unchecked", c.Name))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(liveConds)) {
		out = append(out, fmt.Sprintf("spec.matchConditions[%s] is added: requests it does not match are not checked", name))
	}

	liveVars := map[string]string{}
	for _, v := range live.Spec.Variables {
		liveVars[v.Name] = oneLine(v.Expression)
	}
	for _, v := range shipped.Spec.Variables {
		if liveVars[v.Name] != oneLine(v.Expression) {
			out = append(out, fmt.Sprintf("spec.variables[%s] is missing or changed", v.Name))
		}
	}
	var liveValidations []string
	for _, v := range live.Spec.Validations {
		liveValidations = append(liveValidations, oneLine(v.Expression))
	}
	for i, v := range shipped.Spec.Validations {
		if !slices.Contains(liveValidations, oneLine(v.Expression)) {
			out = append(out, fmt.Sprintf("spec.validations[%d] (%s) is missing or changed", i, firstWords(v.Message, 12)))
		}
	}
	return out
}

// BindingWeakenings compares a live binding with the shipped one and
// returns each difference that lets through what its policy refuses,
// naming the field: another policy bound, no Deny (Warn or Audit only
// report), matchResources that narrow what it applies to, a paramRef.
func BindingWeakenings(shipped, live *admissionv1.ValidatingAdmissionPolicyBinding) []string {
	var out []string
	if live.Spec.PolicyName != shipped.Spec.PolicyName {
		out = append(out, fmt.Sprintf("spec.policyName is %q, not %s: that policy is not enforced by it", live.Spec.PolicyName, shipped.Spec.PolicyName))
	}
	if !slices.Contains(live.Spec.ValidationActions, admissionv1.Deny) {
		out = append(out, fmt.Sprintf("spec.validationActions %v lack Deny: refusals are only reported, writes go through", live.Spec.ValidationActions))
	}
	if live.Spec.ParamRef != nil && shipped.Spec.ParamRef == nil {
		out = append(out, "spec.paramRef is set: the shipped policy takes no parameter")
	}
	return append(out, matchWeakenings("spec.matchResources", shipped.Spec.MatchResources, live.Spec.MatchResources, false)...)
}

// matchWeakenings returns how live matches fewer requests than shipped.
// A policy's matchConstraints must match every request the shipped ones
// do (constraints: its resourceRules say what is matched); a binding's
// matchResources, when set, may only narrow, so any resourceRules there
// narrow too.
func matchWeakenings(field string, shipped, live *admissionv1.MatchResources, constraints bool) []string {
	var out []string
	if live == nil {
		if constraints && shipped != nil && len(shipped.ResourceRules) > 0 {
			out = append(out, field+" is missing: the policy matches nothing")
		}
		return out
	}
	if !emptySelector(live.NamespaceSelector) {
		out = append(out, field+".namespaceSelector is set: namespaces it does not select are not protected")
	}
	if !emptySelector(live.ObjectSelector) {
		out = append(out, field+".objectSelector is set: objects it does not select are not protected")
	}
	if len(live.ExcludeResourceRules) > 0 {
		out = append(out, field+".excludeResourceRules is set: what it excludes is not protected")
	}
	if mp := live.MatchPolicy; mp != nil && *mp == admissionv1.Exact {
		out = append(out, field+".matchPolicy is Exact: requests through other versions of the resources are not matched")
	}
	if !constraints {
		if len(live.ResourceRules) > 0 {
			out = append(out, field+".resourceRules is set: resources it leaves out are not protected")
		}
		return out
	}
	if shipped == nil {
		return out
	}
	for _, want := range shipped.ResourceRules {
		for _, group := range want.APIGroups {
			for _, version := range want.APIVersions {
				for _, resource := range want.Resources {
					for _, op := range want.Operations {
						if !slices.ContainsFunc(live.ResourceRules, func(r admissionv1.NamedRuleWithOperations) bool {
							return ruleCovers(r, group, version, resource, op)
						}) {
							out = append(out, fmt.Sprintf("%s.resourceRules no longer match %s of %s (group %s, versions %s)", field, op, resource, group, version))
						}
					}
				}
			}
		}
	}
	return out
}

// ruleCovers reports whether r matches every request the rule entry
// (group, version, resource, op) of the shipped policy does, whatever its
// scope and names.
func ruleCovers(r admissionv1.NamedRuleWithOperations, group, version, resource string, op admissionv1.OperationType) bool {
	has := func(list []string, v string) bool { return slices.Contains(list, "*") || slices.Contains(list, v) }
	resourceHas := func(v string) bool {
		if has(r.Resources, v) {
			return true
		}
		// "*/*" and "res/*" cover subresources, "*" alone does not.
		base, sub, ok := strings.Cut(v, "/")
		return ok && (slices.Contains(r.Resources, "*/*") || (sub == "*" && slices.Contains(r.Resources, base+"/*")) ||
			slices.Contains(r.Resources, "*/"+sub))
	}
	scopeAll := r.Scope == nil || *r.Scope == admissionv1.AllScopes
	return len(r.ResourceNames) == 0 && scopeAll && has(r.APIGroups, group) && has(r.APIVersions, version) && resourceHas(resource) &&
		(slices.Contains(r.Operations, admissionv1.OperationAll) || slices.Contains(r.Operations, op))
}

func emptySelector(s *metav1.LabelSelector) bool {
	return s == nil || (len(s.MatchLabels) == 0 && len(s.MatchExpressions) == 0)
}

// firstWords is s's first n words, to name a validation by its message.
func firstWords(s string, n int) string {
	w := strings.Fields(s)
	if len(w) <= n {
		return strings.Join(w, " ")
	}
	return strings.Join(w[:n], " ") + " …"
}
