// Package pebbletest runs Let's Encrypt's test ACME server, Pebble
// (github.com/letsencrypt/pebble/v2), for tests: pebble on free loopback
// ports, with pebble-challtestsrv as its DNS server resolving every name to
// 127.0.0.1, so that it validates challenges for real against the ports
// the test names (its httpPort and tlsPort), each process killed by its
// PID when the test ends. The certificate of Pebble's own HTTPS is made
// here, with the CA that signs it (RootFile: tls.acme.ca_root). It is for
// tests only.
//
// The binaries come from the module at Version (.ci/run installs them:
// go install github.com/letsencrypt/pebble/v2/cmd/pebble@v2.10.3 and
// .../cmd/pebble-challtestsrv@v2.10.3). Without them a test is skipped,
// saying how to install them, except under CI, where it fails.
package pebbletest

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/edgerate/edge/internal/wait"
)

// Version is the Pebble release the binaries are built from.
const Version = "v2.10.3"

// Options say where Pebble validates and how long its certificates live.
type Options struct {
	// HTTPPort and TLSPort are the ports of 127.0.0.1 Pebble validates
	// HTTP-01 and TLS-ALPN-01 challenges on.
	HTTPPort, TLSPort int
	// Validity is the lifetime of the certificates issued, whole seconds;
	// zero means Pebble's default, 90 days.
	Validity time.Duration
}

// CA is a running Pebble.
type CA struct {
	// Directory is the ACME directory URL (tls.acme.ca).
	Directory string
	// RootFile is the PEM file of the CA of Pebble's own HTTPS
	// (tls.acme.ca_root).
	RootFile string
	mgmt     string // the management API's base URL
	client   *http.Client
	log      *buffer // Pebble's output
}

// Binaries returns the paths of pebble and pebble-challtestsrv: in PATH,
// else in the Go bin directory; without them t is skipped, or fails under
// CI (.ci/run installs them).
func Binaries(t testing.TB) (pebble, challtestsrv string) {
	t.Helper()
	find := func(name string) string {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
		for _, dir := range goBinDirs() {
			if p := filepath.Join(dir, name); isExecutable(p) {
				return p
			}
		}
		return ""
	}
	pebble, challtestsrv = find("pebble"), find("pebble-challtestsrv")
	if pebble != "" && challtestsrv != "" {
		return pebble, challtestsrv
	}
	msg := fmt.Sprintf("pebble and pebble-challtestsrv not installed (go install github.com/letsencrypt/pebble/v2/cmd/pebble@%s github.com/letsencrypt/pebble/v2/cmd/pebble-challtestsrv@%s)", Version, Version)
	if os.Getenv("CI") != "" {
		t.Fatal(msg + ": .ci/run must install them")
	}
	t.Skip(msg + "; skipping the tests against a real ACME server")
	return "", ""
}

