package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
)

// grpcOrigin starts a grpc-go server on 127.0.0.1 (plaintext HTTP/2,
// prior knowledge) with the health service (unary Check, server-streaming
// Watch) and reflection (a bidirectional stream), and returns its address.
func grpcOrigin(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	srv := grpc.NewServer()
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	reflection.Register(srv)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	return ln.Addr().String()
}

// grpcClient dials e's TLS listener as host with grpc-go.
func (e *tlsEdge) grpcClient(t *testing.T, host string) *grpc.ClientConn {
	t.Helper()
	creds := credentials.NewTLS(&tls.Config{RootCAs: e.ca.Pool, ServerName: host})
	conn, err := grpc.NewClient("passthrough:///"+e.tls, grpc.WithTransportCredentials(creds))
	must(t, err)
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestGRPCThroughEdge: a real grpc-go client calls a real grpc-go server
// through edge (TLS to edge, h2c to the origin): unary, server-streaming
// and bidirectional calls pass, a bidirectional stream stays open past
// timeouts.read and timeouts.write, a call a rule refuses returns
// ResourceExhausted with the wait, a shed call Unavailable, and a call to
// an http:// origin Unavailable.
func TestGRPCThroughEdge(t *testing.T) {
	// Two servers: every call goes through the group's choice (h2c
	// origins share it with the other schemes).
	origin, second := grpcOrigin(t), grpcOrigin(t)
	e := startTLSEdge(t, fmt.Sprintf(`
listen: %q
admin_listen: %q
origins: [{url: "h2c://%s"}, {url: "h2c://%s"}]
timeouts: {read: 300ms, write: 300ms}
tls:
  listen: "127.0.0.1:0"
  certificates:
    - {cert_file: api.pem, key_file: api.key}
    - {cert_file: wild.pem, key_file: wild.key}
domains:
  - name: api
    hosts: [api.example.com]
    request_buffering: true
    rules:
      - {name: checks, match: {path_prefix: /grpc.health.v1.Health/Check}, limit: 2, period: 1h}
  - name: shed
    hosts: [shed.example.net]
    shed: {max_in_flight: 1}
  - name: plain
    hosts: [plain.example.net]
    origin: "http://%s"
`, publicAnyPort, adminAnyPort, origin, second, origin))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	api := e.grpcClient(t, "api.example.com")
	hc := healthpb.NewHealthClient(api)

	t.Run("unary", func(t *testing.T) {
		for i := range 2 {
			resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
			if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
				t.Fatalf("call %d: %v, %v; want SERVING", i, resp, err)
			}
		}
		_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		st := status.Convert(err)
		if st.Code() != codes.ResourceExhausted || !strings.HasPrefix(st.Message(), "rate limited: retry in ") || !strings.HasSuffix(st.Message(), "s") {
			t.Errorf("the call over the limit: %v %q, want ResourceExhausted \"rate limited: retry in Ns\"", st.Code(), st.Message())
		}
		_, err = hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "unknown"}) // refused before the origin's NotFound
		if got := status.Code(err); got != codes.ResourceExhausted {
			t.Errorf("another call over the limit: %v, want ResourceExhausted", got)
		}
	})

	t.Run("server streaming", func(t *testing.T) {
		w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
		must(t, err)
		resp, err := w.Recv()
		if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("Watch: %v, %v; want SERVING", resp, err)
		}
		_, err = healthpb.NewHealthClient(api).Check(ctx, &healthpb.HealthCheckRequest{Service: "x"})
		if got := status.Code(err); got != codes.ResourceExhausted {
			t.Errorf("Check beside the stream: %v, want ResourceExhausted", got)
		}
	})

	t.Run("bidirectional past timeouts.read", func(t *testing.T) {
		s, err := reflectionpb.NewServerReflectionClient(api).ServerReflectionInfo(ctx)
		must(t, err)
		ask := func(when string) {
			t.Helper()
			must(t, s.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}))
			resp, err := s.Recv()
			if err != nil {
				t.Fatalf("%s: %v", when, err)
			}
			var names []string
			for _, svc := range resp.GetListServicesResponse().GetService() {
				names = append(names, svc.Name)
			}
			if got := strings.Join(names, " "); !strings.Contains(got, "grpc.health.v1.Health") {
				t.Errorf("%s: services %q, want the health service", when, got)
			}
		}
		ask("at once")
		<-time.After(time.Second) // the stream stays open, idle, past timeouts.read and timeouts.write
		ask("after a second")
		must(t, s.CloseSend())
		// The origin ends the stream with trailers (grpc-status 0) after
		// its messages: lost, grpc-go would report Internal.
		if _, err := s.Recv(); err != io.EOF {
			t.Errorf("the stream's end: %v, want EOF (status OK in the trailers)", err)
		}
	})

	t.Run("shed", func(t *testing.T) {
		shed := healthpb.NewHealthClient(e.grpcClient(t, "shed.example.net"))
		sctx, scancel := context.WithCancel(ctx)
		defer scancel()
		w, err := shed.Watch(sctx, &healthpb.HealthCheckRequest{}) // holds the domain's one slot
		must(t, err)
		if _, err := w.Recv(); err != nil {
			t.Fatalf("Watch: %v", err)
		}
		_, err = shed.Check(ctx, &healthpb.HealthCheckRequest{})
		if st := status.Convert(err); st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "shed") {
			t.Errorf("the call beyond max_in_flight: %v %q, want Unavailable, shed", st.Code(), st.Message())
		}
	})

	t.Run("http origin", func(t *testing.T) {
		_, err := healthpb.NewHealthClient(e.grpcClient(t, "plain.example.net")).Check(ctx, &healthpb.HealthCheckRequest{})
		if st := status.Convert(err); st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "HTTP/2") {
			t.Errorf("a call to an http:// origin: %v %q, want Unavailable", st.Code(), st.Message())
		}
	})
}
