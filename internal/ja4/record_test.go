package ja4

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var record = flag.Bool("record", false, "record real clients' ClientHellos into testdata/*.hello (needs curl, openssl and python3); the table in ja4_test.go must then be derived again by hand")

// A recordedClient sends one ClientHello to addr (127.0.0.1:port) and may
// fail once the server hangs up on it.
type recordedClient struct {
	name string
	send func(ctx context.Context, addr string) error
}

// pythonClient is Python's ssl with the ALPN that its http.client offers.
const pythonClient = `import socket, ssl, sys
host, port = sys.argv[1].rsplit(":", 1)
ctx = ssl.create_default_context()
ctx.set_alpn_protocols(["http/1.1"])
ctx.wrap_socket(socket.create_connection((host, int(port))), server_hostname="example.com")
`

var recordedClients = []recordedClient{
	{"curl", command("curl", "-sk", "https://{addr}/")},
	{"openssl", command("openssl", "s_client", "-connect", "{addr}", "-servername", "example.com")},
	{"openssl-nosni", command("openssl", "s_client", "-connect", "{addr}", "-noservername")},
	{"python", command("python3", "-c", pythonClient, "{addr}")},
	{"go-tls", func(ctx context.Context, addr string) error {
		d := tls.Dialer{Config: &tls.Config{ServerName: "example.com"}}
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			c.Close()
		}
		return err
	}},
	{"go-http", func(ctx context.Context, addr string) error {
		tr := http.DefaultTransport.(*http.Transport).Clone() // offers h2, as http.Get does
		defer tr.CloseIdleConnections()
		tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://example.com/", nil)
		if err != nil {
			return err
		}
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}},
}

// command runs name with args, "{addr}" replaced by the address, stdin
// empty.
func command(name string, args ...string) func(context.Context, string) error {
	return func(ctx context.Context, addr string) error {
		a := make([]string, len(args))
		for i, s := range args {
			a[i] = strings.ReplaceAll(s, "{addr}", addr)
		}
		cmd := exec.CommandContext(ctx, name, a...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s: %w: %s", name, err, out)
		}
		return nil
	}
}

// TestRecord, with -record, listens on 127.0.0.1, has each of
// recordedClients connect, and writes the records of its ClientHello as
// sent, in hex, to testdata/<name>.hello.
func TestRecord(t *testing.T) {
	if !*record {
		t.Skip("records only with -record")
	}
	for _, c := range recordedClients {
		t.Run(c.name, func(t *testing.T) {
			hello, err := recordHello(t, c)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", c.name+".hello")
			if err := os.WriteFile(path, []byte(wrapHex(hello)), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %d bytes", path, len(hello))
		})
	}
}

// recordHello accepts c's connection and returns the TLS records that
// carry its ClientHello, then hangs up.
func recordHello(t *testing.T, c recordedClient) ([]byte, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	sent := make(chan error, 1)
	go func() { sent <- c.send(ctx, ln.Addr().String()) }()
	defer func() { t.Logf("client: %v", <-sent) }() // it fails: we hang up mid-handshake

	conn, err := ln.Accept()
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	return readHelloRecords(conn)
}

// readHelloRecords reads handshake records until they hold one whole
// handshake message, and returns the records.
func readHelloRecords(r io.Reader) ([]byte, error) {
	var records, msg []byte
	for len(msg) < 4 || len(msg) < 4+int(msg[1])<<16|int(msg[2])<<8|int(msg[3]) {
		var hdr [5]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return nil, err
		}
		if hdr[0] != 22 { // handshake
			return nil, fmt.Errorf("record type %d, not a handshake", hdr[0])
		}
		body := make([]byte, binary.BigEndian.Uint16(hdr[3:]))
		if _, err := io.ReadFull(r, body); err != nil {
			return nil, err
		}
		records = append(append(records, hdr[:]...), body...)
		msg = append(msg, body...)
	}
	if msg[0] != 1 {
		return nil, errors.New("not a ClientHello")
	}
	return records, nil
}

// wrapHex writes b in hex, 32 bytes a line.
func wrapHex(b []byte) string {
	var s strings.Builder
	for len(b) > 0 {
		n := min(len(b), 32)
		s.WriteString(hex.EncodeToString(b[:n]))
		s.WriteByte('\n')
		b = b[n:]
	}
	return s.String()
}
