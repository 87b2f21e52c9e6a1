// Package rbac checks the chart's roles against what Chamber does: every verb the
// chart grants its ServiceAccounts must be one some test saw them use, or one the code
// needs that no test reaches yet, listed with the code in untested. The integration
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

func (g grant) String() string { return fmt.Sprintf("%s (%s)", g.key(), g.role) }

// key is the grant without its role, as untested names it.
func (g grant) key() string {
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
	return fmt.Sprintf("%s: %s %s %s", g.account, g.verb, res, where)
}

// usedBy says whether use is a request this grant allows.
func (g grant) usedBy(use controlplane.RBACUse) bool {
	resource := use.Resource
	if use.Subresource != "" {
		resource += "/" + use.Subresource
	}
	// An informer's list is a watch that streams the initial objects first (client-go's
	// WatchListClient), which the API server authorizes as a watch; where it does not
	// serve that, client-go lists instead.
	verb := use.Verb == g.verb || (g.verb == "list" && use.Verb == "watch")
	return use.Account == g.account && verb && use.Group == g.group && resource == g.resource &&
		(g.namespace == "" || use.Namespace == g.namespace) &&
		(len(g.resourceNames) == 0 || slices.Contains(g.resourceNames, use.Name))
}

// untested are the grants the code needs that no test reaches yet (their key: the
// grant without its role), each with the code that uses it (under controllers/, but
// for integrations/ and client-go). Reads through the controller's cache are lists
// and watches, never gets. The uninstall hook reads and patches as the controller's
// ServiceAccount, but TestUninstallHandsBack runs its binary with a kubeconfig that
// bypasses the recording proxy.
var untested = map[string]string{
	"chamber-controller: create gpunodes.chamber.dev cluster-wide":                   "dcgm/source.go: Source.write, a node without an agent (tests: a fake client)",
	"chamber-controller: delete localqueues.kueue.x-k8s.io cluster-wide":             "team/controller.go: Controller.applyLocalQueues, a namespace the team left",
	"chamber-controller: delete queues.scheduling.volcano.sh cluster-wide":           "integrations/volcano/queue.go: DeleteQueue, a pool or team gone from Volcano",
	"chamber-controller: get admissionchecks.kueue.x-k8s.io cluster-wide":            "uninstall/uninstall.go: handBack.patch, re-read on a conflict",
	"chamber-controller: get clusterqueues.kueue.x-k8s.io cluster-wide":              "uninstall/uninstall.go: handBack.patch, re-read on a conflict",
	"chamber-controller: get cohorts.kueue.x-k8s.io cluster-wide":                    "uninstall/uninstall.go: handBack.patch, re-read on a conflict",
	"chamber-controller: get commands.bus.volcano.sh cluster-wide":                   "isolation/volcano.go: VolcanoRestarts.reissue",
	"chamber-controller: get jobs.batch.volcano.sh cluster-wide":                     "uninstall/uninstall.go: handBack.patch, re-read on a conflict",
	"chamber-controller: get localqueues.kueue.x-k8s.io cluster-wide":                "uninstall/uninstall.go: handBack.patch, re-read on a conflict",
	"chamber-controller: get nodes cluster-wide":                                     "uninstall/uninstall.go: handBack.patch, re-read on a conflict",
	"chamber-controller: get queues.scheduling.volcano.sh cluster-wide":              "uninstall/uninstall.go: handBack.patch, re-read on a conflict",
	"chamber-controller: get resourceflavors.kueue.x-k8s.io cluster-wide":            "uninstall/uninstall.go: handBack.patch, re-read on a conflict",
	"chamber-controller: get topologies.kueue.x-k8s.io cluster-wide":                 "uninstall/uninstall.go: handBack.patch, re-read on a conflict",
	"chamber-controller: get workloadpriorityclasses.kueue.x-k8s.io cluster-wide":    "uninstall/uninstall.go: handBack.patch, re-read on a conflict",
	"chamber-controller: get workloads.kueue.x-k8s.io cluster-wide":                  "uninstall/uninstall.go: handBack.patch, re-read on a conflict",
	"chamber-controller: patch admissionchecks.kueue.x-k8s.io cluster-wide":          "uninstall/kueue.go: handBack.kueueObjects, ownerReferences dropped",
	"chamber-controller: patch events in chamber-system":                             "leader election's recorder (client-go tools/record): a repeated event",
	"chamber-controller: patch events.events.k8s.io cluster-wide":                    "every controller's recorder (mgr.GetEventRecorder, client-go tools/events): an event repeated into a series, which depends on timing",
	"chamber-controller: patch multikueueclusters.kueue.x-k8s.io cluster-wide":       "uninstall/kueue.go: handBack.kueueObjects, ownerReferences dropped",
	"chamber-controller: patch multikueueconfigs.kueue.x-k8s.io cluster-wide":        "uninstall/kueue.go: handBack.kueueObjects, ownerReferences dropped",
	"chamber-controller: patch queues.scheduling.volcano.sh cluster-wide":            "uninstall/kueue.go: handBack.kueueObjects, ownerReferences dropped",
	"chamber-controller: patch workloadpriorityclasses.kueue.x-k8s.io cluster-wide":  "uninstall/kueue.go: handBack.kueueObjects, ownerReferences dropped",
	"chamber-controller: update admissionchecks.kueue.x-k8s.io cluster-wide":         "pool/controller.go: Controller.apply, MultiKueue's changed",
	"chamber-controller: update cohorts.kueue.x-k8s.io cluster-wide":                 "pool/controller.go: Controller.apply, one adopted or changed",
	"chamber-controller: update gpunodes/status.chamber.dev cluster-wide":            "dcgm/source.go: Source.write (tests: a fake client)",
	"chamber-controller: update multikueueclusters.kueue.x-k8s.io cluster-wide":      "pool/controller.go: Controller.apply, one changed",
	"chamber-controller: update multikueueconfigs.kueue.x-k8s.io cluster-wide":       "pool/controller.go: Controller.apply, one changed",
	"chamber-controller: update resourceflavors.kueue.x-k8s.io cluster-wide":         "pool/controller.go: Controller.apply, one adopted or changed",
	"chamber-controller: update topologies.kueue.x-k8s.io cluster-wide":              "pool/controller.go: Controller.apply, one adopted",
	"chamber-controller: update workloadpriorityclasses.kueue.x-k8s.io cluster-wide": "controllers.go: priorityTiers.Start, a tier's value changed",
}

