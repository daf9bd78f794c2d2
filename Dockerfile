# epwindow's image for those who build with Docker; `make image` builds an
# equivalent archive without Docker. The result: one static binary at
# /usr/local/bin/epwindow on distroless/static, user 65532 (nonroot),
# entrypoint epwindow — what the probe Deployment's `epwindow probe …`
# command and Pod Security "restricted" expect.
#
#   docker build -t registry.example.com/epwindow:v1 --build-arg VERSION=v1 .
#   docker push registry.example.com/epwindow:v1
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
# The tests' local-cluster launcher is a module of its own (a replace in go.mod).
COPY internal/localcluster/go.mod internal/localcluster/go.sum ./internal/localcluster/
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/epwindow ./cmd/epwindow

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/epwindow /usr/local/bin/epwindow
USER 65532:65532
ENTRYPOINT ["epwindow"]
