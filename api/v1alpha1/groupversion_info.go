// Package v1alpha1 holds Chamber's API: GPUNode (one per GPU node, written by the
// node agent), GPUPool and Team, and the well-known names and rules every component
// shares (labels.go, heartbeat.go).
// +kubebuilder:object:generate=true
// +groupName=chamber.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the API group and version of Chamber's objects.
	GroupVersion = schema.GroupVersion{Group: "chamber.dev", Version: "v1alpha1"}

	// SchemeBuilder registers Chamber's types with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds Chamber's types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&GPUNode{}, &GPUNodeList{},
		&GPUPool{}, &GPUPoolList{},
		&Team{}, &TeamList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
