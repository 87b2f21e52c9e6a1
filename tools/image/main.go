// Command image builds the image the Helm chart runs, /chamber-controller and
// /chamber-agent for linux on this machine's architecture, without a container engine:
// go-containerregistry assembles it from the two binaries (built here) and the files
// of this machine's Debian libc6 package (the agent loads the driver's
// libnvidia-ml.so.1 with dlopen, so it needs the glibc it was linked against), as an
// OCI image layout and a tarball `docker load` and `ctr import` read, and pushes it
// when asked. The image runs as user 65532 (nonroot), like the Dockerfile's distroless
// base, and has no shell and no package manager.
//
//	go run . --root ../.. --out ../../bin/image --tag ghcr.io/chamber-dev/chamber:0.3.0 [--push]
//
// It needs a Debian (or Ubuntu) machine: the libc files are those `dpkg -L libc6`
// lists. Elsewhere, build the Dockerfile.
package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's user: distroless' nonroot, which the chart's securityContext names too.
const (
	uid      = 65532
	userName = "nonroot"
)

// Options say what to build and where to put it.
type Options struct {
	// Root is the repository's root, where the binaries are built.
	Root string
	// Out receives the OCI image layout (Out/oci) and the tarball (Out/chamber.tar).
	Out string
	// Tag names the image in the layout, the tarball and the registry.
	Tag name.Tag
	// Push writes the image to the tag's registry with these options (the default
	// keychain: docker's config, as `docker login` writes it) when set.
	Push []remote.Option
	// Epoch is every file's and the image's time, so that the same binaries give the
	// same image digest (SOURCE_DATE_EPOCH).
	Epoch time.Time
}

func main() {
	root := flag.String("root", "../..", "the repository's root")
	out := flag.String("out", "../../bin/image", "where the OCI layout (OUT/oci) and the tarball (OUT/chamber.tar) go")
	tag := flag.String("tag", "ghcr.io/chamber-dev/chamber:0.3.0", "the image's name and tag")
	push := flag.Bool("push", false, "push the image to the tag's registry (credentials from docker's config, as `docker login` writes it)")
	flag.Parse()
	t, err := name.NewTag(*tag, name.StrictValidation)
	if err != nil {
		fail("--tag %q: %v (want a name such as ghcr.io/you/chamber:0.3.0)", *tag, err)
	}
	o := Options{Root: *root, Out: *out, Tag: t, Epoch: sourceDateEpoch()}
	if *push {
		o.Push = []remote.Option{remote.WithAuthFromKeychain(authn.DefaultKeychain)}
	}
	img, err := Build(context.Background(), o)
	if err != nil {
		fail("%v", err)
	}
	digest, err := img.Digest()
	if err != nil {
		fail("%v", err)
	}
	fmt.Printf("%s@%s\n  OCI layout: %s\n  tarball:    %s (docker load -i, ctr images import)\n", t, digest,
		filepath.Join(o.Out, "oci"), filepath.Join(o.Out, "chamber.tar"))
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "image: "+format+"\n", args...)
	os.Exit(1)
}

// sourceDateEpoch is $SOURCE_DATE_EPOCH, or the Unix epoch.
func sourceDateEpoch() time.Time {
	var s int64
	if v := os.Getenv("SOURCE_DATE_EPOCH"); v != "" {
		if _, err := fmt.Sscan(v, &s); err != nil {
			fail("SOURCE_DATE_EPOCH=%q: want seconds since 1970", v)
		}
	}
	return time.Unix(s, 0).UTC()
}

