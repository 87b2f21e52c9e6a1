package main

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestImage builds the image as `make image` does, pushing it to a registry (go-
// containerregistry's own, in memory), and reads it back from the OCI layout, the
// tarball and the registry: the same image in all three, both binaries where the
// chart's pods run them, a non-root user, every library the binaries need (the
// controller none: it is static), and both binaries answering --help as that user
// inside the image's files.
func TestImage(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag(u.Host+"/chamber-dev/chamber:0.1.0", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	start := time.Now()
	built, err := Build(context.Background(), Options{Root: "../..", Out: out, Tag: tag, Push: []remote.Option{}, Epoch: time.Unix(0, 0)})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("built in %s", time.Since(start).Round(time.Second))
	want, err := built.Digest()
	if err != nil {
		t.Fatal(err)
	}

	idx, err := layout.ImageIndexFromPath(filepath.Join(out, "oci"))
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(manifest.Manifests) != 1 || manifest.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != tag.Name() {
		t.Fatalf("OCI layout's index: %+v, want one image named %s", manifest.Manifests, tag.Name())
	}
	img, err := idx.Image(manifest.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	fromTarball, err := tarball.ImageFromPath(filepath.Join(out, "chamber.tar"), &tag)
	if err != nil {
		t.Fatal(err)
	}
	pulled, err := remote.Image(tag)
	if err != nil {
		t.Fatal(err)
	}
	for where, i := range map[string]v1.Image{"OCI layout": img, "tarball": fromTarball, "registry": pulled} {
		// The tarball is docker's format, whose manifest docker writes itself on load:
		// the same config (and so the same layers) is what is the same.
		got, err := i.ConfigName()
		if err != nil {
			t.Fatal(err)
		}
		if wantConfig, _ := built.ConfigName(); got != wantConfig {
			t.Errorf("%s: config %s, want the built image's %s", where, got, wantConfig)
		}
	}
	if got, _ := pulled.Digest(); got != want {
		t.Errorf("pulled %s, pushed %s", got, want)
	}

	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Config.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532 (non-root)", cfg.Config.User)
	}
	if cfg.OS != "linux" || len(cfg.Config.Entrypoint) != 1 || cfg.Config.Entrypoint[0] != "/chamber-controller" {
		t.Errorf("os %q, entrypoint %q: want linux, /chamber-controller", cfg.OS, cfg.Config.Entrypoint)
	}

	root := t.TempDir()
	files := extract(t, img, root)
	// The binaries where the chart's pods run them.
	for _, tmpl := range []string{"agent.yaml", "controller.yaml"} {
		b, err := os.ReadFile(filepath.Join("../../charts/chamber/templates", tmpl))
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`command: \[(/[^\],]+)`).FindSubmatch(b)
		if m == nil {
			t.Fatalf("no command in the chart's %s", tmpl)
		}
		bin := string(m[1])
		h, ok := files[bin]
		if !ok {
			t.Errorf("the chart's %s runs %s, which the image lacks", tmpl, bin)
			continue
		}
		if h.Typeflag != tar.TypeReg || h.Mode&0o111 == 0 || h.Mode&0o022 != 0 || h.Uid != 0 {
			t.Errorf("%s: type %c, mode %o, owner %d; want an executable file owned by root that only root may change", bin, h.Typeflag, h.Mode, h.Uid)
		}
		needs(t, root, files, bin)
	}
	// The controller links no NVML and is built without cgo.
	if interp, libs := linked(t, filepath.Join(root, "chamber-controller")); interp != "" || len(libs) > 0 {
		t.Errorf("/chamber-controller has loader %q and libraries %v: want a static binary (CGO_ENABLED=0)", interp, libs)
	}
	if b, err := os.ReadFile(filepath.Join(root, "etc/passwd")); err != nil || !strings.Contains(string(b), "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd %q (%v): want the nonroot user 65532", b, err)
	}
	for p, h := range files {
		if h.Typeflag == tar.TypeReg && h.Mode&0o6000 != 0 {
			t.Errorf("%s is setuid or setgid (mode %o)", p, h.Mode)
		}
		if h.Typeflag != tar.TypeSymlink && h.Mode&0o002 != 0 && p != "/tmp" {
			t.Errorf("%s may be written by anyone (mode %o)", p, h.Mode)
		}
		if strings.HasPrefix(p, "/bin/") || p == "/bin/sh" {
			t.Errorf("%s: the image has no shell", p)
		}
	}

	// Both binaries run inside the image's files, as its user.
	if os.Geteuid() != 0 {
		t.Skip("running the binaries inside the image's files needs root (chroot)")
	}
	for bin, flag := range map[string]string{"/chamber-agent": "-dcgm-metrics", "/chamber-controller": "-admission-check"} {
		cmd := exec.Command(bin, "--help")
		cmd.Dir = "/"
		cmd.Env = cfg.Config.Env
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root, Credential: &syscall.Credential{Uid: 65532, Gid: 65532}}
		b, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Errorf("%s --help in the image: %v", bin, err)
			continue
		}
		if !strings.Contains(string(b), flag) {
			t.Errorf("%s --help in the image, as user 65532: %v\n%s\nwant its usage, with %s", bin, err, b, flag)
		}
	}
}

// extract writes the image's files under root and returns their headers by path.
func extract(t *testing.T, img v1.Image, root string) map[string]*tar.Header {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	files := map[string]*tar.Header{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		p := path.Clean("/" + h.Name)
		files[p] = h
		dst := filepath.Join(root, p)
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(dst, 0o755)
			if err == nil {
				err = os.Chmod(dst, os.FileMode(h.Mode&0o777)|map[bool]os.FileMode{true: os.ModeSticky}[h.Mode&0o1000 != 0])
			}
		case tar.TypeSymlink:
			err = os.Symlink(h.Linkname, dst)
		case tar.TypeReg:
			var b bytes.Buffer
			if _, err = io.Copy(&b, tr); err == nil {
				err = os.WriteFile(dst, b.Bytes(), os.FileMode(h.Mode&0o777))
			}
		}
		if err != nil {
			t.Fatalf("extract %s: %v", p, err)
		}
	}
}

// needs checks that the image has the binary's dynamic loader and every library it
// names, where the loader looks: Debian's multiarch directories.
func needs(t *testing.T, root string, files map[string]*tar.Header, bin string) {
	t.Helper()
	interp, libs := linked(t, filepath.Join(root, bin))
	if interp != "" {
		if _, err := os.Stat(filepath.Join(root, interp)); err != nil {
			t.Errorf("%s: its loader %s is not in the image: %v", bin, interp, err)
		}
	}
	for _, lib := range libs {
		found := false
		for p := range files {
			if path.Base(p) == lib && (strings.HasPrefix(p, "/lib/") || strings.HasPrefix(p, "/usr/lib/")) {
				found = true
			}
		}
		if !found {
			t.Errorf("%s needs %s, which the image lacks", bin, lib)
		}
	}
}

// linked returns the ELF binary's dynamic loader and the libraries it names; none of
// either for a static binary.
func linked(t *testing.T, bin string) (interp string, libs []string) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		b, err := io.ReadAll(p.Open())
		if err != nil {
			t.Fatal(err)
		}
		interp = strings.TrimRight(string(b), "\x00")
	}
	libs, err = f.ImportedLibraries()
	if err != nil {
		t.Fatal(err)
	}
	return interp, libs
}
