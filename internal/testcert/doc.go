// Package testcert makes the self-signed certificates tests serve https
// with: one certificate, its own CA, for one host, and its PEM in a file
// that a flag such as verify's --ingress-ca can name.
package testcert
