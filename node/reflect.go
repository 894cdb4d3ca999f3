package node

import (
	"net/http"

	"connectrpc.com/connect"
	"connectrpc.com/grpcreflect"

	"github.com/quorate/quorate/envoyrls"
	"github.com/quorate/quorate/proto/quorate/v1/quoratev1connect"
)

// registerReflection serves gRPC server reflection (v1, and v1alpha for
// older tools) on the mux of a server of kind, so that grpcurl and the like
// can list and call the services without the .proto files. It names the
// services that server answers: the API port's AdmissionService,
// LeaseService, Envoy's envoy.service.ratelimit.v3.RateLimitService (with
// Config.EnvoyConfig) and (without an admin listener) AdminService, the
// admin port's AdminService, and each port's grpc.health.v1.Health. The
// peer port's forwarding server has none: only nodes call it.
//
// Reflection reveals the schema only, which is public (proto/ in the
// source), no policy or state. It is still an authorized action
// (access.ActionReflection, in the routing class): anyone may call it on a
// node without an access file (open on loopback only), and under one any
// caller with a role, like Routes; an anonymous caller is refused. Streams
// need HTTP/2 (cleartext HTTP/2 is served, as grpcurl -plaintext speaks).
// withEnvoy: the node serves Envoy's service; adminElsewhere: it has an
// admin listener.
func registerReflection(mux *http.ServeMux, kind serverKind, opts connect.HandlerOption, withEnvoy, adminElsewhere bool) {
	if kind == servePeer {
		return
	}
	var services []string
	if kind == serveAPI {
		services = append(services, quoratev1connect.AdmissionServiceName, quoratev1connect.LeaseServiceName)
		if withEnvoy {
			services = append(services, envoyrls.ServiceName)
		}
	}
	if kind == serveAdmin || !adminElsewhere {
		services = append(services, quoratev1connect.AdminServiceName)
	}
	services = append(services, healthServiceName)
	reflector := grpcreflect.NewStaticReflector(services...)
	mux.Handle(grpcreflect.NewHandlerV1(reflector, opts))
	mux.Handle(grpcreflect.NewHandlerV1Alpha(reflector, opts))
}

// healthServiceName is the gRPC health service's full name.
const healthServiceName = "grpc.health.v1.Health"

// The reflection procedures, in the authorization table (auth.go).
const (
	reflectionV1Procedure      = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"
	reflectionV1AlphaProcedure = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"
)
