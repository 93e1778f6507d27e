package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/edgerate/edge/internal/wait"
	"github.com/edgerate/edge/rls"
	"go.yaml.in/yaml/v4"
)

var rlsListenAttr = regexp.MustCompile(`rls_listen=(\S+)`)

// TestEndToEndRLS runs the built binary as Envoy's rate limit service and
// asks it over TCP with go-control-plane's client: Lyft's file is
// enforced, the answer carries the fields, the health service answers,
// a changed file is reloaded, a broken one leaves the running limits in
// place, and SIGTERM stops it cleanly.
func TestEndToEndRLS(t *testing.T) {
	bin := buildEdge(t)
	dir := t.TempDir()
	must(t, os.Mkdir(filepath.Join(dir, "ratelimit"), 0o755))
	lyft := filepath.Join(dir, "ratelimit", "e2e.yaml")
	writeLyft := func(body string) { must(t, os.WriteFile(lyft, []byte(body), 0o644)) }
	writeLyft("domain: e2e\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: 2}\n")
	cfg := filepath.Join(dir, "edge.yaml")
	must(t, os.WriteFile(cfg, []byte(`listen: "`+publicAnyPort+`"
admin_listen: "`+adminAnyPort+`"
rls:
  listen: "127.0.0.1:0"
  config: ["ratelimit/*.yaml"]
  response_headers: true
domains: [{hosts: ["*"], respond: {body: ok}}]
`), 0o644))

	e := startBinary(t, bin, cfg)
	m := rlsListenAttr.FindStringSubmatch(e.stderr.String())
	if m == nil {
		t.Fatalf("no rls_listen in the log:\n%s", e.stderr.String())
	}
	conn, err := grpc.NewClient(m[1], grpc.WithTransportCredentials(insecure.NewCredentials()))
	must(t, err)
	defer conn.Close()
	client := pb.NewRateLimitServiceClient(conn)
	ask := func() *pb.RateLimitResponse {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := client.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "e2e", Descriptors: []*rlspb.RateLimitDescriptor{
			{Entries: []*rlspb.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "192.0.2.1"}}},
		}})
		must(t, err)
		return resp
	}
	for i, want := range []pb.RateLimitResponse_Code{pb.RateLimitResponse_OK, pb.RateLimitResponse_OK, pb.RateLimitResponse_OVER_LIMIT} {
		resp := ask()
		if resp.OverallCode != want {
			t.Fatalf("call %d: got %v, want %v", i, resp.OverallCode, want)
		}
		if want == pb.RateLimitResponse_OVER_LIMIT {
			var fields []string
			for _, h := range resp.ResponseHeadersToAdd {
				fields = append(fields, h.Key+": "+h.Value)
			}
			if got := strings.Join(fields, "\n"); !strings.Contains(got, "X-Ratelimit-Remaining: 0") || !strings.Contains(got, `Ratelimit-Policy: "rls";q=2;w=60`) {
				t.Errorf("fields:\n%s\nwant X-RateLimit-Remaining 0 and the policy", got)
			}
		}
	}
	h, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health: got %v, %v; want SERVING", h, err)
	}

	// A changed file is picked up by the poll; its new limit counts afresh.
	writeLyft("domain: e2e\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: 5}\n")
	wait.For(t, 20*time.Second, "the rls file reloaded", func() bool {
		return ask().Statuses[0].GetCurrentLimit().GetRequestsPerUnit() == 5
	})
	// A broken file is refused, naming it; the running limits stay.
	writeLyft("domain: e2e\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	wait.For(t, 20*time.Second, "the broken file refused", func() bool {
		return strings.Contains(e.stderr.String(), "invalid rate limit unit 'fortnight'")
	})
	if got := ask().Statuses[0].GetCurrentLimit().GetRequestsPerUnit(); got != 5 {
		t.Errorf("after a broken file: limit %d, want 5 (the running configuration stays)", got)
	}
	// SIGHUP reloads too.
	writeLyft("domain: e2e\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: 7}\n")
	must(t, e.cmd.Process.Signal(syscall.SIGHUP))
	wait.For(t, 20*time.Second, "the rls file reloaded on SIGHUP", func() bool {
		return ask().Statuses[0].GetCurrentLimit().GetRequestsPerUnit() == 7
	})
	e.stop(t)
}

// TestCheckRLS: edge -check validates the Lyft files too, naming the file,
// line and path of each problem.
func TestCheckRLS(t *testing.T) {
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, unlimited: true}\n"), 0o644))
	cfg := filepath.Join(dir, "edge.yaml")
	must(t, os.WriteFile(cfg, []byte("rls: {listen: \"127.0.0.1:0\", config: [bad.yaml]}\ndomains: [{hosts: [\"*\"], respond: {body: ok}}]\n"), 0o644))
	code, _, stderr := runEdge("-check", "-config", cfg)
	want := filepath.Join(dir, "bad.yaml") + ":4: descriptors[0].rate_limit.unit: should not specify rate limit unit when unlimited"
	if code != 1 || !strings.Contains(stderr, want) {
		t.Errorf("got %d, %q; want 1 and %q", code, stderr, want)
	}
	code, stdout, _ := runEdge("-check", "-config", "../../configs/rls.yaml")
	if code != 0 || !strings.Contains(stdout, "rls: 1 domain from 1 file") {
		t.Errorf("configs/rls.yaml: got %d, %q", code, stdout)
	}
}

