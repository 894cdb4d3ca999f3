package middleware_test

import (
	"context"
	"log"
	"net/http"
	"net/netip"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/quorate/quorate/client"
	"github.com/quorate/quorate/client/middleware"
)

// A service behind two limits: a budget per client (its authenticated
// principal, else its address through the load balancer) and one per
// client and route template. Both are checked and charged in one atomic
// Admit; every answer carries the RateLimit fields, a denial is 429 with
// Retry-After.
func Example() {
	qc, err := client.New(client.Config{
		Servers: []string{"http://127.0.0.1:7070", "http://127.0.0.1:7071", "http://127.0.0.1:7072"},
		Caller:  "gateway",
	})
	if err != nil {
		log.Fatal(err)
	}
	defer qc.Close()

	mux := http.NewServeMux()
	mux.HandleFunc("GET /items/{id}", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("item " + r.PathValue("id")))
	})
	lb := middleware.Proxies{Trusted: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
	limiter, err := middleware.New(qc,
		middleware.WithIdentity(middleware.Principal(principal), lb.ClientIP()),
		middleware.WithLimits(
			middleware.Limit{Name: "per-client", Policy: "api"},
			middleware.Limit{Name: "per-route", Policy: "per-route", Key: []middleware.KeyFunc{middleware.MuxRoute(mux)}},
		))
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(http.ListenAndServe(":8080", limiter.Handler(mux)))
}

// userKey is the context key under which the service's authentication
// middleware (outside the limiter) puts the authenticated user's name.
type userKey struct{}

// principal returns the authenticated user, if any: without one, the
// client's address is the identity.
func principal(ctx context.Context) (string, bool) {
	u, ok := ctx.Value(userKey{}).(string)
	return u, ok && u != ""
}

// A Connect service limited per caller: the interceptor admits each unary
// call (and each stream, once) before its handler runs; a denial is
// ResourceExhausted with a RetryInfo. The route is the procedure's name.
func ExampleLimiter_Interceptor() {
	qc, err := client.New(client.Config{Servers: []string{"http://127.0.0.1:7070"}})
	if err != nil {
		log.Fatal(err)
	}
	defer qc.Close()
	limiter, err := middleware.New(qc,
		middleware.WithIdentity(middleware.Proxies{}.ClientIP()),
		middleware.WithLimits(middleware.Limit{Policy: "per-procedure", Key: []middleware.KeyFunc{middleware.Route(nil)}}))
	if err != nil {
		log.Fatal(err)
	}
	ping := connect.NewUnaryHandler("/example.v1.PingService/Ping",
		func(context.Context, *connect.Request[emptypb.Empty]) (*connect.Response[emptypb.Empty], error) {
			return connect.NewResponse(&emptypb.Empty{}), nil
		},
		connect.WithInterceptors(limiter.Interceptor()))
	mux := http.NewServeMux()
	mux.Handle("/example.v1.PingService/Ping", ping)
	log.Fatal(http.ListenAndServe(":8080", mux))
}

// The idempotency and refund options: a POST retried with the same
// Idempotency-Key is charged once, and a request the handler fails with a
// 5xx gives its units back. The identity is the tenant the edge proxies
// (10.0.0.0/8) name in X-Tenant; the header of any other peer is ignored.
func ExampleWithIdempotencyKey() {
	qc, err := client.New(client.Config{Servers: []string{"http://127.0.0.1:7070"}})
	if err != nil {
		log.Fatal(err)
	}
	defer qc.Close()
	orders := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) })
	limit := middleware.HTTP(qc,
		middleware.WithIdentity(middleware.Proxies{Trusted: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}.Header("X-Tenant")),
		middleware.WithLimits(middleware.Limit{Policy: "orders"}),
		middleware.WithIdempotencyKey(middleware.HeaderIdempotencyKey),
		middleware.WithRefundOnServerError())
	log.Fatal(http.ListenAndServe(":8080", limit(orders)))
}
