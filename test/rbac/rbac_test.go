// Package rbac checks the chart's roles against what Chamber does: every verb the
// chart grants its ServiceAccounts must be one some test saw them use. The integration
// tests run every controller and agent as the chart's ServiceAccounts
// (controlplane.AsServiceAccount), which record each kind of request the API server
// allowed where controlplane.RBACUseDir says; make test sets it for the whole suite,
// then runs TestGrantedVerbsAreUsed on the records with CHAMBER_RBAC_CHECK naming the
// same folder.
package rbac

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"chamber.dev/chamber/test/controlplane"
)

// grant is one verb on one resource that a role of the chart gives an account.
type grant struct {
	account, role string
	// namespace is the Role's; empty for a ClusterRole's.
	namespace             string
	group, resource, verb string
	resourceNames         []string
}

func (g grant) String() string {
	where := "cluster-wide"
	if g.namespace != "" {
		where = "in " + g.namespace
	}
	res := g.resource
	if g.group != "" {
		res += "." + g.group
	}
	if len(g.resourceNames) > 0 {
		res += fmt.Sprintf(" %v", g.resourceNames)
	}
	return fmt.Sprintf("%s: %s %s %s (%s)", g.account, g.verb, res, where, g.role)
}

// usedBy says whether use is a request this grant allows.
func (g grant) usedBy(use controlplane.RBACUse) bool {
	resource := use.Resource
	if use.Subresource != "" {
		resource += "/" + use.Subresource
	}
	return use.Account == g.account && use.Verb == g.verb && use.Group == g.group && resource == g.resource &&
		(g.namespace == "" || use.Namespace == g.namespace) &&
		(len(g.resourceNames) == 0 || slices.Contains(g.resourceNames, use.Name))
}

// TestGrantedVerbsAreUsed: each verb the chart (its default values, on a cluster that
// serves MutatingAdmissionPolicies in v1) grants chamber-controller's and the agents'
// ServiceAccounts, some test saw it use. A grant none uses is a right an attacker who
// took the pod would have and Chamber does not need: remove it from the chart, or test
// what needs it.
func TestGrantedVerbsAreUsed(t *testing.T) {
	dir := os.Getenv("CHAMBER_RBAC_CHECK")
	if dir == "" {
		t.Skip("CHAMBER_RBAC_CHECK is not set: make test runs the suite with " + controlplane.RBACUseDir + " set, then this test on its records")
	}
	uses := readUses(t, dir)
	if len(uses) == 0 {
		t.Fatalf("no requests recorded in %s: was the suite run with %s=%s?", dir, controlplane.RBACUseDir, dir)
	}
	grants := chartGrants(t, controlplane.ControllerAccount, controlplane.AgentAccount)
	if len(grants) == 0 {
		t.Fatal("the chart grants its ServiceAccounts nothing")
	}
	var unused []string
	for _, g := range grants {
		if !slices.ContainsFunc(uses, g.usedBy) {
			unused = append(unused, g.String())
		}
	}
	t.Logf("%d grants, %d kinds of request recorded", len(grants), len(uses))
	if len(unused) > 0 {
		t.Errorf("the chart grants %d verbs no test saw used: remove them from its roles, or test what needs them:\n%s",
			len(unused), strings.Join(unused, "\n"))
	}
}

func readUses(t *testing.T, dir string) []controlplane.RBACUse {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var uses []controlplane.RBACUse
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		s := bufio.NewScanner(f)
		for s.Scan() {
			var use controlplane.RBACUse
			if err := json.Unmarshal(s.Bytes(), &use); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			uses = append(uses, use)
		}
		f.Close()
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return uses
}

// chartGrants renders the chart as make test's suite installs it and returns what its
// roles grant accounts through its bindings.
func chartGrants(t *testing.T, accounts ...string) []grant {
	t.Helper()
	objs, err := controlplane.RenderChart(context.Background(), "", "--api-versions", "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy")
	if err != nil {
		t.Fatal(err)
	}
	rules := map[string][]rbacv1.PolicyRule{} // by kind/namespace/name
	type binding struct {
		roleKey, namespace string
		subjects           []rbacv1.Subject
	}
	var bindings []binding
	for _, obj := range objs {
		key := obj.GetKind() + "/" + obj.GetNamespace() + "/" + obj.GetName()
		switch obj.GetKind() {
		case "ClusterRole", "Role":
			var role rbacv1.ClusterRole // a Role's rules read the same
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &role); err != nil {
				t.Fatalf("%s: %v", key, err)
			}
			rules[key] = role.Rules
		case "ClusterRoleBinding", "RoleBinding":
			var b rbacv1.RoleBinding
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &b); err != nil {
				t.Fatalf("%s: %v", key, err)
			}
			ns := obj.GetNamespace()
			if b.RoleRef.Kind == "ClusterRole" {
				bindings = append(bindings, binding{roleKey: "ClusterRole//" + b.RoleRef.Name, namespace: ns, subjects: b.Subjects})
			} else {
				bindings = append(bindings, binding{roleKey: "Role/" + ns + "/" + b.RoleRef.Name, namespace: ns, subjects: b.Subjects})
			}
		}
	}
	var out []grant
	for _, b := range bindings {
		for _, s := range b.subjects {
			if s.Kind != rbacv1.ServiceAccountKind || s.Namespace != controlplane.ChartNamespace || !slices.Contains(accounts, s.Name) {
				continue
			}
			for _, r := range rules[b.roleKey] {
				for _, group := range r.APIGroups {
					for _, resource := range r.Resources {
						for _, verb := range r.Verbs {
							out = append(out, grant{account: s.Name, role: b.roleKey, namespace: b.namespace,
								group: group, resource: resource, verb: verb, resourceNames: r.ResourceNames})
						}
					}
				}
			}
		}
	}
	return out
}
