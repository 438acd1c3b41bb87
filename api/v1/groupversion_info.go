// Package v1 contains the promptops.io/v1 API: PromptTemplate, which turns a
// system prompt into a budget-checked ConfigMap, and MemoryBank, which runs
// consolidation Jobs for a bank of facts.
//
// +kubebuilder:object:generate=true
// +groupName=promptops.io
package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of every type in this package.
	GroupVersion = schema.GroupVersion{Group: "promptops.io", Version: "v1"}

	// SchemeBuilder registers the types of this package with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &PromptTemplate{}, &PromptTemplateList{}, &MemoryBank{}, &MemoryBankList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