// Build builds both binaries, assembles the image, writes it to o.Out and pushes it
// when asked.
func Build(ctx context.Context, o Options) (v1.Image, error) {
	bins := filepath.Join(o.Out, "bin")
	if err := os.MkdirAll(bins, 0o755); err != nil {
		return nil, err
	}
	// Only the agent with cgo: its NVML bindings are cgo (it loads libnvidia-ml.so.1
	// with dlopen). The controller links no NVML and is static.
	for _, b := range []struct {
		name string
		cgo  bool
	}{{"chamber-agent", true}, {"chamber-controller", false}} {
		if err := goBuild(ctx, o.Root, filepath.Join(bins, b.name), "./cmd/"+b.name, b.cgo); err != nil {
			return nil, err
		}
	}
	base, err := baseLayer(ctx, o.Epoch)
	if err != nil {
		return nil, err
	}
	app, err := layer(o.Epoch, func(w *tarWriter) error {
		for _, bin := range []string{"chamber-controller", "chamber-agent"} {
			if err := w.copyFile(filepath.Join(bins, bin), "/"+bin, 0o755); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, base, app)
	if err != nil {
		return nil, err
	}
	img = mutate.MediaType(img, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cfg, err := img.ConfigFile() // with the layers' diff IDs
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.Architecture, cfg.OS, cfg.Created = runtime.GOARCH, "linux", v1.Time{Time: o.Epoch}
	cfg.Config = v1.Config{
		User:       fmt.Sprintf("%d:%d", uid, uid),
		Entrypoint: []string{"/chamber-controller"},
		Env:        []string{"PATH=/usr/local/bin:/usr/bin:/bin", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"},
		WorkingDir: "/",
		Labels: map[string]string{
			"org.opencontainers.image.title":   "chamber",
			"org.opencontainers.image.version": o.Tag.TagStr(),
		},
	}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return nil, err
	}
	if err := write(o, img); err != nil {
		return nil, err
	}
	if o.Push != nil {
		if err := remote.Write(o.Tag, img, append([]remote.Option{remote.WithContext(ctx)}, o.Push...)...); err != nil {
			return nil, fmt.Errorf("push %s: %w", o.Tag, err)
		}
	}
	return img, nil
}

// write puts the image in an OCI layout (replacing one there) and a tarball.
func write(o Options, img v1.Image) error {
	dir := filepath.Join(o.Out, "oci")
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("OCI layout %s: %w", dir, err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": o.Tag.Name(),
	})); err != nil {
		return fmt.Errorf("OCI layout %s: %w", dir, err)
	}
	file := filepath.Join(o.Out, "chamber.tar")
	if err := tarball.WriteToFile(file, o.Tag, img); err != nil {
		return fmt.Errorf("tarball %s: %w", file, err)
	}
	return nil
}

// goBuild builds pkg for linux, with cgo or without (CGO_ENABLED=0: a static binary).
func goBuild(ctx context.Context, root, out, pkg string, cgo bool) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, pkg)
	cmd.Dir = root
	cgoEnabled := "CGO_ENABLED=0"
	if cgo {
		cgoEnabled = "CGO_ENABLED=1"
	}
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+runtime.GOARCH, cgoEnabled)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return nil
}

// baseLayer is what distroless' base gives the binaries: glibc (the files of this
// machine's libc6 package, without its character set converters and docs but with its
// copyright), the CA certificates, /etc/passwd and /etc/group with root and nonroot,
// nonroot's home, /tmp, and nsswitch.conf for Go's resolver.
func baseLayer(ctx context.Context, epoch time.Time) (v1.Layer, error) {
	out, err := exec.CommandContext(ctx, "dpkg", "-L", "libc6").Output()
	if err != nil {
		return nil, fmt.Errorf("list the files of Debian's libc6 package (dpkg -L libc6): %w; build the image on a Debian or Ubuntu machine, or with the Dockerfile", err)
	}
	var libc []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		p := sc.Text()
		switch {
		case strings.HasPrefix(p, "/lib"), strings.HasPrefix(p, "/usr/lib/") && !strings.Contains(p, "/gconv"),
			p == "/usr/share/doc/libc6/copyright", strings.HasPrefix(p, "/etc/"):
			libc = append(libc, p)
		}
	}
	if !slices.ContainsFunc(libc, func(p string) bool { return path.Base(p) == "libc.so.6" }) {
		return nil, errors.New("dpkg -L libc6 lists no libc.so.6: is libc6 installed?")
	}
	const certs = "/etc/ssl/certs/ca-certificates.crt"
	if _, err := os.Stat(certs); err != nil {
		return nil, fmt.Errorf("the CA certificates: %w (apt-get install ca-certificates)", err)
	}
	return layer(epoch, func(w *tarWriter) error {
		for _, p := range libc {
			if err := w.copyPath(p); err != nil {
				return err
			}
		}
		if err := w.copyFile(certs, certs, 0o644); err != nil {
			return err
		}
		files := []struct {
			path, body string
		}{
			{"/etc/passwd", fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\n%s:x:%d:%d:%s:/home/%s:/sbin/nologin\n", userName, uid, uid, userName, userName)},
			{"/etc/group", fmt.Sprintf("root:x:0:\n%s:x:%d:\n", userName, uid)},
			{"/etc/nsswitch.conf", "hosts: files dns\n"},
		}
		for _, f := range files {
			if err := w.file(f.path, []byte(f.body), 0o644); err != nil {
				return err
			}
		}
		if err := w.dir("/tmp", 0o1777, 0); err != nil {
			return err
		}
		return w.dir("/home/"+userName, 0o700, uid)
	})
}

