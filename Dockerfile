# edge: a static binary on distroless, running as a non-root user.
#
#   docker build --build-arg VERSION=$(git describe --tags --always --dirty) -t edge .
#   docker run --rm -p 8080:8080 edge
#
# The image runs /etc/edge/edge.yaml, a copy of configs/edge.yaml (the demo
# configuration also embedded in the binary). Its admin_listen is
# 127.0.0.1:8077, which is reachable only from inside the container. To scrape
# /metrics or probe /healthz and /readyz from outside, listen on every
# address, in the environment (-e EDGE_ADMIN_LISTEN=:8077) or in your own
# config mounted over /etc/edge/edge.yaml (admin_listen: ":8077"), set a
# token (EDGE_ADMIN_TOKEN in the environment, or admin_token in the
# config) so that /metrics and /v1/* require "Authorization: Bearer <token>"
# (/healthz and /readyz stay open), and publish 8077 only where the public
# cannot reach it, e.g. -p 127.0.0.1:8077:8077 -e EDGE_ADMIN_LISTEN=:8077
# -e EDGE_ADMIN_TOKEN. Without
# a token anyone who reaches the admin listener can read metrics and the
# configuration and reset keys.
#
# With tls.acme, set its storage to /var/lib/edge/acme and mount a volume
# there (-v edge-data:/var/lib/edge), so that a new container serves the
# certificates obtained before instead of ordering them again.

FROM golang:1.26-bookworm AS build
WORKDIR /src

# Modules first, so this layer is reused until go.mod or go.sum change.
COPY go.mod go.sum ./
RUN go mod download

COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/edge ./cmd/edge
# What must survive a new container (tls.acme.storage: /var/lib/edge/acme):
# made here, as distroless has no shell to make it.
RUN mkdir -p /out/var/lib/edge

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/edge /edge
COPY --from=build /src/configs/edge.yaml /etc/edge/edge.yaml
COPY --from=build --chown=nonroot:nonroot /out/var/lib/edge /var/lib/edge
USER nonroot:nonroot
# ACME's account and certificates, with tls.acme.storage: /var/lib/edge/acme
# (docs/operations.md, Docker).
VOLUME /var/lib/edge
# 8080: public listener. 8077: admin listener (see above: not reachable from
# outside with the default config).
EXPOSE 8080 8077
ENTRYPOINT ["/edge"]
CMD ["-config", "/etc/edge/edge.yaml"]
