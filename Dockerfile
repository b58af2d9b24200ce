# syntax=docker/dockerfile:1
#
# The notifier's container image: a static binary (CGO_ENABLED=0) on
# distroless's static base, run as a non-root user, with a HEALTHCHECK on
# notifier run's /healthz (the image holds no shell and no curl: the binary
# asks, `notifier healthcheck`).
#
#   docker build -t notifier .
#   docker build --build-arg VERSION=v1.2.3 -t notifier:v1.2.3 .
#   docker run --rm notifier version
#   docker run --rm -v $PWD/config.yaml:/etc/notifier/config.yaml:ro \
#     -e NOTIFIER_NATS_URL=nats://nats:4222 -e NOTIFIER_REDIS_ADDRS=redis:6379 \
#     -e NOTIFIER_METRICS_LISTEN=0.0.0.0:9464 notifier
#
# The default command is `notifier run --config /etc/notifier/config.yaml`;
# give another (gateway, sandbox, status, ...) after the image name. The
# HEALTHCHECK asks 127.0.0.1:9464, run's default metrics port: a gateway's
# container checks its own port instead (deploy/compose/compose.yaml does).

ARG GO_VERSION=1.26.8

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# VERSION, when given, is what `notifier version` prints first; without it
# the module version the build information carries.
ARG VERSION=""
RUN CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w ${VERSION:+-X github.com/notifier/notifier/cli.version=${VERSION}}" \
      -o /out/notifier ./cmd/notifier

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/notifier /usr/local/bin/notifier
COPY config.yaml /etc/notifier/config.yaml
# distroless's nonroot user and group.
USER 65532:65532
WORKDIR /home/nonroot
# run's metrics port (/metrics, /healthz, /readyz, /status); the gateway's.
EXPOSE 9464 8081
HEALTHCHECK --interval=10s --timeout=3s --start-period=15s --retries=3 \
  CMD ["/usr/local/bin/notifier", "healthcheck", "--url", "http://127.0.0.1:9464/healthz"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/notifier"]
CMD ["run", "--config", "/etc/notifier/config.yaml"]
