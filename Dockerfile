# The image the Helm chart runs: /chamber-controller and /chamber-agent.
#   docker build -t ghcr.io/chamber-dev/chamber:0.1.0 .
# Without Docker, `make image` builds the same image (tools/image).
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# Only the agent is built with cgo: it reads the GPUs through go-nvml, whose bindings
# are cgo (they load the driver's libnvidia-ml.so.1, mounted into the container by the
# NVIDIA container toolkit, with dlopen). The controller links no NVML (package
# healthcheck holds the rules without it; healthcheck/nvmlsource reads NVML) and is
# static.
RUN CGO_ENABLED=1 go build -trimpath -ldflags="-s -w" -o /out/chamber-agent ./cmd/chamber-agent && \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/chamber-controller ./cmd/chamber-controller

# glibc for the agent's dlopen; no shell, no package manager.
FROM gcr.io/distroless/base-debian12:nonroot
COPY --from=build /out/chamber-agent /out/chamber-controller /
USER 65532:65532
ENTRYPOINT ["/chamber-controller"]