// goBinDirs are where go install puts binaries: GOBIN, else GOPATH/bin.
func goBinDirs() []string {
	out, err := exec.Command("go", "env", "GOBIN", "GOPATH").Output()
	if err != nil {
		return nil
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var dirs []string
	if len(lines) > 0 && strings.TrimSpace(lines[0]) != "" {
		dirs = append(dirs, strings.TrimSpace(lines[0]))
	}
	if len(lines) > 1 {
		for _, p := range filepath.SplitList(strings.TrimSpace(lines[1])) {
			dirs = append(dirs, filepath.Join(p, "bin"))
		}
	}
	return dirs
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// Start runs pebble-challtestsrv and pebble with opts, and waits until
// Pebble's directory answers. Both are killed when the test ends.
func Start(t testing.TB, opts Options) *CA {
	t.Helper()
	pebbleBin, challBin := Binaries(t)
	dir := t.TempDir()
	rootFile, certFile, keyFile := writeHTTPSCert(t, dir)
	ports := FreePorts(t, 4)
	dnsPort, challMgmt, listen, mgmt := ports[0], ports[1], ports[2], ports[3]
	start(t, dir, "challtestsrv", challBin, nil,
		"-dnsserver", "127.0.0.1:"+strconv.Itoa(dnsPort), "-management", "127.0.0.1:"+strconv.Itoa(challMgmt),
		"-defaultIPv4", "127.0.0.1", "-defaultIPv6", "", "-http01", "", "-https01", "", "-tlsalpn01", "", "-doh", "")
	profile := map[string]any{"description": "edge's tests"}
	if opts.Validity > 0 {
		profile["validityPeriod"] = int64(opts.Validity / time.Second)
	}
	cfg, _ := json.Marshal(map[string]any{"pebble": map[string]any{
		"listenAddress":                  "127.0.0.1:" + strconv.Itoa(listen),
		"managementListenAddress":        "127.0.0.1:" + strconv.Itoa(mgmt),
		"certificate":                    certFile,
		"privateKey":                     keyFile,
		"httpPort":                       opts.HTTPPort,
		"tlsPort":                        opts.TLSPort,
		"ocspResponderURL":               "",
		"externalAccountBindingRequired": false,
		"keyAlgorithm":                   "ecdsa",
		"profiles":                       map[string]any{"default": profile},
	}})
	cfgFile := filepath.Join(dir, "pebble-config.json")
	if err := os.WriteFile(cfgFile, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	// Real validation, at once: no random sleep before it, no bad nonces
	// to retry, no authorization reused from an earlier order (each order
	// is validated); never PEBBLE_VA_ALWAYS_VALID.
	env := []string{"PEBBLE_VA_NOSLEEP=1", "PEBBLE_WFE_NONCEREJECT=0", "PEBBLE_AUTHZREUSE=0"}
	log := start(t, dir, "pebble", pebbleBin, env, "-config", cfgFile, "-dnsserver", "127.0.0.1:"+strconv.Itoa(dnsPort))
	roots := x509.NewCertPool()
	pemBytes, _ := os.ReadFile(rootFile)
	roots.AppendCertsFromPEM(pemBytes)
	ca := &CA{Directory: fmt.Sprintf("https://127.0.0.1:%d/dir", listen), RootFile: rootFile,
		mgmt: fmt.Sprintf("https://127.0.0.1:%d", mgmt), log: log,
		client: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}}
	wait.For(t, 15*time.Second, "pebble's directory "+ca.Directory+" to answer", func() bool {
		resp, err := ca.client.Get(ca.Directory)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return ca
}

// start runs bin with args in dir and env, its output in the returned
// buffer, killed by its PID when the test ends.
func start(t testing.TB, dir, name, bin string, env []string, args ...string) *buffer {
	t.Helper()
	out := &buffer{}
	cmd := exec.Command(bin, args...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, out, out
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-exited
	})
	return out
}

// Issued counts the certificates Pebble has issued.
func (c *CA) Issued() int {
	return strings.Count(c.log.String(), "Issued certificate serial ")
}

// Log is Pebble's output so far.
func (c *CA) Log() string { return c.log.String() }

// Roots returns the pool of the roots Pebble issues under (they change
// with every start), for verifying the certificates it issued.
func (c *CA) Roots(t testing.TB) *x509.CertPool {
	t.Helper()
	resp, err := c.client.Get(c.mgmt + "/roots/0")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		t.Fatalf("pebble's root: %d %q", resp.StatusCode, b)
	}
	return pool
}

// writeHTTPSCert writes a CA and, signed by it, the certificate of
// Pebble's HTTPS for 127.0.0.1 and localhost, with its key, into dir.
func writeHTTPSCert(t testing.TB, dir string) (rootFile, certFile, keyFile string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "pebbletest HTTPS CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalPKCS8PrivateKey(key)
	rootFile, certFile, keyFile = filepath.Join(dir, "https-ca.pem"), filepath.Join(dir, "https.pem"), filepath.Join(dir, "https.key")
	for f, b := range map[string][]byte{
		rootFile: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		certFile: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyFile:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}),
	} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return rootFile, certFile, keyFile
}

// FreePorts returns n distinct loopback ports free for TCP and UDP now,
// none of them one a Reservation holds; another process could take one
// before it is bound, which then fails the test, saying so.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	var held []io.Closer
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	var out []int
	for tries := 0; len(out) < n; tries++ {
		if tries > 10*n {
			t.Fatal("no loopback port free for both TCP and UDP")
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, ln)
		port := ln.Addr().(*net.TCPAddr).Port
		if pc, err := net.ListenPacket("udp", "127.0.0.1:"+strconv.Itoa(port)); err == nil {
			held = append(held, pc)
			out = append(out, port)
		}
	}
	return out
}

// Reservation holds loopback ports bound until Release, so that the ports
// a test gives a process it starts later (edge) are not chosen meanwhile
// by Start for Pebble's own.
type Reservation struct {
	Ports []int
	lns   []net.Listener
}

// Reserve binds n loopback ports until Release (or the end of the test).
func Reserve(t testing.TB, n int) *Reservation {
	t.Helper()
	r := &Reservation{}
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		r.lns = append(r.lns, ln)
		r.Ports = append(r.Ports, ln.Addr().(*net.TCPAddr).Port)
	}
	t.Cleanup(r.Release)
	return r
}

// Release frees the ports, for the process that binds them.
func (r *Reservation) Release() {
	for _, ln := range r.lns {
		ln.Close()
	}
	r.lns = nil
}

// buffer is a process's output, read while it writes.
type buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
