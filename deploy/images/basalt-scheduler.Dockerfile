# The basalt-scheduler image, built from the repository root (the workspace):
#   buildah bud -f deploy/images/basalt-scheduler.Dockerfile --build-arg REVISION=$(git rev-parse HEAD) \
#     -t REGISTRY/basalt/basalt-scheduler:0.1.0 .        # or: docker build -f ... .
# Two stages: the release build on Rust's Debian 12 image, then only the binary on distroless's
# Debian 12 base with glibc (no shell, no package manager), run as a non-root user.
# Any Rust 1.89 or newer on Debian 12, so that the binary links against the runtime's glibc.
ARG RUST_IMAGE=docker.io/library/rust:1-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot
# Where the binary comes from: the build stage below; the image test names an image that holds
# a binary built outside instead (scheduler/daemon/tests/image/mod.rs).
ARG BINARIES=build

FROM ${RUST_IMAGE} AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p basalt-scheduler --bin basalt-scheduler \
 && install -D target/release/basalt-scheduler /out/basalt-scheduler

FROM ${BINARIES} AS binaries

FROM ${RUNTIME_IMAGE}
# The workspace's version (Cargo.toml), which `basalt-scheduler --version` prints.
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="basalt-scheduler" \
      org.opencontainers.image.description="Basalt's gang scheduler for Kubernetes" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=binaries /out/basalt-scheduler /usr/local/bin/basalt-scheduler
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/basalt-scheduler"]
