package certs

import (
	"crypto/tls"
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/edgerate/edge/rules"
)

// handshakeWith runs srv's Stage on one end of a pipe and a TLS client with
// conf on the other; it returns the common name of the certificate served,
// the protocol negotiated, and what OnHandshake was told.
func handshakeWith(t *testing.T, srv *Server, told chan Handshake, conf *tls.Config) (cn, proto string, h Handshake, err error) {
	t.Helper()
	server, client := net.Pipe()
	staged := make(chan error, 1)
	go func() {
		_, err := srv.Stage(server)
		server.Close()
		staged <- err
	}()
	c := tls.Client(client, conf)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	err = c.Handshake()
	if err == nil {
		st := c.ConnectionState()
		cn, proto = st.PeerCertificates[0].Subject.CommonName, st.NegotiatedProtocol
	}
	client.Close() // not c.Close: its close_notify would wait on the pipe for a reader
	<-staged
	return cn, proto, <-told, err
}

// TestServerManagedAndChallenge: a managed (ACME) certificate is served for
// its exact name unless a file's certificate has that name, and before a
// file's wildcard; a ClientHello that offers only acme-tls/1 gets the
// challenge's certificate, negotiates acme-tls/1 and is reported as acme.
func TestServerManagedAndChallenge(t *testing.T) {
	dir := t.TempDir()
	later := time.Now().Add(24 * time.Hour)
	set, err := Load(dir, rules.TLS{Certificates: []rules.CertificateConfig{
		writeCert(t, dir, "file-exact", later, "both.example.com"),
		writeCert(t, dir, "file-wild", later, "*.example.com"),
	}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	writeCert(t, dir, "acme-both", later, "both.example.com")
	writeCert(t, dir, "acme-m", later, "m.example.com")
	writeCert(t, dir, "challenge", later, "m.example.com")
	load := func(name string) *tls.Certificate {
		c, err := tls.LoadX509KeyPair(filepath.Join(dir, name+".pem"), filepath.Join(dir, name+".key"))
		if err != nil {
			t.Fatal(err)
		}
		return &c
	}
	managed := map[string]*tls.Certificate{"both.example.com": load("acme-both"), "m.example.com": load("acme-m")}
	challenge := load("challenge")
	told := make(chan Handshake, 1)
	srv, err := NewServer(Options{Set: set, OnHandshake: func(h Handshake) { told <- h },
		Managed: func(name string) *tls.Certificate { return managed[name] },
		Challenge: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			if hello.ServerName != "m.example.com" {
				return nil, errors.New("no challenge for this name")
			}
			return challenge, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, sni  string
		protos     []string
		wantCN     string
		wantProto  string
		wantResult string
		wantErr    bool
	}{
		{"file exact wins over managed", "both.example.com", nil, "file-exact", "", ResultOK, false},
		{"managed beats file wildcard", "M.Example.com.", nil, "acme-m", "", ResultOK, false},
		{"file wildcard", "x.example.com", nil, "file-wild", "", ResultOK, false},
		{"managed with h2 offered too", "m.example.com", []string{"acme-tls/1", "http/1.1"}, "acme-m", "http/1.1", ResultOK, false},
		{"tls-alpn-01", "m.example.com", []string{"acme-tls/1"}, "challenge", "acme-tls/1", ResultACME, false},
		{"tls-alpn-01 without a challenge", "x.example.com", []string{"acme-tls/1"}, "", "", ResultACME, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conf := &tls.Config{ServerName: tt.sni, NextProtos: tt.protos, InsecureSkipVerify: true,
				VerifyConnection: func(tls.ConnectionState) error { return nil }}
			cn, proto, h, err := handshakeWith(t, srv, told, conf)
			if gotErr := err != nil; gotErr != tt.wantErr || cn != tt.wantCN || proto != tt.wantProto || h.Result != tt.wantResult {
				t.Errorf("got %q %q %s (err %v), want %q %q %s (err %v)", cn, proto, h.Result, err, tt.wantCN, tt.wantProto, tt.wantResult, tt.wantErr)
			}
		})
	}
	// A request on a managed certificate's connection is covered for its
	// name alone.
	c := srv.managedCert("m.example.com")
	if !c.Covers("m.example.com") || c.Covers("both.example.com") || srv.managedCert("m.example.com") != c {
		t.Errorf("managed Cert %+v: Covers or identity wrong", c)
	}
}
