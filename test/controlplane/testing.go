package controlplane

import (
	"context"
	"testing"
)

// StartForTest starts a control plane with opts for t and stops it when t ends, after
// anything t started later (cleanups run last-registered first). A failed start fails
// t at once; a failed stop fails it too.
func StartForTest(t testing.TB, ctx context.Context, opts Options) *ControlPlane {
	t.Helper()
	cp, err := Start(ctx, opts)
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
