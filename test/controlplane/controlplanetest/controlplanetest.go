// Package controlplanetest starts a local control plane for a test. It is apart from
// package controlplane so that the binaries that start one (the demo, the simulator)
// do not link package testing.
package controlplanetest

import (
	"context"
	"testing"

	"chamber.dev/chamber/test/controlplane"
)

// StartForTest starts a control plane with opts for t and stops it when t ends, after
// anything t started later (cleanups run last-registered first). A failed start fails
// t at once; a failed stop fails it too.
func StartForTest(t testing.TB, ctx context.Context, opts controlplane.Options) *controlplane.ControlPlane {
	t.Helper()
	cp, err := controlplane.Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cp.Stop(); err != nil {
			t.Errorf("stop control plane: %v", err)
		}
	})
	return cp
}
