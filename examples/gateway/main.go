package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/quorate/quorate/client"
	"github.com/quorate/quorate/client/middleware"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
}

type principalKey struct{}

// authenticate puts the bearer token's user in the request context.
func authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if user, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && user != "" {
			r = r.WithContext(context.WithValue(r.Context(), principalKey{}, user))
		}
		next.ServeHTTP(w, r)
	})
}

func principal(ctx context.Context) (string, bool) {
	u, ok := ctx.Value(principalKey{}).(string)
	return u, ok
}

func run() error {
	listen := flag.String("listen", "127.0.0.1:8080", "address to serve on")
	servers := flag.String("server", "http://127.0.0.1:7070,http://127.0.0.1:7071,http://127.0.0.1:7072",
		"Quorate nodes, comma-separated")
	proxies := flag.String("trusted-proxy", "", "comma-separated networks (CIDR) of trusted proxies, whose X-Forwarded-For is believed")
	flag.Parse()

	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	var trusted []netip.Prefix
	for p := range strings.SplitSeq(*proxies, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		n, err := netip.ParsePrefix(p)
		if err != nil {
			return fmt.Errorf("--trusted-proxy: %w", err)
		}
		trusted = append(trusted, n)
	}
	qc, err := client.New(client.Config{Servers: strings.Split(*servers, ","), Caller: "gateway", Timeout: time.Second})
	if err != nil {
		return fmt.Errorf("--server: %w", err)
	}
	defer qc.Close()

	mux := http.NewServeMux()
	mux.HandleFunc("GET /items/{id}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "item %s\n", r.PathValue("id"))
	})
	mux.HandleFunc("POST /items", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintln(w, "created")
	})
	mux.HandleFunc("GET /search", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "results for %q\n", r.URL.Query().Get("q"))
	})

	limiter, err := middleware.New(qc,
		middleware.WithIdentity(middleware.Principal(principal), middleware.Proxies{Trusted: trusted}.ClientIP()),
		middleware.WithLimits(
			middleware.Limit{Name: "per-client", Policy: "api-free", Cost: func(r *http.Request) int64 {
				if r.Method == http.MethodPost {
					return 5
				}
				return 1
			}},
			middleware.Limit{Name: "per-route", Policy: "search", Key: []middleware.KeyFunc{middleware.MuxRoute(mux)}},
		),
		middleware.WithOnUnverified(func(r *http.Request, d *client.Decision) {
			log.Warn("decision without the cluster", "outcome", d.Outcome, "allowed", d.Allowed, "path", r.URL.Path, "cause", d.Cause)
		}),
		middleware.WithOnError(func(r *http.Request, err error) {
			log.Error("admission failed", "path", r.URL.Path, "err", err)
		}),
	)
	if err != nil {
		return err
	}
	root := http.NewServeMux()
	root.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") }) // never limited
	root.Handle("/", authenticate(limiter.Handler(mux)))

	srv := &http.Server{Addr: *listen, Handler: root, ReadHeaderTimeout: 5 * time.Second, MaxHeaderBytes: 64 << 10}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(shutdown)
	}()
	log.Info("serving", "addr", *listen, "quorate", *servers)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
