#!/bin/sh
# Builds the kubelet TestKubeletRunsChart runs, at the control plane's Kubernetes
# version (tools/kubernetes, the Makefile's KUBE_VERSION), into bin/kubelet.
# tools/kubernetes's go.sum lacks three modules only the kubelet needs
# (k8s.io/cri-streaming, otelrestful, hnslib): they are added to a copy of its
# go.mod, from the Go module proxy. With the control plane's packages already built
# (make tools) it takes about a minute and a half on two cores.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
version=$(awk '/^KUBE_VERSION :=/ { print $3 }' "$root/Makefile")
minor=$(echo "$version" | cut -d. -f2)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$root/tools/kubernetes/go.mod" "$root/tools/kubernetes/go.sum" "$work/"
cd "$work"
sed -i 's#^module .*#module chamber.dev/tools/kubelet#; /^tool (/,/^)/d' go.mod
printf 'package main\n\nimport _ "k8s.io/kubernetes/cmd/kubelet/app"\n\nfunc main() {}\n' > main.go
go get "k8s.io/kubernetes/cmd/kubelet@$version"
ldflags=""
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags="$ldflags -X $p.gitVersion=$version -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean -X $p.buildDate=2026-01-01T00:00:00Z"
done
# -trimpath, as make tools builds the control plane: their packages come from the cache.
go build -trimpath -ldflags "$ldflags" -o "$root/bin/kubelet" k8s.io/kubernetes/cmd/kubelet
echo "$root/bin/kubelet: $("$root/bin/kubelet" --version)"
