package cluster

import (
	"context"
	"errors"
	"io/fs"
	"slices"
	"testing"
	"time"

	"github.com/edgerate/edge/internal/redistest"
	"github.com/edgerate/edge/rules"
)

// TestStorageFiles: values stored by one node are read by another; a
// missing one is fs.ErrNotExist; directories list their children (one
// level, or all), exist, and delete with what is under them.
func TestStorageFiles(t *testing.T) {
	srv := redistest.Start(t)
	cfg := testConfig(srv.Addr, rules.SyncExact, rules.FailLocal)
	a, b := newClient(t, cfg, "n1").Storage(), newClient(t, cfg, "n2").Storage()
	t.Cleanup(a.Close)
	t.Cleanup(b.Close)
	ctx := context.Background()
	for name, v := range map[string]string{
		"acme/ca/users/ops/ops.json":         `{"a":1}`,
		"acme/ca/users/ops/ops.key":          "KEY",
		"acme/ca/sites/a.example/a.crt":      "CERT",
		"acme/ca/sites/a.example/a.json":     "{}",
		"acme/ca/sites/b.example/b.crt":      "CERT B",
		"acme/ca/challenge_tokens/a.example": "token",
	} {
		if err := a.Store(ctx, name, []byte(v)); err != nil {
			t.Fatalf("Store %s: %v", name, err)
		}
	}
	if got, err := b.Load(ctx, "acme/ca/sites/a.example/a.crt"); err != nil || string(got) != "CERT" {
		t.Errorf("the other node loads %q, %v; want CERT", got, err)
	}
	if _, err := b.Load(ctx, "acme/ca/sites/none"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing value: %v, want fs.ErrNotExist", err)
	}
	info, err := b.Stat(ctx, "acme/ca/sites/b.example/b.crt")
	if err != nil || !info.IsTerminal || info.Size != 6 || time.Since(info.Modified) > time.Minute {
		t.Errorf("Stat of a value: %+v, %v", info, err)
	}
	if info, err := b.Stat(ctx, "acme/ca/sites"); err != nil || info.IsTerminal {
		t.Errorf("Stat of a directory: %+v, %v", info, err)
	}
	if _, err := b.Stat(ctx, "acme/ca/site"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Stat of a prefix that is no directory: %v, want fs.ErrNotExist", err)
	}
	lists := []struct {
		dir       string
		recursive bool
		want      []string
	}{
		{"acme/ca/sites", false, []string{"acme/ca/sites/a.example", "acme/ca/sites/b.example"}},
		{"acme/ca/sites", true, []string{"acme/ca/sites/a.example/a.crt", "acme/ca/sites/a.example/a.json", "acme/ca/sites/b.example/b.crt"}},
		{"acme/ca", false, []string{"acme/ca/challenge_tokens", "acme/ca/sites", "acme/ca/users"}},
		{"acme/none", false, nil},
	}
	for _, l := range lists {
		if got, err := b.List(ctx, l.dir, l.recursive); err != nil || !slices.Equal(got, l.want) {
			t.Errorf("List(%q, %v) = %q, %v; want %q", l.dir, l.recursive, got, err, l.want)
		}
	}
	if !b.Exists(ctx, "acme/ca/users") || !b.Exists(ctx, "acme/ca/users/ops/ops.key") || b.Exists(ctx, "acme/ca/user") {
		t.Error("Exists wrong for a directory, a value or a prefix")
	}
	if err := b.Delete(ctx, "acme/ca/sites/a.example"); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(ctx, "acme/ca/sites/gone"); err != nil {
		t.Errorf("deleting what is not there: %v, want nil", err)
	}
	if got, _ := a.List(ctx, "acme/ca/sites", true); !slices.Equal(got, []string{"acme/ca/sites/b.example/b.crt"}) {
		t.Errorf("after deleting a directory: %q", got)
	}
	if _, err := a.Load(ctx, "acme/ca/sites/a.example/a.crt"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a value of a deleted directory: %v, want fs.ErrNotExist", err)
	}
}

// TestStorageLocks: a lock one node holds another can neither try nor
// take until it is released; Lock waits for it, or for its context; Close
// releases what a node still holds.
func TestStorageLocks(t *testing.T) {
	srv := redistest.Start(t)
	cfg := testConfig(srv.Addr, rules.SyncExact, rules.FailLocal)
	a, b := newClient(t, cfg, "n1").Storage(), newClient(t, cfg, "n2").Storage()
	t.Cleanup(b.Close)
	ctx := context.Background()
	if err := a.Lock(ctx, "issue_cert_a.example"); err != nil {
		t.Fatal(err)
	}
	if ok, err := b.TryLock(ctx, "issue_cert_a.example"); ok || err != nil {
		t.Errorf("TryLock of a held lock: %v, %v; want false", ok, err)
	}
	if ok, _ := a.TryLock(ctx, "issue_cert_a.example"); ok {
		t.Error("the holder took its own lock twice")
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if err := b.Lock(short, "issue_cert_a.example"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Lock of a held lock until the deadline: %v, want DeadlineExceeded", err)
	}
	if err := a.RenewLockLease(ctx, "issue_cert_a.example", time.Minute); err != nil {
		t.Errorf("RenewLockLease: %v", err)
	}
	got := make(chan error, 1)
	go func() { got <- b.Lock(ctx, "issue_cert_a.example") }()
	if err := a.Unlock(ctx, "issue_cert_a.example"); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("Lock after the release: %v", err)
	}
	if err := a.Unlock(ctx, "issue_cert_a.example"); err == nil {
		t.Error("a node released a lock it no longer holds")
	}
	if err := a.Lock(ctx, "other"); err != nil {
		t.Fatal(err)
	}
	a.Close()
	if ok, err := b.TryLock(ctx, "other"); !ok || err != nil {
		t.Errorf("after Close of its holder: TryLock %v, %v; want true", ok, err)
	}
}

// TestStorageBesideShortDeadlines: a storage round trip made while a
// counter's command with a deadline of microseconds dials the client's
// shared connection does not fail with it (it goes over a connection of
// its own).
func TestStorageBesideShortDeadlines(t *testing.T) {
	srv := redistest.Start(t)
	cfg := testConfig(srv.Addr, rules.SyncExact, rules.FailLocal)
	for round := range 10 {
		c := newClient(t, cfg, "n1")
		st := c.Storage()
		errs := make(chan error, 6)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Microsecond)
			defer cancel()
			rdb := c.redis()
			rdb.Do(ctx, rdb.B().Ping().Build())
			errs <- nil
		}()
		for range 5 {
			go func() {
				_, err := st.Load(context.Background(), "x")
				if errors.Is(err, fs.ErrNotExist) {
					err = nil
				}
				errs <- err
			}()
		}
		for range 6 {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: a storage Load failed beside a short deadline: %v", round, err)
			}
		}
	}
}
