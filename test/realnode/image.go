package realnode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ImageTarball is the image `make image` builds: $CHAMBER_IMAGE_TAR, else
// bin/image/chamber.tar of the repository. ok is false where neither exists.
func ImageTarball() (path string, ok bool) {
	if p := os.Getenv("CHAMBER_IMAGE_TAR"); p != "" {
		_, err := os.Stat(p)
		return p, err == nil
	}
	p, err := filepath.Abs("../../bin/image/chamber.tar")
	if err != nil {
		return "", false
	}
	_, err = os.Stat(p)
	return p, err == nil
}

// ImportChamber imports the image tarball and returns the name it was imported as
// (the --tag of `make image`, the chart's image.repository:appVersion by default).
func (c *Containerd) ImportChamber(ctx context.Context, tarball string) (string, error) {
	if err := c.Import(ctx, tarball); err != nil {
		return "", err
	}
	out, err := c.Ctr(ctx, "images", "ls", "--quiet")
	if err != nil {
		return "", err
	}
	for _, ref := range strings.Fields(out) {
		if strings.Contains(ref, "/chamber:") {
			return ref, nil
		}
	}
	return "", fmt.Errorf("%s holds no image named .../chamber:<tag>: %s", tarball, out)
}
