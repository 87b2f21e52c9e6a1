package realnode

import (
	"context"
	"errors"
	"os"
	"testing"
)

// startContainerd starts a containerd for t, skipping where the machine cannot, and
// stops it when t ends.
func startContainerd(t *testing.T) *Containerd {
	t.Helper()
	// A short directory: containerd's sockets live there (108-byte limit).
	dir, err := os.MkdirTemp("/tmp", "realnode-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	c, err := StartContainerd(context.Background(), dir)
	if err != nil {
		if errors.Is(err, ErrUnavailable) {
			t.Skipf("containerd: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	t.Logf("containerd %s with the %s snapshotter", c.Socket, c.Snapshotter)
	return c
}
