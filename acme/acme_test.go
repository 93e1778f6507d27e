package acme

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgerate/edge/rules"
	"go.uber.org/zap"
)

// TestRenewalRatio: without renewal information, the buckets spread the
// renewal of a certificate between 63% and 70% of its lifetime, around
// two thirds, and a name's bucket is the same on every node (no seed).
func TestRenewalRatio(t *testing.T) {
	lo, hi := renewalRatio(0), renewalRatio(jitterBuckets-1)
	if got, want := 1-hi, 0.633; got < want-0.001 || got > want+0.001 {
		t.Errorf("earliest renewal at %.3f of the lifetime, want %.3f", got, want)
	}
	if got, want := 1-lo, 0.7; got < want-0.001 || got > want+0.001 {
		t.Errorf("latest renewal at %.3f of the lifetime, want %.3f", got, want)
	}
	if mid := (lo + hi) / 2; mid < 1.0/3-1e-9 || mid > 1.0/3+1e-9 {
		t.Errorf("buckets centred on %.4f of the lifetime left, want 1/3", mid)
	}
	seen := map[int]bool{}
	for _, n := range []string{"a.example.com", "b.example.com", "c.example.com", "www.example.org", "api.example.net", "x.test"} {
		b := bucketOf(n)
		if b != bucketOf(n) || b < 0 || b >= jitterBuckets {
			t.Errorf("bucketOf(%q) = %d, not stable or out of range", n, b)
		}
		seen[b] = true
	}
	if len(seen) < 2 {
		t.Errorf("six names all fell in one bucket: no jitter")
	}
}

func TestLoadRoots(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "garbage.pem"), []byte("not PEM"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, root, want string
	}{
		{"none: the system's", "", ""},
		{"missing", "nope.pem", `tls.acme.ca_root "nope.pem": no such file or directory`},
		{"not PEM", "garbage.pem", `tls.acme.ca_root "garbage.pem": no PEM certificate in it (want -----BEGIN CERTIFICATE----- blocks)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pool, err := LoadRoots(dir, &rules.ACME{CARoot: tt.root})
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.want || tt.want == "" && pool != nil {
				t.Errorf("got %v, %q; want nil, %q", pool, got, tt.want)
			}
		})
	}
}

// TestSlogCore: certmagic's zap lines reach slog at their levels, with
// the logger's name and their fields, those of With included, and what
// slog's level leaves out is not written.
func TestSlogCore(t *testing.T) {
	var buf bytes.Buffer
	log := zap.New(slogCore{h: slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})}).Named("acme")
	log.Named("obtain").With(zap.String("identifier", "a.example.com")).Info("obtaining certificate",
		zap.Duration("remaining", 90*time.Second), zap.Strings("sans", []string{"a", "b"}))
	log.Debug("not shown")
	log.Error("failed", zap.Error(os.ErrNotExist))
	got := strings.Split(strings.TrimSpace(buf.String()), "\n")
	want := []string{
		`level=INFO msg="obtaining certificate" logger=acme.obtain identifier=a.example.com remaining=1m30s sans="[a b]"`,
		`level=ERROR msg=failed logger=acme error="file does not exist"`,
	}
	if len(got) != len(want) {
		t.Fatalf("got %d lines %q, want %d", len(got), got, len(want))
	}
	for i := range want {
		if _, line, _ := strings.Cut(got[i], " "); line != want[i] {
			t.Errorf("line %d: got %s, want %s", i, line, want[i])
		}
	}
}

// TestManagerCloses: a Manager made and closed leaves no goroutine, makes
// its storage directory (mode 0700) and serves nothing for a name it does
// not manage.
func TestManagerCloses(t *testing.T) {
	dir := t.TempDir()
	m, err := New(Options{ACME: &rules.ACME{CA: "https://127.0.0.1:1/dir", Storage: "acme-data", HTTP01: true},
		Dir: dir, HTTPAddr: "127.0.0.1:1", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	m.Manage(nil)
	if c := m.Certificate("a.example.com"); c != nil {
		t.Error("a certificate for a name not managed")
	}
	if st := m.Status(); len(st) != 0 {
		t.Errorf("status of no name: %v", st)
	}
	m.Close()
	fi, err := os.Stat(filepath.Join(dir, "acme-data"))
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("storage directory: %v, %v; want mode 0700", fi, err)
	}
}

// TestManagerFailedOrder: an order from a CA that does not answer fails,
// is counted, and leaves the name failed with its error while certmagic
// waits to retry; Close ends the wait at once.
func TestManagerFailedOrder(t *testing.T) {
	results := make(chan [2]bool, 4)
	m, err := New(Options{ACME: &rules.ACME{CA: "https://127.0.0.1:1/dir", Storage: "acme-data", HTTP01: true},
		Dir: t.TempDir(), HTTPAddr: "127.0.0.1:1", Logger: slog.New(slog.DiscardHandler),
		OnResult: func(renewal, ok bool) { results <- [2]bool{renewal, ok} }})
	if err != nil {
		t.Fatal(err)
	}
	m.Manage([]string{"a.example.com"})
	select {
	case r := <-results:
		if r != [2]bool{false, false} {
			t.Errorf("result %v, want a failed order (not a renewal)", r)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no failed order within 30s")
	}
	st := m.Status()
	if len(st) != 1 || st[0].State != "failed" || !strings.Contains(st[0].LastError, "127.0.0.1:1") || st[0].LastErrorAt.IsZero() {
		t.Errorf("status %+v, want a.example.com failed with the CA's error", st)
	}
	start := time.Now()
	m.Close()
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Close took %v while an order waited to retry", took)
	}
}