// TestGrantedVerbsAreUsed: each verb the chart (its default values, on a cluster that
// serves MutatingAdmissionPolicies in v1) grants chamber-controller's and the agents'
// ServiceAccounts, some test saw it use, or untested names the code that needs it. A
// grant neither is a right an attacker who took the pod would have and Chamber does
// not need: remove it from the chart, or test what needs it. A listed grant the tests
// used after all is logged (it can leave the list); one the chart no longer grants
// fails.
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
	granted := map[string]bool{}
	for _, g := range grants {
		key := g.key()
		granted[key] = true
		_, listed := untested[key]
		switch used := slices.ContainsFunc(uses, g.usedBy); {
		case used && listed:
			t.Logf("%s: a test used it after all; it can leave untested", key)
		case !used && !listed:
			unused = append(unused, g.String())
		}
	}
	t.Logf("%d grants (%d listed as untested), %d kinds of request recorded", len(grants), len(untested), len(uses))
	if len(unused) > 0 {
		t.Errorf("the chart grants %d verbs no test saw used: remove them from its roles, test what needs them, or list the code that does in untested:\n%s",
			len(unused), strings.Join(unused, "\n"))
	}
	var stale []string
	for key := range untested {
		if !granted[key] {
			stale = append(stale, key)
		}
	}
	if len(stale) > 0 {
		slices.Sort(stale)
		t.Errorf("untested lists %d grants the chart no longer grants: remove them from the list:\n%s", len(stale), strings.Join(stale, "\n"))
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
