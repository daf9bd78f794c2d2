package controlplane

import (
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// The serving certificate must be valid for every name a client uses: the
// loopback address tools dial, and the kubernetes Service's ClusterIP and
// DNS names that pods use through kube-proxy.
func TestPKIServingCertNames(t *testing.T) {
	p, err := newPKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p.ServingCertFile)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatal("serving certificate is not PEM")
	}
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(p.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		t.Fatal("CA file holds no certificate")
	}
	for _, name := range []string{"127.0.0.1", "10.96.0.1", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "localhost"} {
		if _, err := cert.Verify(x509.VerifyOptions{DNSName: name, Roots: pool}); err != nil {
			t.Errorf("serving certificate not valid for %s: %v", name, err)
		}
	}
	if ip := net.ParseIP("10.96.0.1"); !slices.ContainsFunc(cert.IPAddresses, ip.Equal) {
		t.Errorf("no IP SAN 10.96.0.1: %v", cert.IPAddresses)
	}
	for _, f := range []string{p.ServingKeyFile, p.AdminKeyFile, p.ServiceAccountKeyFile, p.TokenFile} {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s is readable by others: %v", f, st.Mode())
		}
	}
}

// The first address of the service range is the kubernetes Service's
// ClusterIP, which the serving certificate names.
func TestAPIServerArgs(t *testing.T) {
	p, err := newPKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	args := apiserverArgs(p, "http://127.0.0.1:2379")
	for _, want := range []string{"--service-cluster-ip-range=" + ServiceClusterIPRange, "--bind-address=127.0.0.1",
		"--endpoint-reconciler-type=none", "--authorization-mode=RBAC", "--etcd-servers=http://127.0.0.1:2379"} {
		if !slices.Contains(args, want) {
			t.Errorf("apiserver args lack %s", want)
		}
	}
	_, n, err := net.ParseCIDR(ServiceClusterIPRange)
	if err != nil || !n.Contains(net.ParseIP("10.96.0.1")) {
		t.Errorf("service range %s does not hold 10.96.0.1 (%v)", ServiceClusterIPRange, err)
	}
	kcm := controllerManagerArgs(p, "/k", 750*time.Millisecond, 0)
	if !slices.Contains(kcm, "--endpointslice-updates-batch-period=750ms") {
		t.Errorf("controller-manager args %q lack the batch period", kcm)
	}
	if slices.ContainsFunc(kcm, func(a string) bool { return strings.HasPrefix(a, "--max-endpoints-per-slice") }) {
		t.Errorf("controller-manager args %q set --max-endpoints-per-slice though 0 means the default", kcm)
	}
	if kcm5 := controllerManagerArgs(p, "/k", 0, 5); !slices.Contains(kcm5, "--max-endpoints-per-slice=5") {
		t.Errorf("controller-manager args %q lack --max-endpoints-per-slice=5", kcm5)
	}
	if i := slices.IndexFunc(kcm, func(a string) bool { return strings.HasPrefix(a, "--controllers=") }); i < 0 ||
		!strings.Contains(kcm[i], "endpointslice-controller") {
		t.Errorf("controller-manager args %q do not run the EndpointSlice controller", kcm)
	}
}