// TestDocsEnvoy: docs/beside.md's Envoy section shows Lyft's file that
// configs/ratelimit/shop.yaml holds (less its comments and shadow entry),
// and an Envoy configuration that is YAML, asks the domain of that file on
// the port configs/rls.yaml listens on, and sends descriptors the file
// limits.
func TestDocsEnvoy(t *testing.T) {
	sec := docSection(t, "docs/beside.md", "Envoy")
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(sec, -1)
	if len(blocks) < 2 {
		t.Fatalf("want Lyft's file and Envoy's configuration, got %d yaml blocks", len(blocks))
	}
	lyft, err := rls.Parse([]rls.File{{Name: "docs/beside.md", Data: []byte(blocks[0][1])}}, false)
	if err != nil {
		t.Fatal(err)
	}
	ex, err := rls.Load("../../configs", []string{"ratelimit/shop.yaml"}, false)
	if err != nil {
		t.Fatal(err)
	}
	shown, real := lyft.Domains["shop"], ex.Domains["shop"]
	if shown == nil || real == nil || len(real.Descriptors()) != len(shown.Descriptors())+1 {
		t.Fatalf("docs/beside.md shows %v, configs/ratelimit/shop.yaml has %v", shown, real)
	}
	for i, e := range shown.Descriptors() {
		r := real.Descriptors()[i]
		if e.Path != r.Path || (e.Limit == nil) != (r.Limit == nil) || (e.Limit != nil && (e.Limit.Unit != r.Limit.Unit || e.Limit.RequestsPerUnit != r.Limit.RequestsPerUnit || e.Limit.Name != r.Limit.Name)) {
			t.Errorf("descriptor %d: docs/beside.md %s, configs %s", i, e.Path, r.Path)
		}
	}
	var envoy map[string]any
	if err := yaml.Unmarshal([]byte(blocks[1][1]), &envoy); err != nil {
		t.Fatalf("Envoy's configuration: %v", err)
	}
	text := blocks[1][1]
	table, _, err := loadConfig("../../configs/rls.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := strings.Cut(table.RLS.Listen, ":")
	for _, want := range []string{"port_value: " + port, "domain: shop", "cluster_name: edge-rls", "http2_protocol_options",
		"{generic_key: {descriptor_value: checkout}}, {remote_address: {}}", "descriptor_key: plan, descriptor_value: gold"} {
		if !strings.Contains(text, want) {
			t.Errorf("Envoy's configuration lacks %q", want)
		}
	}
}

// TestReloadRLSFiles: the poll reloads a changed Lyft file, reports a
// broken one once (not on every poll) and keeps the running limits, and
// reloads again once the file is fixed.
func TestReloadRLSFiles(t *testing.T) {
	dir := t.TempDir()
	lyft := filepath.Join(dir, "shop.yaml")
	write := func(path, body string) { must(t, os.WriteFile(path, []byte(body), 0o600)) }
	write(lyft, "domain: shop\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n")
	config := "rls: {listen: \"127.0.0.1:0\", config: [\"shop.yaml\"]}\ndomains: [{hosts: [\"*\"], respond: {body: ok}}]\n"
	a := newAdminUnderTest(t, config, true)
	// newAdminUnderTest wrote the main file in a directory of its own:
	// put it beside the Lyft file.
	a.path = filepath.Join(dir, "edge.yaml")
	write(a.path, config)
	table, _, err := loadConfig(a.path)
	must(t, err)
	rc, err := loadRLS(a.path, table)
	must(t, err)
	svc, err := rls.New(rls.Options{Table: table, Config: rc})
	must(t, err)
	t.Cleanup(svc.Close)
	a.rl = newReloader(a.path, "", os.Environ(), a.proxy, slog.New(slog.NewTextHandler(a.log, nil)), new(slog.LevelVar))
	a.rl.rls = svc
	a.rl.rlsOf, a.rl.lastRLS = table, rlsStamp(a.path, table)
	a.rl.reload(true)

	limit := func() uint32 {
		resp, err := svc.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "shop",
			Descriptors: []*rlspb.RateLimitDescriptor{{Entries: []*rlspb.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}})
		must(t, err)
		return resp.Statuses[0].GetCurrentLimit().GetRequestsPerUnit()
	}
	// Each write changes the size, so the poll sees it whatever the clock's
	// resolution.
	write(lyft, "domain: shop\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 22}\n")
	a.rl.reload(false)
	if got := limit(); got != 22 {
		t.Fatalf("after a change: limit %d, want 22", got)
	}
	write(lyft, "domain: shop\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	for range 3 {
		a.rl.reload(false)
	}
	if n := strings.Count(a.log.String(), "fortnight"); n != 1 {
		t.Errorf("the broken file was reported %d times, want once:\n%s", n, a.log.String())
	}
	if got := limit(); got != 22 {
		t.Errorf("after a broken file: limit %d, want 22", got)
	}
	write(lyft, "domain: shop\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 333}\n")
	a.rl.reload(false)
	if got := limit(); got != 333 {
		t.Errorf("after the fix: limit %d, want 333", got)
	}
}

