package realnode

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
)

// PauseImage is the sandbox image containerd 1.6's CRI plugin runs by default.
const PauseImage = "registry.k8s.io/pause:3.6"

// ImportPause builds testdata/pause (static, no cgo) and imports it as PauseImage, in
// docker's archive format: the machine has no registry to pull the real one from.
func (c *Containerd) ImportPause(ctx context.Context) error {
	bin := filepath.Join(c.Dir, "pause")
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "./testdata/pause")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build the pause binary: %w: %s", err, out)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	var layer bytes.Buffer
	lw := tar.NewWriter(&layer)
	if err := lw.WriteHeader(&tar.Header{Name: "pause", Mode: 0o755, Size: int64(len(b)), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if _, err := lw.Write(b); err != nil {
		return err
	}
	if err := lw.Close(); err != nil {
		return err
	}
	config, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH, "os": "linux",
		"config": map[string]any{"Entrypoint": []string{"/pause"}, "User": "65535:65535"},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{fmt.Sprintf("sha256:%x", sha256.Sum256(layer.Bytes()))}},
	})
	if err != nil {
		return err
	}
	manifest, err := json.Marshal([]map[string]any{{"Config": "config.json", "RepoTags": []string{PauseImage}, "Layers": []string{"layer.tar"}}})
	if err != nil {
		return err
	}
	archive := filepath.Join(c.Dir, "pause.tar")
	f, err := os.Create(archive)
	if err != nil {
		return err
	}
	w := tar.NewWriter(f)
	for _, file := range []struct {
		name string
		body []byte
	}{{"manifest.json", manifest}, {"config.json", config}, {"layer.tar", layer.Bytes()}} {
		if err := w.WriteHeader(&tar.Header{Name: file.name, Mode: 0o644, Size: int64(len(file.body)), Typeflag: tar.TypeReg}); err != nil {
			f.Close()
			return err
		}
		if _, err := w.Write(file.body); err != nil {
			f.Close()
			return err
		}
	}
	if err := w.Close(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return c.Import(ctx, archive)
}
