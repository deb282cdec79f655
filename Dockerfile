# The sdr CLI in a container, for machines without RDMA hardware.
#
#   docker build -t sdr .
#
# What each command needs to run (capabilities, security options) and the
# exact `docker run` lines: docs/containers.md, README.md "Containers".
#
# The base images are arguments so that a site with its own registry
# mirror can name its copies (--build-arg GO_IMAGE=... RUNTIME_IMAGE=...).
ARG GO_IMAGE=golang:1.26-bookworm
ARG RUNTIME_IMAGE=debian:bookworm-slim

FROM ${GO_IMAGE} AS build
WORKDIR /src
# Modules first: a source change does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# Static (CGO_ENABLED=0): the CLI needs no C library at run time; the
# cgo parts of the module (hwnic/dpa's host side) are behind the dpa
# build tag, and the XDP program is committed bpf2go output embedded in
# the binary, so neither clang nor libbpf is needed here.
RUN CGO_ENABLED=0 go build -trimpath -o /out/sdr ./cmd/sdr

# The runtime needs nothing but the binary: namespaces, veths, addresses,
# neighbours, XDP and AF_XDP all go through netlink and system calls, not
# iproute2 (install it only to look around with `ip netns`).
FROM ${RUNTIME_IMAGE}
COPY --from=build /out/sdr /usr/local/bin/sdr
# sdr testbed writes its report to ./testbed-report: mount a directory here.
WORKDIR /work
ENTRYPOINT ["sdr"]
CMD ["testbed"]
