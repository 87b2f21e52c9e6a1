package controlplane

import "k8s.io/client-go/rest"

// WriteKubeconfig writes a kubeconfig file (mode 0600) for cfg, as the control
// plane's own: its server, CA, bearer token and impersonation (AsServiceAccount's),
// for a client that runs apart from the test, such as a container's.
func WriteKubeconfig(path string, cfg *rest.Config) error { return writeKubeconfig(path, cfg) }
