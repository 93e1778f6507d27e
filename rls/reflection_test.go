package rls

import (
	"context"
	"slices"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/edgerate/edge/rules"
)

// TestReflection: the service answers gRPC server reflection, as grpcurl
// asks it: a client lists the services, fetches the descriptors of the
// rate limit service and calls ShouldRateLimit with a message built from
// them and JSON, knowing no .proto file and no generated type.
func TestReflection(t *testing.T) {
	f := serve(t, rules.RLS{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := reflectionpb.NewServerReflectionClient(f.conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ask := func(req *reflectionpb.ServerReflectionRequest) *reflectionpb.ServerReflectionResponse {
		t.Helper()
		if err := stream.Send(req); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("reflection: %v", err)
		}
		if e := resp.GetErrorResponse(); e != nil {
			t.Fatalf("reflection: %s", e.ErrorMessage)
		}
		return resp
	}

	service := pb.RateLimitService_ServiceDesc.ServiceName
	var services []string
	for _, s := range ask(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{},
	}).GetListServicesResponse().GetService() {
		services = append(services, s.Name)
	}
	for _, want := range []string{service, "grpc.health.v1.Health"} {
		if !slices.Contains(services, want) {
			t.Errorf("services: got %v, want %s among them", services, want)
		}
	}

	// The file of the service and every file it imports, as the server
	// sends them on one stream.
	var set descriptorpb.FileDescriptorSet
	for _, b := range ask(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: service},
	}).GetFileDescriptorResponse().GetFileDescriptorProto() {
		fd := new(descriptorpb.FileDescriptorProto)
		if err := proto.Unmarshal(b, fd); err != nil {
			t.Fatal(err)
		}
		set.File = append(set.File, fd)
	}
	files, err := protodesc.NewFiles(&set)
	if err != nil {
		t.Fatalf("the reflected files do not stand on their own: %v", err)
	}
	d, err := files.FindDescriptorByName(protoreflect.FullName(service))
	if err != nil {
		t.Fatal(err)
	}
	method := d.(protoreflect.ServiceDescriptor).Methods().ByName("ShouldRateLimit")
	if method == nil {
		t.Fatalf("%s has no method ShouldRateLimit", service)
	}

	call := func() string {
		t.Helper()
		req := dynamicpb.NewMessage(method.Input())
		const body = `{"domain":"shop","descriptors":[{"entries":[{"key":"remote_address","value":"192.0.2.1"}]}]}`
		if err := protojson.Unmarshal([]byte(body), req); err != nil {
			t.Fatal(err)
		}
		resp := dynamicpb.NewMessage(method.Output())
		if err := f.conn.Invoke(ctx, "/"+service+"/ShouldRateLimit", req, resp, grpc.WaitForReady(true)); err != nil {
			t.Fatal(err)
		}
		code := method.Output().Fields().ByName("overall_code")
		return string(code.Enum().Values().ByNumber(resp.Get(code).Enum()).Name())
	}
	// basic.yaml: 3 a minute for each remote_address.
	for i, want := range []string{"OK", "OK", "OK", "OVER_LIMIT"} {
		if got := call(); got != want {
			t.Errorf("call %d: overall_code %s, want %s", i+1, got, want)
		}
	}
}
