// Package imagebuild builds epwindow's container image without Docker or a
// network: one layer holding a static binary at /usr/local/bin/epwindow on an
// empty base, run as user 65532 with entrypoint ["epwindow"], written as an
// image archive (the `docker save` layout, with an OCI-compatible manifest
// per image) that `docker load`, `kind load image-archive` and
// `ctr images import` accept. `make image` runs it through hack/imagebuild.
//
// It does not push: crane, docker or skopeo do that from the archive.
package imagebuild