// TestEndToEndRLSOnly runs the built binary as the rate limit service
// alone: a configuration of rls and admin_listen, with no domains, passes
// edge -check, starts without a public listener, answers ShouldRateLimit
// over gRPC (a limit per year), serves /readyz and /metrics on the admin
// listener, and stops cleanly on SIGTERM. configs/rls-only.yaml is such a
// configuration.
func TestEndToEndRLSOnly(t *testing.T) {
	code, stdout, stderr := runEdge("-check", "-config", "../../configs/rls-only.yaml")
	if code != 0 || !strings.Contains(stdout, "0 domains, 0 rules; rls: 1 domain from 1 file") {
		t.Errorf("configs/rls-only.yaml: got %d, %q, %q", code, stdout, stderr)
	}
	bin := buildEdge(t)
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, "licenses.yaml"), []byte("domain: licenses\ndescriptors:\n  - key: license\n    rate_limit: {unit: year, requests_per_unit: 2}\n"), 0o644))
	cfg := filepath.Join(dir, "edge.yaml")
	must(t, os.WriteFile(cfg, []byte(`admin_listen: "`+adminAnyPort+`"
rls:
  listen: "127.0.0.1:0"
  config: [licenses.yaml]
`), 0o644))
	code, stdout, stderr = runEdge("-check", "-config", cfg)
	if code != 0 || !strings.Contains(stdout, "is valid: 0 domains, 0 rules; rls: 1 domain from 1 file") {
		t.Fatalf("edge -check: got %d, %q, %q", code, stdout, stderr)
	}

	e := runBinary(t, bin, cfg)
	public, admin := e.stderr.waitListening(t)
	if public != "" {
		t.Errorf("a public listener on %s, want none:\n%s", public, e.stderr.String())
	}
	m := rlsListenAttr.FindStringSubmatch(e.stderr.String())
	if m == nil {
		t.Fatalf("no rls_listen in the log:\n%s", e.stderr.String())
	}
	conn, err := grpc.NewClient(m[1], grpc.WithTransportCredentials(insecure.NewCredentials()))
	must(t, err)
	defer conn.Close()
	client := pb.NewRateLimitServiceClient(conn)
	var codes []string
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := client.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "licenses", Descriptors: []*rlspb.RateLimitDescriptor{
			{Entries: []*rlspb.RateLimitDescriptor_Entry{{Key: "license", Value: "l-1"}}},
		}})
		cancel()
		must(t, err)
		codes = append(codes, resp.OverallCode.String())
	}
	if got, want := strings.Join(codes, " "), "OK OK OVER_LIMIT"; got != want {
		t.Errorf("ShouldRateLimit: got %s, want %s", got, want)
	}
	h, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health: got %v, %v; want SERVING", h, err)
	}
	for _, tc := range []struct{ path, want string }{
		{"/readyz", ""},
		{"/healthz", ""},
		{"/metrics", `edge_rls_requests_total{code="over_limit",domain="licenses"`},
	} {
		resp, err := http.Get("http://" + admin + tc.path)
		must(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), tc.want) {
			t.Errorf("GET %s: %d, want 200 with %q:\n%s", tc.path, resp.StatusCode, tc.want, body)
		}
	}
	e.stop(t)
}

// TestDocsRLSOnly: docs/configuration.md's example of the rate limit service alone is
// configs/rls-only.yaml less its comments, which TestEndToEndRLSOnly runs.
func TestDocsRLSOnly(t *testing.T) {
	_, after, ok := strings.Cut(docSection(t, "docs/configuration.md", "`rls`"), "**The rate limit service alone.**")
	if !ok {
		t.Fatal("docs/configuration.md has no paragraph on the rate limit service alone")
	}
	_, block, ok := strings.Cut(after, "```yaml\n")
	block, _, _ = strings.Cut(block, "```")
	if !ok {
		t.Fatal("docs/configuration.md shows no configuration of the rate limit service alone")
	}
	file, err := os.ReadFile("../../configs/rls-only.yaml")
	must(t, err)
	var shown, real map[string]any
	must(t, yaml.Unmarshal([]byte(block), &shown))
	must(t, yaml.Unmarshal(file, &real))
	if fmt.Sprint(shown) != fmt.Sprint(real) {
		t.Errorf("docs/configuration.md shows %v, configs/rls-only.yaml has %v", shown, real)
	}
}
