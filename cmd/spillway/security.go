package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"

	"spillway/internal/rawio"
)

// The flags that authenticate and encrypt: client TLS and the auth file,
// and the peer port's TLS and shared secrets. README's threat model says
// what each protects.

// clientTLS is the TLS configuration of the client port, or nil.
func (f *serveFlags) clientTLS() (*tls.Config, error) {
	if f.tlsCert == "" && f.tlsKey == "" {
		if f.tlsCA != "" {
			return nil, errors.New("--tls-ca needs --tls-cert and --tls-key")
		}
		return nil, nil
	}
	cert, err := loadPair("--tls-cert", f.tlsCert, "--tls-key", f.tlsKey)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if f.tlsCA != "" {
		if cfg.ClientCAs, err = loadCA("--tls-ca", f.tlsCA); err != nil {
			return nil, err
		}
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// peerTLS is the peer port's TLS: the listener's configuration and the
// one this node dials other peer ports with, both nil without
// --peer-tls-cert. It is mutual TLS: every node presents its certificate
// and accepts any certificate the cluster's CA signed. Host names are not
// checked (nodes are dialled by address): the CA is the cluster.
func (f *serveFlags) peerTLS() (listen, dial *tls.Config, err error) {
	if f.peerTLSCert == "" && f.peerTLSKey == "" && f.peerTLSCA == "" {
		return nil, nil, nil
	}
	if f.peerTLSCert == "" || f.peerTLSKey == "" || f.peerTLSCA == "" {
		return nil, nil, errors.New("peer TLS needs --peer-tls-cert, --peer-tls-key and --peer-tls-ca together")
	}
	cert, err := loadPair("--peer-tls-cert", f.peerTLSCert, "--peer-tls-key", f.peerTLSKey)
	if err != nil {
		return nil, nil, err
	}
	ca, err := loadCA("--peer-tls-ca", f.peerTLSCA)
	if err != nil {
		return nil, nil, err
	}
	listen = &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: ca,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13}
	dial = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13,
		InsecureSkipVerify:    true, // the chain is checked below, against the cluster's CA only
		VerifyPeerCertificate: verifyChain(ca)}
	return listen, dial, nil
}

// verifyChain checks that the peer's certificate was signed by ca.
func verifyChain(ca *x509.CertPool) func([][]byte, [][]*x509.Certificate) error {
	return func(raw [][]byte, _ [][]*x509.Certificate) error {
		if len(raw) == 0 {
			return errors.New("peer presented no certificate")
		}
		certs := make([]*x509.Certificate, len(raw))
		for i, r := range raw {
			c, err := x509.ParseCertificate(r)
			if err != nil {
				return err
			}
			certs[i] = c
		}
		inter := x509.NewCertPool()
		for _, c := range certs[1:] {
			inter.AddCert(c)
		}
		_, err := certs[0].Verify(x509.VerifyOptions{Roots: ca, Intermediates: inter,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
		return err
	}
}

// peerSecrets is --peer-secret: comma-separated, the first presented.
func (f *serveFlags) peerSecrets() [][]byte {
	var out [][]byte
	for _, s := range splitList(f.peerSecret) {
		out = append(out, []byte(s))
	}
	return out
}

// wrapTLS makes ln a TLS listener when cfg is set, over raw socket calls
// (internal/rawio), as the server makes a plain connection's.
func wrapTLS(ln net.Listener, cfg *tls.Config) net.Listener {
	if cfg == nil {
		return ln
	}
	return tls.NewListener(rawio.Listener(ln), cfg)
}

func loadPair(certFlag, certFile, keyFlag, keyFile string) (tls.Certificate, error) {
	if certFile == "" || keyFile == "" {
		return tls.Certificate{}, fmt.Errorf("%s and %s go together", certFlag, keyFlag)
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("%s/%s: %w", certFlag, keyFlag, err)
	}
	return cert, nil
}

func loadCA(flag, file string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s: %s holds no PEM certificate", flag, file)
	}
	return pool, nil
}
