// Package v1alpha1 holds Chamber's API: GPUNode (one per GPU node, written by the
// node agent), and in later changes GPUPool and Team.
// +kubebuilder:object:generate=true
// +groupName=chamber.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the API group and version of Chamber's objects.
	GroupVersion = schema.GroupVersion{Group: "chamber.dev", Version: "v1alpha1"}

	// SchemeBuilder registers Chamber's types with a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds Chamber's types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
