# throttlekit sidecar image: a static binary on distroless, running as nonroot.
#   docker build -t throttlekit:$(cat VERSION) .
#   docker run --rm -p 127.0.0.1:8081:8081 -p 127.0.0.1:8080:8080 throttlekit:$(cat VERSION)

FROM golang:1.26 AS build
WORKDIR /src
# Modules first, so a source change does not download them again.
COPY go.mod go.sum ./
RUN go mod download
# Only what the binary is built from (keeps bin/, out/ and test binaries out
# of the context's layers). Add a directory here if cmd/sidecar comes to
# import one outside these.
COPY cmd/ cmd/
COPY pkg/ pkg/
COPY internal/ internal/
COPY VERSION ./
# -tags lean: the serving binary without simulate's charts (make image
# builds the same image without Docker: cmd/mkimage).
RUN CGO_ENABLED=0 go build -tags lean -trimpath -ldflags="-s -w -X main.version=$(cat VERSION)" -o /out/throttlekit ./cmd/sidecar
# /bin/ratelimit is envoyproxy/ratelimit's entrypoint: manifests (Envoy
# Gateway's among them) run `command: [/bin/ratelimit]`. It is this binary
# under that name, a symlink made here because distroless has no shell; run
# as `ratelimit` it serves with upstream's environment and defaults.
RUN mkdir -p /out/bin && ln -s /throttlekit /out/bin/ratelimit

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/throttlekit /throttlekit
# A directory copy keeps the symlink a symlink.
COPY --from=build /out/bin/ /bin/
# The example policies; mount a directory over it to use your own.
COPY config/ /etc/throttlekit/policy/
# 8081: gRPC (RateLimitService v3, ext_proc, grpc.health.v1).
# 8080: HTTP (/metrics, /healthz, /readyz, /healthcheck).
EXPOSE 8081 8080
# The binary itself listens on loopback only (127.0.0.1:8081 gRPC,
# 127.0.0.1:8080 HTTP): a sidecar talks to its own Envoy. In a container,
# loopback is the container's own, unreachable from Envoy's container, so the
# image opts in to all interfaces. These are defaults only
# (THROTTLEKIT_DEFAULT_*): THROTTLEKIT_GRPC_ADDR and the rest win over them
# (set 127.0.0.1:… when Envoy shares the container's network namespace, same
# pod), and so do envoyproxy/ratelimit's variables (RUNTIME_ROOT, GRPC_PORT,
# ...) when a manifest runs /bin/ratelimit.
ENV THROTTLEKIT_DEFAULT_POLICY=/etc/throttlekit/policy \
    THROTTLEKIT_DEFAULT_GRPC_ADDR=0.0.0.0:8081 \
    THROTTLEKIT_DEFAULT_HTTP_ADDR=0.0.0.0:8080
USER nonroot:nonroot
ENTRYPOINT ["/throttlekit", "serve"]
