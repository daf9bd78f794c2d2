package controlplane

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// PKI names the files of the cluster's self-signed credentials, all under one
// directory. Everything is generated fresh on every start: the cluster lives
// as long as its process, so nothing needs to survive a restart.
type PKI struct {
	Dir string

	CAFile string // CA that signs every certificate below; clients trust it

	ServingCertFile, ServingKeyFile string // kube-apiserver serving pair (127.0.0.1, kubernetes.default)

	AdminCertFile, AdminKeyFile string // user "admin", group system:masters

	// KubeletClientCertFile/KeyFile is the pair the apiserver presents to the
	// node agent's kubelet API (port-forward, logs); group system:masters.
	KubeletClientCertFile, KubeletClientKeyFile string

	ServiceAccountKeyFile, ServiceAccountPubFile string // RSA pair that signs service-account tokens

	TokenFile string // --token-auth-file: static bearer tokens

	AdminToken      string // system:masters
	RestrictedToken string // user "restricted", no RBAC bindings
	SkipperToken    string // user "skipper", group system:masters
	TraefikToken    string // user "traefik", group system:masters
	CoreDNSToken    string // user "coredns", no group: RBAC role system:coredns
}

// newPKI writes a fresh CA, certificates, keys and token file under dir.
func newPKI(dir string) (*PKI, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create pki dir: %w", err)
	}
	p := &PKI{
		Dir:                   dir,
		CAFile:                filepath.Join(dir, "ca.crt"),
		ServingCertFile:       filepath.Join(dir, "apiserver.crt"),
		ServingKeyFile:        filepath.Join(dir, "apiserver.key"),
		AdminCertFile:         filepath.Join(dir, "admin.crt"),
		AdminKeyFile:          filepath.Join(dir, "admin.key"),
		KubeletClientCertFile: filepath.Join(dir, "apiserver-kubelet-client.crt"),
		KubeletClientKeyFile:  filepath.Join(dir, "apiserver-kubelet-client.key"),
		ServiceAccountKeyFile: filepath.Join(dir, "sa.key"),
		ServiceAccountPubFile: filepath.Join(dir, "sa.pub"),
		TokenFile:             filepath.Join(dir, "tokens.csv"),
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "epwindow-local-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return nil, fmt.Errorf("create ca: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	if err := writePEM(p.CAFile, "CERTIFICATE", caDER, 0o644); err != nil {
		return nil, err
	}

	loopback := []net.IP{net.IPv4(127, 0, 0, 1)}
	leaves := []struct {
		cert, key string
		tmpl      x509.Certificate
	}{
		{p.ServingCertFile, p.ServingKeyFile, x509.Certificate{
			Subject:     pkix.Name{CommonName: "kube-apiserver"},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
			IPAddresses: append(loopback, net.IPv4(10, 96, 0, 1)),
		}},
		{p.AdminCertFile, p.AdminKeyFile, x509.Certificate{
			Subject:     pkix.Name{CommonName: "admin", Organization: []string{"system:masters"}},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}},
		{p.KubeletClientCertFile, p.KubeletClientKeyFile, x509.Certificate{
			Subject:     pkix.Name{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"system:masters"}},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}},
	}
	for i, l := range leaves {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, err
		}
		t := l.tmpl
		t.SerialNumber = big.NewInt(int64(i + 2))
		t.NotBefore = caTmpl.NotBefore
		t.NotAfter = caTmpl.NotAfter
		t.KeyUsage = x509.KeyUsageDigitalSignature
		der, err := x509.CreateCertificate(rand.Reader, &t, ca, key.Public(), caKey)
		if err != nil {
			return nil, fmt.Errorf("create %s: %w", l.cert, err)
		}
		if err := writePEM(l.cert, "CERTIFICATE", der, 0o644); err != nil {
			return nil, err
		}
		if err := writeKey(l.key, key); err != nil {
			return nil, err
		}
	}

	// Service-account tokens: RSA, as kube-controller-manager's token
	// controller and the apiserver's signer both accept it.
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	if err := writeKey(p.ServiceAccountKeyFile, saKey); err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return nil, err
	}
	if err := writePEM(p.ServiceAccountPubFile, "PUBLIC KEY", pub, 0o644); err != nil {
		return nil, err
	}

	for _, t := range []*string{&p.AdminToken, &p.RestrictedToken, &p.SkipperToken, &p.TraefikToken, &p.CoreDNSToken} {
		if *t, err = randomToken(); err != nil {
			return nil, err
		}
	}
	// Format: token,user,uid[,"group1,group2"] (apiserver --token-auth-file).
	tokens := fmt.Sprintf("%s,admin,admin,\"system:masters\"\n%s,restricted,restricted\n%s,skipper,skipper,\"system:masters\"\n%s,traefik,traefik,\"system:masters\"\n%s,coredns,coredns\n",
		p.AdminToken, p.RestrictedToken, p.SkipperToken, p.TraefikToken, p.CoreDNSToken)
	if err := os.WriteFile(p.TokenFile, []byte(tokens), 0o600); err != nil {
		return nil, fmt.Errorf("write token file: %w", err)
	}
	return p, nil
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func writeKey(path string, key crypto.Signer) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	return writePEM(path, "PRIVATE KEY", der, 0o600)
}

func randomToken() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}