// layer is a layer of the files fill writes.
func layer(epoch time.Time, fill func(*tarWriter) error) (v1.Layer, error) {
	var buf bytes.Buffer
	w := &tarWriter{tw: tar.NewWriter(&buf), epoch: epoch, dirs: map[string]bool{"/": true}}
	if err := fill(w); err != nil {
		return nil, err
	}
	if err := w.tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithMediaType(types.OCILayer))
}

// tarWriter writes a layer's entries, root-owned unless said otherwise, every parent
// directory before its children, all at one time.
type tarWriter struct {
	tw    *tar.Writer
	epoch time.Time
	dirs  map[string]bool
}

func (w *tarWriter) header(h *tar.Header) error {
	if err := w.parents(h.Name); err != nil {
		return err
	}
	h.Name = strings.TrimPrefix(h.Name, "/")
	h.ModTime, h.Format = w.epoch, tar.FormatPAX
	return w.tw.WriteHeader(h)
}

func (w *tarWriter) parents(p string) error {
	dir := path.Dir(p)
	if w.dirs[dir] {
		return nil
	}
	if err := w.parents(dir); err != nil {
		return err
	}
	w.dirs[dir] = true
	return w.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(dir, "/") + "/", Mode: 0o755,
		ModTime: w.epoch, Format: tar.FormatPAX})
}

func (w *tarWriter) dir(p string, mode int64, owner int) error {
	w.dirs[p] = true
	return w.header(&tar.Header{Typeflag: tar.TypeDir, Name: p + "/", Mode: mode, Uid: owner, Gid: owner})
}

func (w *tarWriter) file(p string, body []byte, mode int64) error {
	if err := w.header(&tar.Header{Typeflag: tar.TypeReg, Name: p, Mode: mode, Size: int64(len(body))}); err != nil {
		return err
	}
	_, err := w.tw.Write(body)
	return err
}

func (w *tarWriter) copyFile(from, to string, mode int64) error {
	body, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return w.file(to, body, mode)
}

// copyPath copies a file or a symbolic link to a file of this machine to the same
// path in the layer; a directory only as the parent of what it holds, and a link to
// a directory not at all (on a machine with a merged /usr, /lib is one: the layer
// keeps the package's own paths).
func (w *tarWriter) copyPath(p string) error {
	fi, err := os.Lstat(p)
	if err != nil {
		return err
	}
	switch {
	case fi.Mode()&os.ModeSymlink != 0:
		if to, err := os.Stat(p); err == nil && to.IsDir() {
			return nil
		}
		target, err := os.Readlink(p)
		if err != nil {
			return err
		}
		return w.header(&tar.Header{Typeflag: tar.TypeSymlink, Name: p, Linkname: target, Mode: 0o777})
	case fi.Mode().IsRegular():
		return w.copyFile(p, p, int64(fi.Mode().Perm()))
	}
	return nil
}
